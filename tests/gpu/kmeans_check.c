/* kmeans_check.c - GPU V-Smooth grouping on the H200: correctness against the
 * CPU planner, determinism, warm start.  Timing: kmeans_bench.c.
 *
 *   kmeans_check check            correctness at small/medium shapes
 * Prints "N passed, N failed", and "HASH ..." lines (FNV-1a of the permutation, labels and
 * centroids) for each checked run, so that two builds can be compared result for result
 * (diff their HASH lines). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_inputs.h"
#include "numerics.h"
#include "vcattn.h"

static int g_pass, g_fail;
#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (cond) ++g_pass;                                                   \
        else { ++g_fail; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } \
    } while (0)

/* perm valid, labels non-decreasing along it, stable inside clusters, and each
 * label (near-)nearest among the returned centroids */
static void check_structure(const input *in, const run *r, const char *what) {
    int64_t BH = in->B * in->H, S = in->S, D = in->D, K = r->p.clusters;
    int bad_perm = 0, bad_order = 0, bad_near = 0;
    unsigned char *seen = malloc((size_t)S);
    for (int64_t bh = 0; bh < BH; ++bh) {
        const int32_t *pm = r->perm + bh * S, *lb = r->labels + bh * S;
        memset(seen, 0, (size_t)S);
        for (int64_t j = 0; j < S; ++j) {
            if (pm[j] < 0 || pm[j] >= S || seen[pm[j]]) { bad_perm++; break; }
            seen[pm[j]] = 1;
            if (j > 0) {
                int32_t a = lb[pm[j - 1]], b = lb[pm[j]];
                if (a > b || (a == b && pm[j - 1] > pm[j])) bad_order++;
            }
        }
        for (int64_t s = 0; s < S; s += 97) { /* sampled nearest-centroid check */
            const float *x = in->v + (bh * S + s) * D;
            double best = INFINITY, mine = 0;
            for (int64_t c = 0; c < K; ++c) {
                const float *cc = r->cent + (bh * K + c) * D;
                double d2 = 0;
                for (int64_t d = 0; d < D; ++d) d2 += ((double)x[d] - cc[d]) * ((double)x[d] - cc[d]);
                if (d2 < best) best = d2;
                if (c == lb[s]) mine = d2;
            }
            /* the product runs in BF16: allow its rounding */
            if (mine > best * 1.02 + 1e-3) bad_near++;
        }
    }
    free(seen);
    EXPECT(bad_perm == 0, "%s: perm is not a permutation", what);
    EXPECT(bad_order == 0, "%s: %d order violations", what, bad_order);
    EXPECT(bad_near == 0, "%s: %d sampled tokens not at their nearest centroid", what, bad_near);
}

static double energy_share(const input *in, const int32_t *perm) {
    const int64_t vs[3] = {in->H * in->S * in->D, in->S * in->D, in->D};
    double share = -1;
    VC_OK(vcattn_block_energy_share(in->v, in->B, in->H, in->S, in->D, vs, perm, perm ? in->S : 0, &share));
    return share;
}

/* FP16 bits of x (round to nearest even; the inputs here are BF16 values, exact in FP16
 * unless FP16-subnormal) */
static uint16_t f16_bits(float x) {
    uint16_t sign = x < 0 ? 0x8000u : 0u;
    double a = fabs((double)x);
    if (a == 0) return sign;
    int e;
    double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    e -= 1;                  /* a = (2m) 2^e */
    if (e > 15) return sign | 0x7C00u;
    if (e < -14) return sign | (uint16_t)nearbyint(a * 16777216.0); /* subnormal: units of 2^-24 */
    unsigned mant = (unsigned)nearbyint((2 * m - 1) * 1024.0);
    if (mant == 1024) { mant = 0; e += 1; }
    return sign | (uint16_t)((e + 15) << 10) | (uint16_t)mant;
}

/* The other paths of the fused kernel (and the K > 64 one): k, head_dim Dv (the first Dv
 * channels of `base`), FP16 input, V 2 bytes off 16-byte alignment (no cp.async).
 * Structure, determinism, and a block-energy share above sequence order. */
