/* kmeans_inputs.h - what the GPU grouping check and benchmark share
 * (tests/gpu/kmeans_check.c, tests/gpu/kmeans_bench.c): error macros, the workload
 * input, one vcattn_gpu_kmeans run (device buffers, workspace, host copies) and the
 * FNV-1a hash of its results. */
#ifndef VCATTN_TESTS_KMEANS_INPUTS_H
#define VCATTN_TESTS_KMEANS_INPUTS_H
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "vcattn.h"

#define CUDA_OK(call)                                                         \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(2); } \
    } while (0)
#define VC_OK(call)                                                           \
    do {                                                                      \
        vcattn_status s_ = (call);                                            \
        if (s_ != VCATTN_STATUS_SUCCESS) { printf("vcattn error '%s' at %s:%d\n", vcattn_status_string(s_), __FILE__, __LINE__); exit(2); } \
    } while (0)

typedef struct {
    int64_t B, H, S, D, T, Hh, W;
    float *v;      /* host (B,H,S,D), BF16-rounded values */
    uint16_t *vb;  /* host bf16 bits */
    void *dv;      /* device bf16 */
} input;

typedef struct {
    int32_t *perm, *labels;
    float *cent;
    int32_t *dperm, *dlabels;
    float *dcent;
    void *ws;
    size_t ws_bytes;
    vcattn_gpu_kmeans_params p;
} run;

/* the synthetic video workload's V (B, H, T*Hh*W, 128), BF16-rounded, on host and device */
input make_input(int64_t B, int64_t H, int64_t T, int64_t Hh, int64_t W, uint64_t seed);
void free_input(input *in);
/* FNV-1a of a buffer: the HASH lines let two builds be compared result for result */
unsigned long long fnv(const void *p, size_t n);
/* a run with k clusters on in (contiguous (B,H,S,D) strides), its execution (results
 * copied to the host), its HASH line, its release */
void run_setup(run *r, const input *in, int k);
void run_exec(run *r, const input *in);
void print_hash(const input *in, const run *r, const char *what);
void run_free(run *r);

#endif
