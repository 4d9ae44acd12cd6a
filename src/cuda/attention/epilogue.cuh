/* epilogue.cuh - a consumer thread's rows out: O / l times the V channel
 * scale, stored as BF16 or FP16 through the caller's strides; the LSE
 * (natural log, corrected for the K smoothing) when asked for; any
 * non-finite value raises the call's output flag (vcattn_gpu_output_status). */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu_common.cuh"
#include "numerics.h"

/* Rows row0 and row0 + 8 of the tile (the wgmma accumulator rows the thread
 * owns), columns 8j + 2t (NO = the kernel's DH / 2 accumulator registers).  sage2: each thread of the quad holds a partial l
 * of its columns (the quantized row sum: the row's l, from the ones rows). */
template <int PP, typename OutT, int NO>
__device__ __forceinline__ void vc_store_rows(const vc_attn_args &a, const float (&O)[NO], float (&l)[2],
                                              const float (&m)[2], int bh, int row0, int t) {
    if (!VC_PP_ROWSUM_QUANTIZED(PP)) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
            l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
        }
    }
    const int b = bh / a.H, h = bh % a.H;
    const float *vs = a.v_scale + (int64_t)bh * VC_GPU_DPAD;
    bool finite = true; /* finite inputs beyond the FP32 pipeline: flagged, never silent */
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int row = row0 + 8 * hh;
        if (row >= a.Sq) continue;
        OutT *orow = (OutT *)a.o + b * a.o_stride[0] + h * a.o_stride[1] + (int64_t)row * a.o_stride[2];
        const float inv_l = 1.0f / l[hh];
#pragma unroll
        for (int j = 0; j < NO / 4; ++j) {
            const int col = 8 * j + 2 * t;
            if (col >= a.D) continue;
            const float2 s2 = *reinterpret_cast<const float2 *>(vs + col);
            const float o0 = O[4 * j + 2 * hh] * inv_l * s2.x;
            const float o1 = O[4 * j + 2 * hh + 1] * inv_l * s2.y;
            finite &= isfinite(o0) && isfinite(o1);
            if (__is_same(OutT, __nv_bfloat16))
                *reinterpret_cast<__nv_bfloat162 *>(orow + col) = __floats2bfloat162_rn(o0, o1);
            else
                *reinterpret_cast<__half2 *>(orow + col) = __floats2half2_rn(o0, o1);
        }
        if (a.lse && t == 0) {
            /* log2(P scale): the value of the row max's code */
            const float bias2 = VC_PP_LSE_LOG2_BIAS(PP);
            const float lse2 = m[hh] + log2f(l[hh]) - bias2;
            const float lse = lse2 * 0.69314718055994531f + (a.q_km ? a.q_km[(int64_t)bh * a.Sq + row] : 0.0f);
            finite &= isfinite(lse);
            a.lse[(int64_t)bh * a.Sq + row] = lse;
        }
    }
    if (!finite) atomicOr(a.output_flag, 1u);
}
