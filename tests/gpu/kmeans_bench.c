/* kmeans_bench.c - GPU V-Smooth grouping on the H200: bitwise determinism of two
 * cold calls and timing.  Correctness: kmeans_check.c.
 *
 *   kmeans_bench bench B H S D    bitwise determinism of two cold calls, timing (cold 8
 *                                 iterations, warm 2, 4 and 0) and the share of one
 *                                 vsmooth-expcast attention call (skipped when
 *                                 KM_NO_ATTENTION is set); exit 1 if the calls differ;
 *                                 KM_BENCH_LAYOUT=bshd reads V as (B,S,H,D) (no attention)
 * Prints a "HASH ..." line for the cold call, "DETERMINISM ...", "KMEANS-ONLY ..." and
 * "KMEANS ..." lines. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_inputs.h"
#include "numerics.h"
#include "vcattn.h"

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float time_median(run *r, int reps) {
    cudaEvent_t e0, e1;
    float t[32];
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < 2; ++i) VC_OK(vcattn_gpu_kmeans(&r->p, r->ws, r->ws_bytes, NULL));
    for (int i = 0; i < reps; ++i) {
        cudaEventRecord(e0, NULL);
        VC_OK(vcattn_gpu_kmeans(&r->p, r->ws, r->ws_bytes, NULL));
        cudaEventRecord(e1, NULL);
        CUDA_OK(cudaEventSynchronize(e1));
        cudaEventElapsedTime(&t[i], e0, e1);
    }
    qsort(t, (size_t)reps, sizeof(float), cmp_float);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    return t[reps / 2];
}

static int cmd_bench(int64_t B, int64_t H, int64_t S, int64_t D) {
    /* random BF16 V of the shape (timing does not depend on the content much) */
    size_t n = (size_t)(B * H * S * D);
    uint16_t *vb = malloc(n * 2);
    uint64_t z = 12345;
    for (size_t i = 0; i < n; ++i) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        vb[i] = vc_bf16_bits((float)((double)(z >> 11) * 0x1.0p-53 * 2.0 - 1.0));
    }
    input in = {B, H, S, D, 0, 0, 0, NULL, vb, NULL};
    CUDA_OK(cudaMalloc(&in.dv, n * 2));
    CUDA_OK(cudaMemcpy(in.dv, vb, n * 2, cudaMemcpyHostToDevice));
    run r;
    run_setup(&r, &in, 64);
    r.p.labels = NULL;
    /* KM_BENCH_LAYOUT=bshd: the same buffer read as (B,S,H,D), the layout of most pipelines */
    const char *layout = getenv("KM_BENCH_LAYOUT");
    const int bshd = layout && !strcmp(layout, "bshd");
    if (bshd) { r.p.v_stride[0] = S * H * D; r.p.v_stride[1] = D; r.p.v_stride[2] = H * D; }
    int differ = 0;
    {
        /* bitwise determinism at this shape: two cold calls */
        size_t nl = (size_t)(B * H * S), nc = (size_t)(B * H * 64 * D);
        int32_t *p1 = malloc(nl * 4);
        float *c1 = malloc(nc * 4);
        VC_OK(vcattn_gpu_kmeans(&r.p, r.ws, r.ws_bytes, NULL));
        CUDA_OK(cudaMemcpy(p1, r.dperm, nl * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(c1, r.dcent, nc * 4, cudaMemcpyDeviceToHost));
        VC_OK(vcattn_gpu_kmeans(&r.p, r.ws, r.ws_bytes, NULL));
        CUDA_OK(cudaMemcpy(r.perm, r.dperm, nl * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(r.cent, r.dcent, nc * 4, cudaMemcpyDeviceToHost));
        differ = memcmp(p1, r.perm, nl * 4) || memcmp(c1, r.cent, nc * 4);
        printf("HASH bench (%lld,%lld,%lld,%lld) cold: perm %016llx centroids %016llx\n", (long long)B, (long long)H,
               (long long)S, (long long)D, fnv(r.perm, nl * 4), fnv(r.cent, nc * 4));
        printf("DETERMINISM (%lld,%lld,%lld,%lld): two cold calls %s\n", (long long)B, (long long)H, (long long)S,
               (long long)D, differ ? "DIFFER" : "bitwise identical");
        free(p1);
        free(c1);
    }
    float cold = time_median(&r, 10);
    r.p.init_centroids = r.dcent;
    r.p.iterations = 2;
    float warm2 = time_median(&r, 10);
    r.p.iterations = 4;
    float warm4 = time_median(&r, 10);
    r.p.iterations = 0;
    float warm0 = time_median(&r, 10);
    printf("KMEANS-ONLY (%lld,%lld,%lld,%lld)%s k=64: cold 8 it %.3f ms, warm 2 it %.3f ms, warm 4 it %.3f ms, "
           "0 it (labels + permutation only) %.3f ms\n",
           (long long)B, (long long)H, (long long)S, (long long)D, bshd ? " (B,S,H,D)" : "", cold, warm2, warm4, warm0);
    fflush(stdout);
    if (getenv("KM_NO_ATTENTION") || bshd) { run_free(&r); free(vb); cudaFree(in.dv); return differ; }
    /* one vsmooth-expcast attention call at the same shape, same run */
    float attn = -1.0f;
    vcattn_gpu_params ap;
    void *q, *k, *o, *ws;
    size_t wsb = 0;
    if (cudaMalloc(&q, n * 2) == cudaSuccess && cudaMalloc(&k, n * 2) == cudaSuccess && cudaMalloc(&o, n * 2) == cudaSuccess) {
        cudaMemcpy(q, vb, n * 2, cudaMemcpyHostToDevice);
        cudaMemcpy(k, vb, n * 2, cudaMemcpyHostToDevice);
        vcattn_gpu_params_init(&ap, B, H, S, S, D, q, k, in.dv, o);
        ap.method = VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT;
        ap.perm = r.dperm;
        if (vcattn_gpu_workspace_size(&ap, &wsb) == VCATTN_STATUS_SUCCESS && cudaMalloc(&ws, wsb) == cudaSuccess) {
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0); cudaEventCreate(&e1);
            float t[5];
            for (int i = 0; i < 6; ++i) {
                cudaEventRecord(e0, NULL);
                vcattn_status st = vcattn_gpu_attention(&ap, ws, wsb, NULL);
                cudaEventRecord(e1, NULL);
                cudaEventSynchronize(e1);
                if (st) { printf("attention: %s\n", vcattn_status_string(st)); break; }
                if (i > 0) cudaEventElapsedTime(&t[i - 1], e0, e1);
                if (i == 5) { qsort(t, 5, sizeof(float), cmp_float); attn = t[2]; }
            }
            cudaFree(ws);
        }
        cudaFree(q); cudaFree(k); cudaFree(o);
    }
    /* a 40-step schedule groups on steps 0, 4, 8: one cold + two warm calls */
    printf("KMEANS (%lld,%lld,%lld,%lld) k=64: cold 8 it %.3f ms, warm 2 it %.3f ms, warm 4 it %.3f ms",
           (long long)B, (long long)H, (long long)S, (long long)D, cold, warm2, warm4);
    if (attn > 0)
        printf("; attention (vsmooth-expcast full call) %.3f ms; grouping/attention: cold %.1f%%, warm2 %.1f%%; "
               "40-step schedule (1 cold + 2 warm2 over 40 calls) %.2f%%",
               attn, 100 * cold / attn, 100 * warm2 / attn, 100 * (cold + 2 * warm2) / (40 * attn));
    printf("\n");
    run_free(&r);
    free(vb);
    cudaFree(in.dv);
    return differ;
}

int main(int argc, char **argv) {
    if (argc >= 6 && !strcmp(argv[1], "bench"))
        return cmd_bench(atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), atoll(argv[5]));
    fprintf(stderr, "usage: kmeans_bench bench B H S D   (env: KM_NO_ATTENTION, KM_BENCH_LAYOUT=bshd)\n");
    return 2;
}
