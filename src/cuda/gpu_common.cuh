/* gpu_common.cuh - what the CUDA sources of libvcattn share: tile sizes, the
 * workspace arguments of the kernels, input loads. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "p_path.h" /* the kernel's template argument: a method's P path */
#include "tiling.h" /* VC_TILE_Q, VC_BLOCK_K, SageAttention's P offsets */
#include "vcattn.h"

#define VC_GPU_DPAD 128      /* channels of every code row in global memory (zero padded past D) */
#define VC_GPU_KMEAN_CHUNK 1024 /* tokens per partial sum of the K channel mean */
#define VC_GPU_LOG2E 1.4426950408889634

/* A (B, H, S, D) view of 16-bit values as the kernels read it (host check): 8-byte rows
 * (aligned pointer, element strides a multiple of 4), rows that do not overlap within a head,
 * offsets that fit int64. */
static inline vcattn_status vc_check_view(const void *ptr, const int64_t st[3], int64_t B, int64_t H, int64_t S,
                                          int64_t D) {
    if (!ptr) return VCATTN_STATUS_NULL_POINTER;
    if ((uintptr_t)ptr % 8) return VCATTN_STATUS_BAD_STRIDE;
    for (int i = 0; i < 3; ++i)
        if (st[i] < 0 || st[i] % 4) return VCATTN_STATUS_BAD_STRIDE;
    if (S > 1 && st[2] < D) return VCATTN_STATUS_BAD_STRIDE;
    /* the largest element offset must fit int64 comfortably */
    double top = (double)(B - 1) * st[0] + (double)(H - 1) * st[1] + (double)(S - 1) * st[2] + D;
    if (top > 9.0e18) return VCATTN_STATUS_SIZE_OVERFLOW;
    return VCATTN_STATUS_SUCCESS;
}

/* Arguments of the preprocessing kernels (by value). */
struct vc_prep_args {
    const void *q, *k, *v;
    int64_t q_stride[3], k_stride[3], v_stride[3];
    const int32_t *perm; /* NULL: identity; head bh's order at perm + bh * perm_stride */
    int64_t perm_stride;
    /* Skv: keys of the quantized pass (the first Skv of the order); Sk_all: every key, what
     * the K mean runs over (more than Skv when the method keeps exact keys, exact_keys.h) */
    int H, Sq, Skv, Sk_all, D, sq_pad, skv_pad, nkb, nchunk;
    int v_smooth;
    float sm;            /* softmax scale (for q . km) */
    int8_t *q_codes;
    float *q_scale, *q_km;
    int8_t *k_codes;
    float *k_scale, *k_mean;
    double *k_partial;
    uint8_t *v_codes;
    float *v_scale;
    float *v_mean; /* FP16-rounded means / channel scale, stored as FP32 */
    uint4 *v_mean_tc; /* the restore's B operand, per group of 8 blocks (attention/restore.cuh) */
    float *v_block_mean, *v_amax; /* v_amax: (BH, 2, 128): residual amax, mean amax */
};

/* Arguments of the attention kernel. */
struct vc_attn_args {
    const int8_t *q_codes;
    const float *q_scale, *q_km;
    const int8_t *k_codes;
    const float *k_scale;
    const uint8_t *v_codes;
    const float *v_scale;
    const float *v_mean;
    const uint4 *v_mean_tc;
    void *o;
    int64_t o_stride[3];
    float *lse;
    int H, Sq, Skv, D, sq_pad, skv_pad, nkb;
    float c0; /* (float)(softmax scale * log2 e) */
    float bm_descent; /* the block-max scale's fall per block, vc_blockmax_descent(nkb) */
    unsigned *output_flag; /* set (atomicOr 1) when a row's output or LSE is not finite */
    const unsigned *direct_rows;  /* per (batch, head, 64-row block of Q), from the preprocessing:
                                     VC_HEAD_DIRECT where some scale a = 8c may pass 2^-7 (direct_rows.cu) */
    const uint8_t *head_exact;    /* the caller's per-head exact-P flags, NULL = none: VC_HEAD_EXACT */
    unsigned head_gate;           /* the VC_HEAD_EXACT bit of the heads this launch runs (kernel.cuh) */
};

/* Arguments of the exact keys' kernels (exact_keys.cu, src/exact_keys.h). */
struct vc_exact_args {
    const void *q, *k, *v;
    void *o;
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    const int32_t *perm; /* the plan's order (B, H, S), NULL = sequence order */
    int32_t *order;      /* (B, H, S): the order the call runs, the n exact keys last */
    float *norm;         /* (B, H, S) scratch: the rank norms */
    float *lse;          /* (B, H, Sq): the quantized pass's LSE in, the merged LSE out */
    int H, S, Sq, D, n;
    float c0;            /* (float)(softmax scale * log2 e), the attention kernel's */
    unsigned *output_flag;
};
cudaError_t vc_exact_order_launch(const vc_exact_args &a, int BH, int bf16, cudaStream_t s);
cudaError_t vc_exact_merge_launch(const vc_exact_args &a, int BH, int in_bf16, int out_bf16, cudaStream_t s);

/* Which kernel runs a tile, as bits (kernel.cuh): */
#define VC_HEAD_DIRECT 1u /* the two-rounding P (direct_rows.cu) */
#define VC_HEAD_EXACT 2u  /* the exact-exponential sibling's kernel (the caller's head_exact) */
/* direct_rows.cu: the VC_HEAD_DIRECT word per (batch, head, 64-row block of Q) into flags, from the
 * preprocessing's scales (q_scale (BH, sq_pad / 64, 32), k_scale (BH, nkb, 4)) */
cudaError_t vc_direct_rows_launch(const float *q_scale, const float *k_scale, int sq_pad, int nkb, float c0,
                                   unsigned *flags, int BH, cudaStream_t s);

/* One 16-bit element's bits (BF16 or FP16) as FP32. */
template <typename T>
__device__ __forceinline__ float vc_bits_to_f32(uint16_t h) {
    if (sizeof(T) == 2 && __is_same(T, __nv_bfloat16)) return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* CPT = channels per lane (D / 32) of a row, loaded as CPT 16-bit values. */
template <typename T, int CPT>
__device__ __forceinline__ void vc_load_row(const T *row, int lane, float (&x)[CPT]) {
    const uint16_t *p = reinterpret_cast<const uint16_t *>(row) + lane * CPT;
    uint16_t h[CPT];
    if (CPT == 4) {
        uint2 u = *reinterpret_cast<const uint2 *>(p);
        h[0] = (uint16_t)(u.x & 0xFFFF); h[1] = (uint16_t)(u.x >> 16);
        h[2] = (uint16_t)(u.y & 0xFFFF); h[3] = (uint16_t)(u.y >> 16);
    } else {
        uint32_t u = *reinterpret_cast<const uint32_t *>(p);
        h[0] = (uint16_t)(u & 0xFFFF); h[1] = (uint16_t)(u >> 16);
    }
#pragma unroll
    for (int i = 0; i < CPT; ++i) x[i] = vc_bits_to_f32<T>(h[i]);
}

__device__ __forceinline__ float vc_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float vc_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
