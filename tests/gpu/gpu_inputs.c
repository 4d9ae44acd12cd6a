/* gpu_inputs.c - the input builders of the GPU check and benchmark (gpu_inputs.h). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_inputs.h"
#include "numerics.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
uint64_t rnd_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
double rnd_unif(void) { return ((rnd_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
float rnd_normal(void) {
    double u = rnd_unif(), v = rnd_unif();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static uint16_t to_half_bits(float x) { /* x already representable */
    uint32_t u = vc_f32_bits(x), s = (u >> 16) & 0x8000u;
    float a = fabsf(x);
    if (a == 0.0f) return (uint16_t)s;
    int e;
    float f = frexpf(a, &e); /* a = f 2^e */
    if (e - 1 < -14) return (uint16_t)(s | (uint32_t)ldexpf(a, 24));
    return (uint16_t)(s | ((uint32_t)(e - 1 + 15) << 10) | ((uint32_t)(ldexpf(f, 11) - 1024.0f)));
}

void strides_of(const shape_t *s, int64_t S, int64_t st[3]) {
    if (s->bshd) { st[0] = S * s->H * s->D; st[1] = s->D; st[2] = s->H * s->D; }
    else { st[0] = s->H * S * s->D; st[1] = S * s->D; st[2] = s->D; }
}

static void upload(const shape_t *s, const float *x, int64_t S, void *dst) {
    int64_t n = s->B * s->H * S * s->D, st[3];
    strides_of(s, S, st);
    uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t b = 0; b < s->B; ++b)
        for (int64_t hh = 0; hh < s->H; ++hh)
            for (int64_t i = 0; i < S; ++i)
                for (int64_t d = 0; d < s->D; ++d) {
                    float v = x[((b * s->H + hh) * S + i) * s->D + d];
                    h[b * st[0] + hh * st[1] + i * st[2] + d] = s->fp16_in ? to_half_bits(v) : vc_bf16_bits(v);
                }
    CK(cudaMemcpy(dst, h, sizeof(uint16_t) * (size_t)n, cudaMemcpyHostToDevice));
    free(h);
}

static float round_in(const shape_t *s, float x) { return s->fp16_in ? vc_fp16_round(x) : vc_bf16_round(x); }

void make_inputs(const shape_t *s, inputs_t *in) {
    int64_t nq = s->B * s->H * s->Sq * s->D, nk = s->B * s->H * s->Skv * s->D;
    in->q = (float *)malloc(sizeof(float) * (size_t)nq);
    in->k = (float *)malloc(sizeof(float) * (size_t)nk);
    in->v = (float *)malloc(sizeof(float) * (size_t)nk);
    float qk_gain = s->outliers ? 2.0f : 1.0f;
    const float q_gain = s->q_gain != 0.0f ? s->q_gain : 1.0f;
    for (int64_t i = 0; i < nq; ++i) {
        const int64_t row = i / s->D % s->Sq; /* the host copy is (B,H,S,D) */
        in->q[i] = round_in(s, (row >= s->q_gain_from ? q_gain : 1.0f) * qk_gain * rnd_normal());
    }
    for (int64_t bh = 0; bh < s->B * s->H; ++bh) {
        float koff[128];
        for (int d = 0; d < s->D; ++d) koff[d] = s->outliers ? 5.0f * rnd_normal() : 0.0f;
        for (int64_t j = 0; j < s->Skv; ++j) {
            int outlier = s->outliers && rnd_unif() < 0.005;
            int c0 = (int)(rnd_u64() % (uint64_t)(s->D - 8));
            for (int d = 0; d < s->D; ++d) {
                int64_t i = (bh * s->Skv + j) * s->D + d;
                in->k[i] = round_in(s, qk_gain * rnd_normal() + koff[d]);
                float v = rnd_normal() + (s->outliers ? 0.5f : 0.0f);
                if (outlier && d >= c0 && d < c0 + 8) v *= 20.0f;
                in->v[i] = round_in(s, v);
            }
        }
    }
    in->perm = NULL;
    in->dperm = NULL;
    if (s->use_perm) {
        int64_t n = s->B * s->H * s->Skv;
        in->perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t bh = 0; bh < s->B * s->H; ++bh) {
            int32_t *p = in->perm + bh * s->Skv;
            for (int64_t j = 0; j < s->Skv; ++j) p[j] = (int32_t)j;
            for (int64_t j = s->Skv - 1; j > 0; --j) {
                int64_t r = (int64_t)(rnd_u64() % (uint64_t)(j + 1));
                int32_t t = p[j]; p[j] = p[r]; p[r] = t;
            }
        }
        CK(cudaMalloc((void **)&in->dperm, sizeof(int32_t) * (size_t)n));
        CK(cudaMemcpy(in->dperm, in->perm, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice));
    }
    CK(cudaMalloc(&in->dq, 2 * (size_t)nq));
    CK(cudaMalloc(&in->dk, 2 * (size_t)nk));
    CK(cudaMalloc(&in->dv, 2 * (size_t)nk));
    CK(cudaMalloc(&in->dout, 2 * (size_t)nq));
    CK(cudaMalloc((void **)&in->dlse, sizeof(float) * (size_t)(s->B * s->H * s->Sq)));
    upload(s, in->q, s->Sq, in->dq);
    upload(s, in->k, s->Skv, in->dk);
    upload(s, in->v, s->Skv, in->dv);
}

