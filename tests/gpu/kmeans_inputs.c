/* kmeans_inputs.c - inputs and runs of the GPU grouping check and benchmark
 * (kmeans_inputs.h). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_inputs.h"
#include "numerics.h"

input make_input(int64_t B, int64_t H, int64_t T, int64_t Hh, int64_t W, uint64_t seed) {
    input in = {B, H, T * Hh * W, 128, T, Hh, W, NULL, NULL, NULL};
    vcattn_workload_params wp;
    vcattn_workload_params_init(&wp);
    wp.batch = B; wp.heads = H; wp.frames = T; wp.height = Hh; wp.width = W; wp.seed = seed;
    size_t n = (size_t)(B * H * in.S * in.D);
    float *q = malloc(n * 4), *k = malloc(n * 4);
    in.v = malloc(n * 4);
    in.vb = malloc(n * 2);
    VC_OK(vcattn_workload_generate(&wp, q, k, in.v));
    for (size_t i = 0; i < n; ++i) {
        in.vb[i] = vc_bf16_bits(in.v[i]);
        in.v[i] = vc_bf16_to_f32(in.vb[i]);
    }
    free(q); free(k);
    CUDA_OK(cudaMalloc(&in.dv, n * 2));
    CUDA_OK(cudaMemcpy(in.dv, in.vb, n * 2, cudaMemcpyHostToDevice));
    return in;
}

unsigned long long fnv(const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

void free_input(input *in) { free(in->v); free(in->vb); cudaFree(in->dv); }

void run_setup(run *r, const input *in, int k) {
    memset(r, 0, sizeof *r);
    vcattn_gpu_kmeans_params_init(&r->p);
    r->p.batch = in->B; r->p.heads = in->H; r->p.seq = in->S; r->p.head_dim = in->D;
    r->p.v = in->dv;
    r->p.v_stride[0] = in->H * in->S * in->D; r->p.v_stride[1] = in->S * in->D; r->p.v_stride[2] = in->D;
    r->p.clusters = k;
    size_t nl = (size_t)(in->B * in->H * in->S), nc = (size_t)(in->B * in->H * k * in->D);
    CUDA_OK(cudaMalloc((void **)&r->dperm, nl * 4));
    CUDA_OK(cudaMalloc((void **)&r->dlabels, nl * 4));
    CUDA_OK(cudaMalloc((void **)&r->dcent, nc * 4));
    r->perm = malloc(nl * 4); r->labels = malloc(nl * 4); r->cent = malloc(nc * 4);
    r->p.perm = r->dperm; r->p.labels = r->dlabels; r->p.centroids = r->dcent;
    VC_OK(vcattn_gpu_kmeans_workspace_size(&r->p, &r->ws_bytes));
    CUDA_OK(cudaMalloc(&r->ws, r->ws_bytes));
}

void run_exec(run *r, const input *in) {
    VC_OK(vcattn_gpu_kmeans(&r->p, r->ws, r->ws_bytes, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    size_t nl = (size_t)(in->B * in->H * in->S), nc = (size_t)(in->B * in->H * r->p.clusters * in->D);
    CUDA_OK(cudaMemcpy(r->perm, r->dperm, nl * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(r->labels, r->dlabels, nl * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(r->cent, r->dcent, nc * 4, cudaMemcpyDeviceToHost));
}

void print_hash(const input *in, const run *r, const char *what) {
    size_t nl = (size_t)(in->B * in->H * in->S), nc = (size_t)(in->B * in->H * r->p.clusters * in->D);
    printf("HASH %s: perm %016llx labels %016llx centroids %016llx\n", what, fnv(r->perm, nl * 4),
           fnv(r->labels, nl * 4), fnv(r->cent, nc * 4));
}

void run_free(run *r) {
    cudaFree(r->dperm); cudaFree(r->dlabels); cudaFree(r->dcent); cudaFree(r->ws);
    free(r->perm); free(r->labels); free(r->cent);
}
