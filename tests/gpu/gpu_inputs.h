/* gpu_inputs.h - what the GPU check and the GPU benchmark share (tests/gpu/gpu_check.c,
 * tests/gpu/gpu_bench.c): error macros, the seeded generator, the shapes and the input
 * builders (host copies + device 16-bit tensors), the GPU call's parameters. */
#ifndef VCATTN_TESTS_GPU_INPUTS_H
#define VCATTN_TESTS_GPU_INPUTS_H
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "vcattn.h"

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);     \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)
#define VK(x)                                                                                     \
    do {                                                                                          \
        vcattn_status s_ = (x);                                                                   \
        if (s_ != VCATTN_STATUS_SUCCESS) {                                                        \
            printf("vcattn error %s at %s:%d\n", vcattn_status_string(s_), __FILE__, __LINE__);  \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

typedef struct {
    int64_t B, H, Sq, Skv, D;
    int bshd;      /* (B,S,H,D) input/output layout */
    int outliers;  /* V outlier tokens x20 in 8 channels, K += 5*randn(D), q,k x2 */
    int fp16_in, fp16_out;
    int use_perm;
    float q_gain;  /* Q x q_gain (0: 1): huge score scales, the DIRECT kernel (direct_rows.cu) */
    int64_t q_gain_from; /* q_gain only on query rows from this one on (0: every row): a head whose
                            tiles are split between the fast and the DIRECT kernel */
} shape_t;

typedef struct {
    float *q, *k, *v;  /* float copies of the 16-bit inputs, (B,H,S,D) contiguous */
    void *dq, *dk, *dv, *dout;
    float *dlse;
    int32_t *perm, *dperm;
    int64_t qs[3], ks[3];
} inputs_t;

/* for (each method the GPU path implements, vcattn_method_has_kernel) in the library's order:
 * the order of the check and bench lines */
#define FOR_GPU_METHODS(m) \
    for (vcattn_method m = (vcattn_method)0; m < VCATTN_METHOD_COUNT; m = (vcattn_method)(m + 1)) \
        if (vcattn_method_has_kernel(m))

/* the one seeded generator of a program (xorshift64): the inputs of a run depend only
 * on the order of the calls */
uint64_t rnd_u64(void);
double rnd_unif(void);
float rnd_normal(void);

/* (B,H,S,D) or (B,S,H,D) strides of a tensor of S tokens */
void strides_of(const shape_t *s, int64_t S, int64_t st[3]);
/* random inputs of shape s (host float copies of the 16-bit values, device tensors,
 * optional permutation), and their release */
void make_inputs(const shape_t *s, inputs_t *in);
void free_inputs(inputs_t *in);
/* device BF16 inputs for the benchmarks (no host copies) */
void bench_inputs(int64_t B, int64_t H, int64_t Sq, int64_t Skv, int64_t D, inputs_t *in);
/* 1 when an sm_90 device is there; else prints "no sm_90 device: ..." and returns 0
 * (the programs then exit 77, skipped) */
int have_sm90(void);
/* the vcattn_gpu_attention parameters of shape s on the inputs, method m */
void gpu_params(const shape_t *s, const inputs_t *in, vcattn_method m, vcattn_gpu_params *p);

#endif
