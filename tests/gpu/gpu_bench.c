/* gpu_bench.c - timings of the GPU path: the full call and the kernel alone per
 * method, and each preprocessing pass alone.  Correctness: gpu_check.c.
 *
 *   gpu_bench bench B H Sq Skv D [iters]       times full call and kernel alone, 3 methods
 *   gpu_bench prepbench B H Sq Skv D [iters]   each preprocessing pass alone (GB/s of
 *                                              its bytes read + written) vs a cudaMemcpy D2D
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/preprocess/prep_debug.h" /* the preprocessing knob (this thread's) */
#include "gpu_inputs.h"
#include "vcattn.h"

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float time_median(int iters, float *t) {
    qsort(t, (size_t)iters, sizeof(float), cmp_float);
    return t[iters / 2];
}

/* Milliseconds from e0 (recorded on the default stream before the timed work)
 * to now on that stream: records e1 and waits for it. */
static float ms_since(cudaEvent_t e0, cudaEvent_t e1) {
    float ms;
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

/* name is one of the comma-separated entries of list (whole names only) */
static int method_listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static int run_bench(int64_t B, int64_t H, int64_t Sq, int64_t Skv, int64_t D, int iters) {
    shape_t s = {B, H, Sq, Skv, D, 0, 0, 0, 0, 1, 0, 0};
    /* random inputs made on the GPU side in bulk would be faster; host randn is fine here */
    const int64_t nq = B * H * Sq * D, nk = B * H * Skv * D;
    inputs_t in;
    bench_inputs(B, H, Sq, Skv, D, &in);
    /* identity-free plan: a random permutation per head would cost host time at 118K x 40; use NULL */
    double flops = 4.0 * B * H * (double)Sq * Skv * D;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const char *only = getenv("VC_BENCH_METHODS"); /* comma-separated method names; unset: all */
    /* VC_BENCH_EXACT_HEADS=n: the first n heads of every batch item with the exact P (a plan's
     * head recipes), for the methods that have an exact sibling; the line says "+n exact" */
    const char *ex = getenv("VC_BENCH_EXACT_HEADS");
    const int n_exact = ex ? atoi(ex) : 0;
    uint8_t *dexact = NULL;
    if (n_exact > 0) {
        uint8_t *h = (uint8_t *)calloc((size_t)(B * H), 1);
        for (int64_t i = 0; i < B * H; ++i) h[i] = (uint8_t)(i % H < n_exact);
        CK(cudaMalloc((void **)&dexact, (size_t)(B * H)));
        CK(cudaMemcpy(dexact, h, (size_t)(B * H), cudaMemcpyHostToDevice));
        free(h);
    }
    FOR_GPU_METHODS(m) {
        if (only && !method_listed(only, vcattn_method_name(m))) continue;
        vcattn_gpu_params p;
        gpu_params(&s, &in, m, &p);
        p.lse = NULL;
        vcattn_method_config mc, exact_cfg;
        VK(vcattn_method_config_get(m, &mc));
        if (dexact && vcattn_method_exact_p(&mc, &exact_cfg) == VCATTN_STATUS_SUCCESS) p.head_exact = dexact;
        size_t wsb;
        VK(vcattn_gpu_workspace_size(&p, &wsb));
        void *ws;
        CK(cudaMalloc(&ws, wsb));
        float t_full[64], t_kern[64], t_prep[64];
        for (int it = -2; it < iters; ++it) {
            CK(cudaEventRecord(e0, 0));
            VK(vcattn_gpu_preprocess(&p, ws, wsb, NULL));
            const float ms_prep = ms_since(e0, e1);
            CK(cudaEventRecord(e0, 0));
            VK(vcattn_gpu_attention_kernel(&p, ws, wsb, NULL));
            const float ms_k = ms_since(e0, e1);
            CK(cudaEventRecord(e0, 0));
            VK(vcattn_gpu_attention(&p, ws, wsb, NULL));
            const float ms_f = ms_since(e0, e1);
            if (it >= 0) { t_full[it] = ms_f; t_kern[it] = ms_k; t_prep[it] = ms_prep; }
        }
        CK(cudaGetLastError());
        const float mf = time_median(iters, t_full), mk = time_median(iters, t_kern), mp = time_median(iters, t_prep);
        /* bytes the preprocessing must move: read Q, K twice, V twice; write codes */
        double pbytes = 2.0 * nq + 2.0 * 2 * nk + 2.0 * 2 * nk + (double)nq + 2.0 * nk;
        char name[64];
        snprintf(name, sizeof name, "%s%s", vcattn_method_name(m), p.head_exact ? "+exact" : "");
        printf("BENCH %-21s (%lld,%lld,%lld,%lld,%lld) full %.3f ms (%.0f TFLOP/s) kernel %.3f ms (%.0f TFLOP/s) prep %.3f ms (%.0f GB/s)%s\n",
               name,
               (long long)B, (long long)H, (long long)Sq, (long long)Skv, (long long)D, mf, flops / mf * 1e-9, mk, flops / mk * 1e-9, mp, pbytes / mp * 1e-6,
               p.head_exact ? " (exact P on the first VC_BENCH_EXACT_HEADS heads)" : "");
        CK(cudaFree(ws));
    }
    cudaFree(in.dq); cudaFree(in.dk); cudaFree(in.dv); cudaFree(in.dout);
    cudaFree(dexact);
    return 0;
}

/* bytes each pass must read + write (inputs once, every output array once) */
static void prep_pass_bytes(int64_t B, int64_t H, int64_t Sq, int64_t Skv, int64_t D, int lse, int vsmooth, double by[5]) {
    const double BH = (double)(B * H), sqp = (double)((Sq + 127) / 128 * 128), skp = (double)((Skv + 127) / 128 * 128);
    const double nkb = skp / 128, nchunk = (double)((Skv + 1023) / 1024);
    const double in_k = BH * Skv * D * 2, in_q = BH * Sq * D * 2;
    by[0] = in_k + BH * nchunk * 128 * 8 + BH * D * 4;                         /* K mean (+ partials, mean) */
    by[1] = in_k + BH * skp * 128 + BH * nkb * 4 * 4;                          /* K codes, scales */
    by[2] = in_q + BH * sqp * 128 + BH * (sqp / 64) * 32 * 4 + (lse ? BH * Sq * 4 : 0); /* Q codes, scales */
    by[3] = in_k + (vsmooth ? BH * nkb * 128 * 4 : 0);                        /* V: block means */
    by[4] = in_k + BH * 128 * skp + BH * 128 * 4 +                            /* V^T codes, scales */
            (vsmooth ? BH * nkb * 128 * (4 + 4 + 16) : 0); /* block means in, FP16 means x2 out */
}

static int run_prepbench(int64_t B, int64_t H, int64_t Sq, int64_t Skv, int64_t D, int iters) {
    shape_t s = {B, H, Sq, Skv, D, 0, 0, 0, 0, 1, 0, 0};
    const int64_t nq = B * H * Sq * D;
    inputs_t in;
    bench_inputs(B, H, Sq, Skv, D, &in);
    /* a random V-Smooth permutation per head (the gather the real plans make) */
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B * H * Skv));
    for (int64_t bh = 0; bh < B * H; ++bh) {
        int32_t *p = perm + bh * Skv;
        for (int64_t j = 0; j < Skv; ++j) p[j] = (int32_t)j;
        for (int64_t j = Skv - 1; j > 0; --j) {
            int64_t r = (int64_t)(rnd_u64() % (uint64_t)(j + 1));
            int32_t t = p[j]; p[j] = p[r]; p[r] = t;
        }
    }
    int32_t *dperm;
    CK(cudaMalloc((void **)&dperm, sizeof(int32_t) * (size_t)(B * H * Skv)));
    CK(cudaMemcpy(dperm, perm, sizeof(int32_t) * (size_t)(B * H * Skv), cudaMemcpyHostToDevice));
    free(perm);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[64];
    /* the copy reference: D2D of the Q input's size, bytes read + written */
    double cbytes = 2.0 * nq;
    for (int it = -2; it < iters; ++it) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(in.dout, in.dq, (size_t)cbytes, cudaMemcpyDeviceToDevice, 0));
        const float ms = ms_since(e0, e1);
        if (it >= 0) t[it] = ms;
    }
    float mc = time_median(iters, t);
    double copy_gbs = 2 * cbytes / mc * 1e-6;
    printf("PREPBENCH (%lld,%lld,%lld,%lld,%lld) memcpy D2D %.0f MB: %.3f ms = %.0f GB/s (read + write)\n", (long long)B,
           (long long)H, (long long)Sq, (long long)Skv, (long long)D, cbytes * 1e-6, mc, copy_gbs);
    static const char *pname[5] = {"K mean", "K quantize", "Q quantize", "V stats", "V quantize"};
    struct { const char *name; vcattn_method m; int perm, lse; } cfg[] = {
        {"vsmooth", VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT, 0, 0},
        {"vsmooth+perm+lse", VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT, 1, 1},
        {"sage2", VCATTN_METHOD_SAGE2_8BIT, 0, 0},
    };
    for (int ci = 0; ci < 3; ++ci) {
        vcattn_gpu_params p;
        gpu_params(&s, &in, cfg[ci].m, &p);
        p.perm = cfg[ci].perm ? dperm : NULL;
        p.lse = cfg[ci].lse ? (float *)in.dout : NULL; /* only q_km matters here; dout is scratch */
        double by[5];
        prep_pass_bytes(B, H, Sq, Skv, D, cfg[ci].lse, cfg[ci].m != VCATTN_METHOD_SAGE2_8BIT, by);
        size_t wsb;
        VK(vcattn_gpu_workspace_size(&p, &wsb));
        void *ws;
        CK(cudaMalloc(&ws, wsb));
        for (int impl = 1; impl >= 0; --impl) {
            double tot = 0, sum_ms = 0;
            for (int ps = -1; ps < 5; ++ps) {
                unsigned mask = ps < 0 ? 31u : 1u << ps;
                vcattn_gpu_prep_debug(impl, 31u);
                VK(vcattn_gpu_preprocess(&p, ws, wsb, NULL)); /* every input of the pass is in place */
                vcattn_gpu_prep_debug(impl, mask);
                for (int it = -2; it < iters; ++it) {
                    CK(cudaEventRecord(e0, 0));
                    VK(vcattn_gpu_preprocess(&p, ws, wsb, NULL));
                    const float ms = ms_since(e0, e1);
                    if (it >= 0) t[it] = ms;
                }
                float ms = time_median(iters, t);
                if (ps < 0) {
                    tot = ms;
                    continue;
                }
                sum_ms += ms;
                double gbs = by[ps] / ms * 1e-6;
                printf("PREP %-16s %-6s %-10s %8.3f ms %7.1f MB %6.0f GB/s %5.1f%% of copy\n", cfg[ci].name,
                       impl ? "scalar" : "vector", pname[ps], ms, by[ps] * 1e-6, gbs, 100.0 * gbs / copy_gbs);
            }
            double all = by[0] + by[1] + by[2] + by[3] + by[4];
            printf("PREP %-16s %-6s %-10s %8.3f ms %7.1f MB %6.0f GB/s %5.1f%% of copy (passes alone: %.3f ms)\n",
                   cfg[ci].name, impl ? "scalar" : "vector", "all", tot, all * 1e-6, all / tot * 1e-6,
                   100.0 * all / tot * 1e-6 / copy_gbs, sum_ms);
        }
        vcattn_gpu_prep_debug(0, 31u);
        CK(cudaFree(ws));
    }
    CK(cudaGetLastError());
    cudaFree(dperm);
    cudaFree(in.dq); cudaFree(in.dk); cudaFree(in.dv); cudaFree(in.dout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        printf("usage: %s bench B H Sq Skv D [iters] | prepbench B H Sq Skv D [iters]\n", argv[0]);
        return 2;
    }
    if (!have_sm90()) return 77;
    int iters = argc > 7 ? atoi(argv[7]) : 10;
    if (iters < 1) iters = 1;
    if (iters > 64) iters = 64;
    if (!strcmp(argv[1], "prepbench"))
        return run_prepbench(atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), atoll(argv[5]), atoll(argv[6]), iters);
    if (!strcmp(argv[1], "bench"))
        return run_bench(atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), atoll(argv[5]), atoll(argv[6]), iters);
    printf("bad arguments\n");
    return 2;
}
