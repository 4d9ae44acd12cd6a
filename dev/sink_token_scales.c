/* sink_token_scales.c - would per-token INT8 scales for Q and K lift the sink heads?
 * (issue "Faithful on every head": layers dominated by sink heads stay under +1 dB over
 * sage2-8bit; docs/fidelity-analysis.md, "Heads that lose", puts the loss in K's INT8
 * per-thread groups and the sinks' own rounding.)
 *
 * In the CPU simulation, on a workload preset with sink heads, per head, PSNR over
 * sage2-8bit on sampled rows (each exact over all keys, FP64 reference):
 *   split, k-means order         the default as shipped
 *   split, sequence order        the per-head recipe the plan picks for sink heads
 *   split, per-token Q/K INT8    Q and K quantized per token (K after its channel mean is
 *                                subtracted, as the kernel smooths it) in this program, then
 *                                given to the simulation as FP32 (qk_format FP32): what a
 *                                kernel with a scale per key (and per query row) would see
 *     + 16 largest-V keys exact  the same with the keys of the 16 tokens of largest |V| per
 *                                head (the sinks) exact
 *     + 16 most-attended exact   ... or of the 16 keys with the most attention mass on the
 *                                sampled rows (exact softmax): a choice a plan could make
 *     exact Q, per-token K       which of the two operands limits
 *   split, exact Q/K             the upper bound of any Q/K recipe
 * V, P, V-Smooth and the restore are the split's in all four.  Not built by CMake:
 *
 *   cc -O2 -Wall -Iinclude dev/sink_token_scales.c build/libvcattn.a -lm -lpthread -o /tmp/sink_scales
 *   /tmp/sink_scales [preset=video-9600-sinks] [rows=512] [seed offset=0]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vcattn.h"

static void quant_rows_int8(float *x, int64_t rows, int64_t d, const float *mean) {
    for (int64_t r = 0; r < rows; ++r) {
        float *v = x + r * d;
        double amax = 0;
        for (int64_t i = 0; i < d; ++i) amax = fmax(amax, fabs(v[i] - (mean ? mean[i] : 0.0f)));
        const double s = amax > 0 ? amax / 127.0 : 1.0;
        for (int64_t i = 0; i < d; ++i) {
            const double c = rint((v[i] - (mean ? mean[i] : 0.0f)) / s);
            v[i] = (float)(c * s + (mean ? mean[i] : 0.0f));
        }
    }
}

static double psnr_head(const float *ref, const float *out, int64_t n) {
    vcattn_fidelity f;
    return vcattn_fidelity_compare(ref, out, n, &f) == VCATTN_STATUS_SUCCESS ? f.psnr_db : NAN;
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "video-9600-sinks";
    const int64_t NR = argc > 2 ? atoll(argv[2]) : 512;
    vcattn_workload_params wp;
    if (vcattn_workload_preset(preset, &wp) != VCATTN_STATUS_SUCCESS) return fprintf(stderr, "preset?\n"), 2;
    if (argc > 3) wp.seed += (uint64_t)atoll(argv[3]);
    const int64_t H = wp.heads, S = wp.frames * wp.height * wp.width, D = wp.head_dim, n = H * S * D;
    float *q = malloc(sizeof(float) * n), *k = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    if (vcattn_workload_generate(&wp, q, k, v) != VCATTN_STATUS_SUCCESS) return 1;
    int64_t *rows = malloc(sizeof(int64_t) * NR);
    vcattn_strided_rows(S, NR, rows);
    const int64_t no = H * NR * D;
    float *ref = malloc(sizeof(float) * no), *out = malloc(sizeof(float) * no);
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, 1, H, S, S, D, q, k, v, ref);
    p.o_stride[0] = H * NR * D;
    p.o_stride[1] = NR * D;
    p.o_stride[2] = D;
    if (vcattn_reference_attention_rows(&p, rows, NR) != VCATTN_STATUS_SUCCESS) return 1;

    int32_t *perm = malloc(sizeof(int32_t) * H * S), *ident = malloc(sizeof(int32_t) * H * S);
    vcattn_kmeans_params kp;
    vcattn_kmeans_params_init(&kp);
    if (vcattn_vsmooth_plan(v, 1, H, S, D, p.v_stride, &kp, perm, NULL, NULL) != VCATTN_STATUS_SUCCESS) return 1;
    for (int64_t i = 0; i < H * S; ++i) ident[i] = (int32_t)(i % S);

    /* per-token INT8 Q and K (K about its per-head channel mean) */
    float *qt = malloc(sizeof(float) * n), *kt = malloc(sizeof(float) * n), *mean = malloc(sizeof(float) * D);
    memcpy(qt, q, sizeof(float) * n);
    memcpy(kt, k, sizeof(float) * n);
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < D; ++i) {
            double m = 0;
            for (int64_t s = 0; s < S; ++s) m += k[(h * S + s) * D + i];
            mean[i] = (float)(m / S);
        }
        quant_rows_int8(qt + h * S * D, S, D, NULL);
        quant_rows_int8(kt + h * S * D, S, D, mean);
    }

    /* the same, but the 16 tokens of largest |V| per head (the sinks carry massive V) keep an
     * exact K: what a few high-precision keys beside the INT8 ones would buy */
    float *kx = malloc(sizeof(float) * n);
    memcpy(kx, kt, sizeof(float) * n);
    double *vn = malloc(sizeof(double) * S);
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < S; ++t) {
            const float *vv = v + (h * S + t) * D;
            vn[t] = 0;
            for (int64_t i = 0; i < D; ++i) vn[t] += (double)vv[i] * vv[i];
        }
        for (int top = 0; top < 16; ++top) { /* the largest remaining |V|, its K exact */
            int64_t best = 0;
            for (int64_t t = 1; t < S; ++t)
                if (vn[t] > vn[best]) best = t;
            memcpy(kx + (h * S + best) * D, k + (h * S + best) * D, sizeof(float) * D);
            vn[best] = -1.0;
        }
    }

    /* ... or the 16 keys that take the most attention mass on the sampled rows (exact softmax):
     * a choice a plan could make from the rows it measures, without knowing how sinks look */
    float *km = malloc(sizeof(float) * n);
    memcpy(km, kt, sizeof(float) * n);
    double *mass = malloc(sizeof(double) * S), *sc = malloc(sizeof(double) * S);
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < S; ++t) mass[t] = 0;
        for (int64_t r = 0; r < NR; ++r) {
            const float *qr = q + (h * S + rows[r]) * D;
            double mx = -INFINITY, sum = 0;
            for (int64_t t = 0; t < S; ++t) {
                const float *kr = k + (h * S + t) * D;
                double d = 0;
                for (int64_t i = 0; i < D; ++i) d += (double)qr[i] * kr[i];
                sc[t] = d * scale;
                mx = fmax(mx, sc[t]);
            }
            for (int64_t t = 0; t < S; ++t) sum += (sc[t] = exp(sc[t] - mx));
            for (int64_t t = 0; t < S; ++t) mass[t] += sc[t] / sum;
        }
        for (int top = 0; top < 16; ++top) {
            int64_t best = 0;
            for (int64_t t = 1; t < S; ++t)
                if (mass[t] > mass[best]) best = t;
            memcpy(km + (h * S + best) * D, k + (h * S + best) * D, sizeof(float) * D);
            mass[best] = -1.0;
        }
    }

    vcattn_method_config sage, split, split_f32;
    vcattn_method_config_get(VCATTN_METHOD_SAGE2_8BIT, &sage);
    vcattn_method_config_get(VCATTN_METHOD_VSMOOTH_SPLIT_BLOCKMAX_8BIT, &split);
    split_f32 = split;
    split_f32.qk_format = VCATTN_QK_FORMAT_FP32;
    struct {
        const char *name;
        const vcattn_method_config *cfg;
        const float *q, *k;
        const int32_t *perm;
    } runs[] = {{"sage2-8bit", &sage, q, k, NULL},
                {"split, k-means order", &split, q, k, perm},
                {"split, sequence order", &split, q, k, ident},
                {"split, per-token Q/K INT8", &split_f32, qt, kt, perm},
                {"  + 16 largest-V keys exact", &split_f32, qt, kx, perm},
                {"  + 16 most-attended exact", &split_f32, qt, km, perm},
                {"  exact Q, per-token K", &split_f32, q, kt, perm},
                {"split, exact Q/K", &split_f32, q, k, perm}};
    const int nrun = (int)(sizeof runs / sizeof runs[0]);
    double ps[16][64], layer[16];
    for (int r = 0; r < nrun; ++r) {
        p.q = runs[r].q;
        p.k = runs[r].k;
        p.o = out;
        vcattn_status st = vcattn_simulate_attention_rows(&p, runs[r].cfg, runs[r].perm, rows, NR, NULL);
        if (st) return fprintf(stderr, "%s: %s\n", runs[r].name, vcattn_status_string(st)), 1;
        for (int64_t h = 0; h < H && h < 64; ++h) ps[r][h] = psnr_head(ref + h * NR * D, out + h * NR * D, NR * D);
        layer[r] = psnr_head(ref, out, no);
    }
    printf("%s (seed %llu), %lld rows per head, PSNR over sage2-8bit (dB); sage2-8bit itself in the first row\n",
           preset, (unsigned long long)wp.seed, (long long)NR);
    printf("%-28s %8s", "", "layer");
    for (int64_t h = 0; h < H; ++h) printf(" %7s%lld", "head ", (long long)h);
    printf("\n%-28s %8.2f", runs[0].name, layer[0]);
    for (int64_t h = 0; h < H; ++h) printf(" %8.2f", ps[0][h]);
    printf("\n");
    for (int r = 1; r < nrun; ++r) {
        printf("%-28s %+8.2f", runs[r].name, layer[r] - layer[0]);
        for (int64_t h = 0; h < H; ++h) printf(" %+8.2f", ps[r][h] - ps[0][h]);
        printf("\n");
    }
    return 0;
}