static void variant_check(const input *base, int k, int Dv, int fp16, int misalign) {
    input in = *base;
    in.D = Dv;
    size_t n = (size_t)(in.B * in.H * in.S * Dv);
    in.v = malloc(n * 4);
    uint16_t *bits = malloc(n * 2);
    for (size_t t = 0; t < (size_t)(in.B * in.H * in.S); ++t)
        for (int64_t d = 0; d < Dv; ++d) {
            float x = base->v[t * base->D + d];
            uint16_t b = fp16 ? f16_bits(x) : vc_bf16_bits(x);
            bits[t * Dv + d] = b;
            in.v[t * Dv + d] = fp16 ? vc_fp16_to_f32(b) : vc_bf16_to_f32(b);
        }
    void *alloc = NULL;
    CUDA_OK(cudaMalloc(&alloc, n * 2 + 16));
    in.dv = (char *)alloc + (misalign ? 2 : 0);
    CUDA_OK(cudaMemcpy(in.dv, bits, n * 2, cudaMemcpyHostToDevice));
    char what[96];
    snprintf(what, sizeof what, "k%d D%d %s%s S%lld", k, Dv, fp16 ? "fp16" : "bf16", misalign ? " unaligned" : "",
             (long long)in.S);
    run r;
    run_setup(&r, &in, k);
    r.p.dtype = fp16 ? VCATTN_GPU_DTYPE_FP16 : VCATTN_GPU_DTYPE_BF16;
    run_exec(&r, &in);
    check_structure(&in, &r, what);
    print_hash(&in, &r, what);
    size_t nl = (size_t)(in.B * in.H * in.S);
    int32_t *perm1 = malloc(nl * 4);
    memcpy(perm1, r.perm, nl * 4);
    run_exec(&r, &in);
    EXPECT(!memcmp(perm1, r.perm, nl * 4), "%s: two runs differ", what);
    double share = energy_share(&in, r.perm);
    printf("variant %s: block-energy share %.2f%%\n", what, 100 * share);
    EXPECT(share > energy_share(&in, NULL), "%s: share %.4f not above sequence order", what, share);
    free(perm1);
    free(bits);
    run_free(&r);
    free(in.v);
    cudaFree(alloc);
}

/* The same V in another memory layout - (B,S,H,D), or (B,H,S,D) rows padded to D + 8 -
 * must give the same permutation, labels and centroids bit for bit as the contiguous
 * (B,H,S,D) run `ref` (k = 64, default iterations): the strides reach the loads (the TMA
 * map takes them as they come, the S stride above the H stride for (B,S,H,D)). */
static void layout_check(const input *in, const run *ref, int bshd) {
    const int64_t B = in->B, H = in->H, S = in->S, D = in->D, ld = bshd ? D : D + 8;
    const size_t n = (size_t)(B * H * S * ld);
    uint16_t *bits = calloc(n, 2);
    int64_t vs[3];
    if (bshd) { vs[0] = S * H * D; vs[1] = D; vs[2] = H * D; }
    else { vs[0] = H * S * ld; vs[1] = S * ld; vs[2] = ld; }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s)
                memcpy(bits + b * vs[0] + h * vs[1] + s * vs[2], in->vb + ((b * H + h) * S + s) * D, (size_t)D * 2);
    void *dv = NULL;
    CUDA_OK(cudaMalloc(&dv, n * 2));
    CUDA_OK(cudaMemcpy(dv, bits, n * 2, cudaMemcpyHostToDevice));
    run r;
    run_setup(&r, in, 64);
    r.p.v = dv;
    memcpy(r.p.v_stride, vs, sizeof vs);
    run_exec(&r, in);
    const size_t nl = (size_t)(B * H * S), nc = (size_t)(B * H * 64 * D);
    EXPECT(!memcmp(r.perm, ref->perm, nl * 4) && !memcmp(r.labels, ref->labels, nl * 4) &&
               !memcmp(r.cent, ref->cent, nc * 4),
           "%s layout (B%lld H%lld S%lld) differs from (B,H,S,D)", bshd ? "(B,S,H,D)" : "padded-row",
           (long long)B, (long long)H, (long long)S);
    run_free(&r);
    cudaFree(dv);
    free(bits);
}

/* Centroids into a caller buffer that is 4 bytes off 16-byte alignment (a tensor view):
 * the same bits as `ref`. */