void free_inputs(inputs_t *in) {
    free(in->q); free(in->k); free(in->v); free(in->perm);
    cudaFree(in->dq); cudaFree(in->dk); cudaFree(in->dv); cudaFree(in->dout); cudaFree(in->dlse);
    if (in->dperm) cudaFree(in->dperm);
}

void gpu_params(const shape_t *s, const inputs_t *in, vcattn_method m, vcattn_gpu_params *p) {
    vcattn_gpu_params_init(p, s->B, s->H, s->Sq, s->Skv, s->D, in->dq, in->dk, in->dv, in->dout);
    p->method = m;
    p->input_dtype = s->fp16_in ? VCATTN_GPU_DTYPE_FP16 : VCATTN_GPU_DTYPE_BF16;
    p->output_dtype = s->fp16_out ? VCATTN_GPU_DTYPE_FP16 : VCATTN_GPU_DTYPE_BF16;
    strides_of(s, s->Sq, p->q_stride);
    strides_of(s, s->Sq, p->o_stride);
    strides_of(s, s->Skv, p->k_stride);
    strides_of(s, s->Skv, p->v_stride);
    p->perm = in->dperm;
    p->lse = in->dlse;
}

/* Device BF16 inputs for the benchmarks: q (B,H,Sq,D), k and v (B,H,Skv,D), out.
 * A 16M-element random chunk, tiled at random 128-aligned offsets: host randn
 * over 10^9 elements would cost more than the benchmark. */
void bench_inputs(int64_t B, int64_t H, int64_t Sq, int64_t Skv, int64_t D, inputs_t *in) {
    const int64_t nq = B * H * Sq * D, nk = B * H * Skv * D;
    memset(in, 0, sizeof *in);
    const int64_t chunk = (int64_t)1 << 24;
    uint16_t *h = (uint16_t *)malloc(2 * (size_t)chunk);
    CK(cudaMalloc(&in->dq, 2 * (size_t)nq));
    CK(cudaMalloc(&in->dk, 2 * (size_t)nk));
    CK(cudaMalloc(&in->dv, 2 * (size_t)nk));
    CK(cudaMalloc(&in->dout, 2 * (size_t)nq));
    void *dst[3] = {in->dq, in->dk, in->dv};
    int64_t cnt[3] = {nq, nk, nk};
    for (int64_t i = 0; i < chunk; ++i) h[i] = vc_bf16_bits(rnd_normal());
    for (int t = 0; t < 3; ++t)
        for (int64_t i0 = 0; i0 < cnt[t]; i0 += chunk) {
            int64_t n = cnt[t] - i0 < chunk ? cnt[t] - i0 : chunk;
            int64_t off = (int64_t)(rnd_u64() % (uint64_t)(chunk - n + 1)) & ~(int64_t)127;
            CK(cudaMemcpy((uint16_t *)dst[t] + i0, h + off, 2 * (size_t)n, cudaMemcpyHostToDevice));
        }
    free(h);
}

int have_sm90(void) {
    vcattn_status ds = vcattn_gpu_device_check();
    if (ds == VCATTN_STATUS_SUCCESS) return 1;
    printf("no sm_90 device: %s\n", vcattn_status_string(ds));
    return 0;
}
