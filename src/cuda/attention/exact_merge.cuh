/* exact_merge.cuh - the exact keys (src/exact_keys.h) merged into a consumer thread's two
 * rows in the epilogue: FP32 scores of the rows' 16-bit Q against the head's n exact keys,
 * their softmax and P V, merged with the quantized pass's FP32 output and its LSE through
 * vc_exact_merge_of, as the simulation merges them (simulate_tile.c).
 *
 * Why here and not in a pass of its own: the epilogue holds O, m and l already, so the merge
 * costs the rows' Q and the n keys' K and V (every CTA of a head reads the same n rows: L2
 * hits) instead of a second read and write of Q, O and the LSE - most of a short key
 * sequence's time (cross-attention) and about 2% of Wan 720p's.
 *
 * The thread holds columns 8j + 2t, 8j + 2t + 1 of its rows (j < NO / 4, the accumulator's
 * layout); the quad (t = 0..3) sums its partial dot products with two shuffles, so each of
 * its threads holds every key's score. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "exact_keys.h"
#include "gpu_common.cuh"

/* The pair of 16-bit values at columns col, col + 1 of a row, as FP32. */
template <typename InT>
__device__ __forceinline__ float2 vc_load_pair(const InT *row, int col) {
    const uint32_t w = *reinterpret_cast<const uint32_t *>(row + col);
    return make_float2(vc_bits_to_f32<InT>((uint16_t)(w & 0xFFFFu)), vc_bits_to_f32<InT>((uint16_t)(w >> 16)));
}

/* rows: the thread's two rows (clamped below Sq by the caller: every lane of the warp takes
 * part in the shuffles); o: their normalized outputs, lse: their natural-log LSEs (q . mean
 * included), both replaced by the merged values. */
template <typename InT, int NO>
__device__ __forceinline__ void vc_exact_merge_into(const vc_attn_args &a, int bh, const int (&rows)[2], int t,
                                                    float (&o)[2][NO / 2], float (&lse)[2]) {
    constexpr int NJ = VC_EXACT_KEYS_MAX, NP = NO / 4; /* column pairs per row */
    const int b = bh / a.H, h = bh % a.H, n = a.exact_n;
    const InT *qh = (const InT *)a.q + b * a.q_stride[0] + h * a.q_stride[1];
    const InT *kh = (const InT *)a.k + b * a.k_stride[0] + h * a.k_stride[1];
    const InT *vh = (const InT *)a.v + b * a.v_stride[0] + h * a.v_stride[1];
    const int32_t *tok = a.exact_order + (int64_t)bh * a.exact_pitch + (a.exact_pitch - n);

    float q[2][NO / 2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int j = 0; j < NP; ++j) {
            const float2 x = vc_load_pair(qh + (int64_t)rows[hh] * a.q_stride[2], 8 * j + 2 * t);
            q[hh][2 * j] = x.x;
            q[hh][2 * j + 1] = x.y;
        }
    /* scores in log2 units; m2 = their max */
    float s[2][NJ], m2[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int e = 0; e < NJ; ++e) {
        if (e < n) { /* uniform: n is the call's */
            const InT *krow = kh + (int64_t)tok[e] * a.k_stride[2];
            float part[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < NP; ++j) {
                const float2 k = vc_load_pair(krow, 8 * j + 2 * t);
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    part[hh] = fmaf(q[hh][2 * j], k.x, part[hh]);
                    part[hh] = fmaf(q[hh][2 * j + 1], k.y, part[hh]);
                }
            }
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                part[hh] += __shfl_xor_sync(0xffffffffu, part[hh], 1);
                part[hh] += __shfl_xor_sync(0xffffffffu, part[hh], 2);
                s[hh][e] = part[hh] * a.c0;
                m2[hh] = fmaxf(m2[hh], s[hh][e]);
            }
        }
    }
    /* their softmax and P V over the thread's columns */
    float l[2] = {0.0f, 0.0f}, u[2][NO / 2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int c = 0; c < NO / 2; ++c) u[hh][c] = 0.0f;
#pragma unroll
    for (int e = 0; e < NJ; ++e) {
        if (e < n) {
            const InT *vrow = vh + (int64_t)tok[e] * a.v_stride[2];
            float p[2];
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                p[hh] = exp2f(s[hh][e] - m2[hh]);
                l[hh] += p[hh];
            }
#pragma unroll
            for (int j = 0; j < NP; ++j) {
                const float2 v = vc_load_pair(vrow, 8 * j + 2 * t);
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    u[hh][2 * j] = fmaf(p[hh], v.x, u[hh][2 * j]);
                    u[hh][2 * j + 1] = fmaf(p[hh], v.y, u[hh][2 * j + 1]);
                }
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const vc_exact_merge mg = vc_exact_merge_of(lse[hh], m2[hh], l[hh]);
#pragma unroll
        for (int c = 0; c < NO / 2; ++c) o[hh][c] = vc_exact_merge_out(mg, o[hh][c], u[hh][c]);
        lse[hh] = mg.lse;
    }
}