static void centroid_buffer_check(const input *in, const run *ref) {
    run r;
    run_setup(&r, in, 64);
    const size_t nc = (size_t)(in->B * in->H * 64 * in->D), nl = (size_t)(in->B * in->H * in->S);
    float *aligned = r.dcent, *base = NULL;
    CUDA_OK(cudaMalloc((void **)&base, nc * 4 + 16));
    r.dcent = base + 1;
    r.p.centroids = r.dcent;
    run_exec(&r, in);
    EXPECT(!memcmp(r.perm, ref->perm, nl * 4) && !memcmp(r.cent, ref->cent, nc * 4),
           "misaligned centroid buffer (B%lld H%lld S%lld) differs", (long long)in->B, (long long)in->H,
           (long long)in->S);
    r.dcent = aligned;
    cudaFree(base);
    run_free(&r);
}

static int cmd_check(void) {
    /* shapes: tiny (S < k and a partial tile), odd S, a medium video grid */
    const int64_t grids[][5] = {{1, 2, 1, 3, 17}, {2, 3, 3, 7, 61}, {1, 4, 21, 30, 52}};
    for (int g = 0; g < 3; ++g) {
        input in = make_input(grids[g][0], grids[g][1], grids[g][2], grids[g][3], grids[g][4], 7 + g);
        char what[64];
        snprintf(what, sizeof what, "B%lld H%lld S%lld", (long long)in.B, (long long)in.H, (long long)in.S);
        run r;
        run_setup(&r, &in, 64);
        run_exec(&r, &in);
        check_structure(&in, &r, what);
        print_hash(&in, &r, what);
        /* determinism: a second run is bitwise identical */
        int32_t *perm1 = malloc((size_t)(in.B * in.H * in.S) * 4);
        memcpy(perm1, r.perm, (size_t)(in.B * in.H * in.S) * 4);
        float *cent1 = malloc((size_t)(in.B * in.H * 64 * in.D) * 4);
        memcpy(cent1, r.cent, (size_t)(in.B * in.H * 64 * in.D) * 4);
        run_exec(&r, &in);
        EXPECT(!memcmp(perm1, r.perm, (size_t)(in.B * in.H * in.S) * 4) &&
                   !memcmp(cent1, r.cent, (size_t)(in.B * in.H * 64 * in.D) * 4),
               "%s: two runs differ", what);
        if (g >= 1) {
            layout_check(&in, &r, 1);
            layout_check(&in, &r, 0);
            centroid_buffer_check(&in, &r);
        }
        if (g == 1) {
            /* k < 64 with an empty half, k = 48, D = 64, FP16, unaligned V, and k = 128 */
            variant_check(&in, 16, 128, 0, 0);
            variant_check(&in, 48, 64, 0, 0);
            variant_check(&in, 32, 128, 1, 0);
            variant_check(&in, 64, 128, 0, 1);
            variant_check(&in, 64, 64, 1, 1);
            variant_check(&in, 128, 128, 0, 0);
        }
        if (in.S >= 4096) {
            /* block-energy share vs the CPU planner with the same k and iterations */
            const int64_t vs[3] = {in.H * in.S * in.D, in.S * in.D, in.D};
            vcattn_kmeans_params km;
            vcattn_kmeans_params_init(&km);
            km.clusters = 64;
            km.iterations = 8;
            int32_t *cpu_perm = malloc((size_t)(in.B * in.H * in.S) * 4);
            VC_OK(vcattn_vsmooth_plan(in.v, in.B, in.H, in.S, in.D, vs, &km, cpu_perm, NULL, NULL));
            double s_seq = energy_share(&in, NULL), s_cpu = energy_share(&in, cpu_perm), s_gpu = energy_share(&in, r.perm);
            printf("block-energy share %s: sequence %.2f%%, CPU planner %.2f%%, GPU %.2f%%\n", what, 100 * s_seq,
                   100 * s_cpu, 100 * s_gpu);
            EXPECT(fabs(s_gpu - s_cpu) <= 0.02, "%s: GPU share %.4f vs CPU %.4f", what, s_gpu, s_cpu);
            /* warm start: from the returned centroids, 2 iterations keep the share */
            r.p.init_centroids = r.dcent;
            r.p.iterations = 2;
            run_exec(&r, &in);
            check_structure(&in, &r, "warm start");
            print_hash(&in, &r, "warm start");
            double s_warm = energy_share(&in, r.perm);
            printf("warm start (2 iterations) share %.2f%%\n", 100 * s_warm);
            EXPECT(s_warm >= s_gpu - 0.005, "warm start lost share: %.4f vs %.4f", s_warm, s_gpu);
            r.p.init_centroids = NULL;
            r.p.iterations = 8;
            free(cpu_perm);
        }
        free(perm1); free(cent1);
        run_free(&r);
        free_input(&in);
    }
    /* the device plan: same result as direct calls, warm start from its own centroids */
    {
        input in = make_input(1, 2, 4, 16, 40, 11);
        run r;
        run_setup(&r, &in, 32);
        r.p.labels = NULL;
        r.p.iterations = 4;
        vcattn_gpu_plan *plan = NULL;
        EXPECT(vcattn_gpu_plan_create(2, in.B, in.H, in.S, in.D, 32, &plan) == VCATTN_STATUS_SUCCESS, "plan create");
        const int32_t *dp = (const int32_t *)1;
        EXPECT(vcattn_gpu_plan_permutation(plan, 1, &dp) == VCATTN_STATUS_SUCCESS && dp == NULL, "fresh layer has no perm");
        size_t n = (size_t)(in.B * in.H * in.S), pbytes = 0;
        int32_t *host = malloc(n * 4);
        for (int pass = 0; pass < 2; ++pass) {
            /* pass 0: cold; pass 1: warm from the previous centroids, on both sides */
            r.p.init_centroids = pass ? r.dcent : NULL;
            run_exec(&r, &in);
            VC_OK(vcattn_gpu_plan_update(plan, 1, in.dv, VCATTN_GPU_DTYPE_BF16, r.p.v_stride, 4, 0, NULL));
            CUDA_OK(cudaDeviceSynchronize());
            VC_OK(vcattn_gpu_plan_permutation(plan, 1, &dp));
            CUDA_OK(cudaMemcpy(host, dp, n * 4, cudaMemcpyDeviceToHost));
            EXPECT(dp && !memcmp(host, r.perm, n * 4), "plan pass %d differs from the direct call", pass);
        }
        EXPECT(vcattn_gpu_plan_memory_bytes(plan, &pbytes) == VCATTN_STATUS_SUCCESS && pbytes >= 2 * n * 4,
               "plan memory %zu", pbytes);
        printf("device plan (2 layers, B1 H2 S%lld, k=32): %zu bytes\n", (long long)in.S, pbytes);
        EXPECT(vcattn_gpu_plan_update(plan, 2, in.dv, VCATTN_GPU_DTYPE_BF16, r.p.v_stride, 4, 0, NULL) ==
                   VCATTN_STATUS_INVALID_ARGUMENT, "layer out of range accepted");
        vcattn_gpu_plan *bad = NULL;
        EXPECT(vcattn_gpu_plan_create(1, 1, 1, 256, 96, 32, &bad) == VCATTN_STATUS_UNSUPPORTED_HEAD_DIM && !bad,
               "plan with D=96 accepted");
        vcattn_gpu_plan_destroy(plan);
        free(host);
        run_free(&r);
        free_input(&in);
    }
    /* a workspace off 256-byte alignment is refused, not run */
    {
        input in = make_input(1, 1, 2, 8, 16, 13);
        run r;
        run_setup(&r, &in, 64);
        EXPECT(vcattn_gpu_kmeans(&r.p, (char *)r.ws + 16, r.ws_bytes - 16, NULL) == VCATTN_STATUS_INVALID_ARGUMENT,
               "misaligned workspace accepted");
        run_free(&r);
        free_input(&in);
    }
    /* bad input */
    vcattn_gpu_kmeans_params p;
    vcattn_gpu_kmeans_params_init(&p);
    size_t bytes;
    EXPECT(vcattn_gpu_kmeans_workspace_size(&p, &bytes) == VCATTN_STATUS_NULL_POINTER, "NULL v accepted");
    p.v = (void *)16; p.perm = (int32_t *)16; p.centroids = (float *)16;
    p.batch = 1; p.heads = 1; p.seq = 100; p.head_dim = 96;
    EXPECT(vcattn_gpu_kmeans_workspace_size(&p, &bytes) == VCATTN_STATUS_UNSUPPORTED_HEAD_DIM, "D=96 accepted");
    p.head_dim = 128; p.clusters = 24;
    EXPECT(vcattn_gpu_kmeans_workspace_size(&p, &bytes) == VCATTN_STATUS_INVALID_ARGUMENT, "k=24 accepted");
    p.clusters = 64; p.seq = 0;
    EXPECT(vcattn_gpu_kmeans_workspace_size(&p, &bytes) == VCATTN_STATUS_BAD_SHAPE, "S=0 accepted");
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "check")) return cmd_check();
    fprintf(stderr, "usage: kmeans_check check\n");
    return 2;
}
