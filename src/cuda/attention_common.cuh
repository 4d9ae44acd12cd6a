/* attention_common.cuh - pieces the TMA attention kernels (v3, v4, v5) share:
 * the row max of an INT32 score fragment, the epilogue that normalizes, scales
 * and stores a consumer's rows, and the tensor-map helpers of the host side. */
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>

#include "gpu_common.cuh"
#include "tma_encode.cuh"

/* Max of this thread's 32 INT32 scores of accumulator row g + 8 hh (columns
 * 8j + 2t + e; masked past nvalid with TAIL): a tree of 3-input maxima of
 * depth 4, 17 VIMNMX3 (two 16-deep chains sat on the softmax's critical path). */
template <bool TAIL>
__device__ __forceinline__ int vc_row_max_s32(const int32_t (&S)[64], int hh, int t, int nvalid) {
    int v[32];
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) v[2 * j + e] = (!TAIL || 8 * j + 2 * t + e < nvalid) ? S[4 * j + 2 * hh + e] : INT_MIN;
    int w[11];
#pragma unroll
    for (int i = 0; i < 10; ++i) w[i] = max(max(v[3 * i], v[3 * i + 1]), v[3 * i + 2]);
    w[10] = max(v[30], v[31]);
    const int x0 = max(max(w[0], w[1]), w[2]), x1 = max(max(w[3], w[4]), w[5]);
    const int x2 = max(max(w[6], w[7]), w[8]), x3 = max(w[9], w[10]);
    return max(max(x0, x1), max(x2, x3));
}

/* Epilogue of one consumer thread: rows row0 and row0 + 8 of the tile (the
 * wgmma accumulator rows it owns), columns 8j + 2t.  O / l times the V
 * channel scale, stored as OutT; LSE (natural log, corrected for K smoothing). */
template <int MODE, typename OutT, bool QUAD_L = MODE == VC_MODE_SAGE2>
__device__ __forceinline__ void vc_store_rows(const vc_attn_args &a, const float (&O)[64], float (&l)[2],
                                              const float (&m)[2], int bh, int row0, int t) {
    /* QUAD_L: each thread of the quad holds a partial l of its columns */
    if (QUAD_L) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
            l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
        }
    }
    const int b = bh / a.H, h = bh % a.H;
    const float *vs = a.v_scale + (int64_t)bh * VC_GPU_DPAD;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int row = row0 + 8 * hh;
        if (row >= a.Sq) continue;
        OutT *orow = (OutT *)a.o + b * a.o_stride[0] + h * a.o_stride[1] + (int64_t)row * a.o_stride[2];
        const float inv_l = 1.0f / l[hh];
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int col = 8 * j + 2 * t;
            if (col >= a.D) continue;
            const float2 s2 = *reinterpret_cast<const float2 *>(vs + col);
            const float o0 = O[4 * j + 2 * hh] * inv_l * s2.x;
            const float o1 = O[4 * j + 2 * hh + 1] * inv_l * s2.y;
            if (__is_same(OutT, __nv_bfloat16))
                *reinterpret_cast<__nv_bfloat162 *>(orow + col) = __floats2bfloat162_rn(o0, o1);
            else
                *reinterpret_cast<__half2 *>(orow + col) = __floats2half2_rn(o0, o1);
        }
        if (a.lse && t == 0) {
            const float bias2 = MODE == VC_MODE_EXPCAST ? 8.0f : 0.0f; /* log2(P scale) */
            const float lse2 = m[hh] + log2f(l[hh]) - bias2;
            a.lse[(int64_t)bh * a.Sq + row] =
                lse2 * 0.69314718055994531f + (a.q_km ? a.q_km[(int64_t)bh * a.Sq + row] : 0.0f);
        }
    }
}

/* 2-D map of bytes: `inner` bytes per row (row pitch = inner), `rows` rows, box 128 x box_rows, 128B swizzle */
static inline bool vc_tma_make_map(CUtensorMap *m, const void *base, uint64_t inner, uint64_t rows, uint32_t box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 fn = vc_tma_encode_fn();
    if (!fn) return false;
    cuuint64_t dims[2] = {inner, rows};
    cuuint64_t strides[1] = {inner};
    cuuint32_t box[2] = {128, box_rows};
    cuuint32_t estr[2] = {1, 1};
    return fn(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void *>(base), dims, strides, box, estr,
              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The three tensor maps of the attention kernels: Q and K codes (rows of 128
 * bytes), V^T codes (128 rows of skv_pad bytes per head); 128-row boxes. */
struct vc_tma_maps {
    CUtensorMap q, k, v;
};
static inline bool vc_attn_make_maps(const vc_attn_args &a, int BH, vc_tma_maps *m) {
    return vc_tma_make_map(&m->q, a.q_codes, VC_GPU_DPAD, (uint64_t)BH * a.sq_pad, 128) &&
           vc_tma_make_map(&m->k, a.k_codes, VC_GPU_DPAD, (uint64_t)BH * a.skv_pad, 128) &&
           vc_tma_make_map(&m->v, a.v_codes, (uint64_t)a.skv_pad, (uint64_t)BH * VC_GPU_DPAD, 128);
}
