/* exact_keys.cu - the keys a V-Smooth method keeps out of the quantized pass (src/exact_keys.h):
 *   vc_key_norm     one thread per token: its V norm in channel order (the CPU's order);
 *   vc_key_order    one block per (batch, head): the n largest (n block-wide argmax rounds, a
 *                   total order), then the plan's order stably partitioned, them at its end;
 *   vc_exact_merge_rows  a warp per 4 query rows at a time: FP32 scores against the n exact
 *                   keys, their softmax and P V, merged with the quantized pass's output
 *                   and LSE (streamed through shared memory with cp.async).
 * The preprocessing runs the first two (the quantized pass reads the new order); the
 * attention call runs the merge after the attention kernel. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "exact_keys.h"
#include "gpu_common.cuh"
#include "ptx/cp_async.cuh"

template <typename T>
__device__ __forceinline__ T vc_f32_to(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 vc_f32_to<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half vc_f32_to<__half>(float x) { return __float2half_rn(x); }

/* One thread per token: 8-byte loads, all issued before the sum, summed in channel order. */
template <typename T, int D>
__global__ void __launch_bounds__(256) vc_key_norm(vc_exact_args a) {
    const int bh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= a.S) return;
    const int b = bh / a.H, h = bh % a.H;
    const uint2 *row = reinterpret_cast<const uint2 *>((const T *)a.v + b * a.v_stride[0] + h * a.v_stride[1] +
                                                       (int64_t)t * a.v_stride[2]);
    uint2 w[D / 4];
#pragma unroll
    for (int i = 0; i < D / 4; ++i) w[i] = row[i];
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < D / 4; ++i) {
        const uint32_t h4[4] = {w[i].x & 0xFFFFu, w[i].x >> 16, w[i].y & 0xFFFFu, w[i].y >> 16};
#pragma unroll
        for (int e = 0; e < 4; ++e) acc = vc_exact_key_norm_step(acc, vc_bits_to_f32<T>((uint16_t)h4[e]));
    }
    a.norm[(int64_t)bh * a.S + t] = vc_exact_key_rank_norm(acc);
}

#define VC_ORDER_THREADS 1024

__global__ void __launch_bounds__(VC_ORDER_THREADS) vc_key_order(vc_exact_args a) {
    __shared__ float red_n[VC_ORDER_THREADS / 32];
    __shared__ int red_t[VC_ORDER_THREADS / 32];
    __shared__ int warp_base[2][VC_ORDER_THREADS / 32];
    __shared__ int running[2];
    const int bh = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    float *norm = a.norm + (int64_t)bh * a.S;
    /* n rounds: the largest remaining (ties to the lower token), marked picked */
    for (int r = 0; r < a.n; ++r) {
        float bn = -INFINITY;
        int bt = 0x7fffffff;
        for (int t = tid; t < a.S; t += VC_ORDER_THREADS) {
            const float x = norm[t];
            if (vc_exact_key_before(x, t, bn, bt)) { bn = x; bt = t; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float on = __shfl_xor_sync(0xffffffffu, bn, o);
            const int ot = __shfl_xor_sync(0xffffffffu, bt, o);
            if (vc_exact_key_before(on, ot, bn, bt)) { bn = on; bt = ot; }
        }
        if (lane == 0) { red_n[warp] = bn; red_t[warp] = bt; }
        __syncthreads();
        if (tid == 0) {
            for (int w = 1; w < VC_ORDER_THREADS / 32; ++w)
                if (vc_exact_key_before(red_n[w], red_t[w], bn, bt)) { bn = red_n[w]; bt = red_t[w]; }
            norm[bt] = VC_EXACT_KEY_PICKED;
        }
        __syncthreads();
    }
    /* the stable partition: quantized keys from 0, exact keys from S - n, both in order */
    const int32_t *perm = a.perm ? a.perm + (int64_t)bh * a.S : nullptr;
    int32_t *out = a.order + (int64_t)bh * a.S;
    if (tid < 2) running[tid] = tid == 0 ? 0 : a.S - a.n;
    __syncthreads();
    for (int j0 = 0; j0 < a.S; j0 += VC_ORDER_THREADS) {
        const int j = j0 + tid;
        const int t = j < a.S ? (perm ? perm[j] : j) : 0;
        const int exact = j < a.S && norm[t] == VC_EXACT_KEY_PICKED, kept = j < a.S && !exact;
        const unsigned mk = __ballot_sync(0xffffffffu, kept), me = __ballot_sync(0xffffffffu, exact);
        if (lane == 0) { warp_base[0][warp] = __popc(mk); warp_base[1][warp] = __popc(me); }
        __syncthreads();
        if (tid < 2) { /* exclusive scan over the warps, one thread per kind */
            int s = running[tid];
            for (int w = 0; w < VC_ORDER_THREADS / 32; ++w) {
                const int c = warp_base[tid][w];
                warp_base[tid][w] = s;
                s += c;
            }
            running[tid] = s;
        }
        __syncthreads();
        const unsigned below = (1u << lane) - 1u;
        if (kept) out[warp_base[0][warp] + __popc(mk & below)] = t;
        if (exact) out[warp_base[1][warp] + __popc(me & below)] = t;
        __syncthreads();
    }
}

/* CPT channels per lane (lane l holds channels l*CPT ..); a warp computes R rows at once,
 * VC_MERGE_ROWS rows per block of VC_MERGE_WARPS warps, the exact keys' K and V in shared
 * memory per block. Each warp streams its rows' Q, O and LSE through VC_MERGE_STAGES slots of
 * shared memory with cp.async, so the loads of the next steps are in flight while it computes.
 * A lane copies exactly the channels it reads back: only the LSE slot is shared in the warp.
 * The loop is issue-bound on dependent shuffles and FMAs: it needs warps to hide them, so two
 * blocks share an SM (VC_MERGE_BLOCKS_PER_SM: <= 128 registers, no spill; 2 x 82 KB of shared
 * memory at D = 128). */
#define VC_MERGE_ROWS 1024
#define VC_MERGE_WARPS 8
#define VC_MERGE_BLOCKS_PER_SM 2
#define VC_MERGE_ROWS_PER_STEP 4 /* rows a warp computes at once */
#define VC_MERGE_STAGES 4

/* One warp's staging slot: R rows of Q (T) and O (TO), then R LSE values. */
template <typename T, typename TO, int D>
__host__ __device__ constexpr int vc_merge_slot_bytes() {
    return VC_MERGE_ROWS_PER_STEP * D * (int)(sizeof(T) + sizeof(TO)) + VC_MERGE_ROWS_PER_STEP * 4;
}

template <typename T, typename TO, int D>
__host__ __device__ constexpr int vc_merge_smem_bytes() {
    return 2 * VC_EXACT_KEYS_MAX * D * 4 + VC_MERGE_WARPS * VC_MERGE_STAGES * vc_merge_slot_bytes<T, TO, D>();
}

template <typename T, int CPT>
__device__ __forceinline__ void vc_store_row(T *row, int lane, const float (&x)[CPT]) {
    uint16_t h[CPT];
#pragma unroll
    for (int i = 0; i < CPT; ++i) {
        const T v = vc_f32_to<T>(x[i]);
        h[i] = *reinterpret_cast<const uint16_t *>(&v);
    }
    uint16_t *p = reinterpret_cast<uint16_t *>(row) + lane * CPT;
    if (CPT == 4) *reinterpret_cast<uint2 *>(p) = make_uint2(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16);
    else *reinterpret_cast<uint32_t *>(p) = h[0] | (uint32_t)h[1] << 16;
}

/* One level of the transposing butterfly: lanes with bit OFF keep the upper half of the
 * values, send the lower half, and add what the partner sent. */
template <int OFF, int N>
__device__ __forceinline__ void vc_transpose_level(float (&p)[N], int lane) {
    const bool up = lane & OFF;
#pragma unroll
    for (int i = 0; i < OFF; ++i) {
        float keep = p[i], send = p[i + OFF];
        if (up) { const float t = keep; keep = send; send = t; } /* predicated moves */
        p[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
    }
}

template <typename T, typename TO, int CPT>
__global__ void __launch_bounds__(32 * VC_MERGE_WARPS, VC_MERGE_BLOCKS_PER_SM) vc_exact_merge_rows(vc_exact_args a) {
    constexpr int D = CPT * 32, NJ = VC_EXACT_KEYS_MAX, R = VC_MERGE_ROWS_PER_STEP, NS = VC_MERGE_STAGES;
    constexpr int STEPS = VC_MERGE_ROWS / (VC_MERGE_WARPS * R); /* steps per warp */
    extern __shared__ float kv[]; /* [NJ][D] K then [NJ][D] V of the exact keys, FP32; the slots */
    const int bh = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bh / a.H, h = bh % a.H, n = a.n;
    const int32_t *tok = a.order + (int64_t)bh * a.S + (a.S - n);
    float *ks = kv, *vs = kv + NJ * D;
    uint8_t *slots = reinterpret_cast<uint8_t *>(kv + 2 * NJ * D) + warp * NS * vc_merge_slot_bytes<T, TO, D>();
    const int r_begin = blockIdx.x * VC_MERGE_ROWS, r_end = min(a.Sq, r_begin + VC_MERGE_ROWS);
    const T *qh = (const T *)a.q + b * a.q_stride[0] + h * a.q_stride[1];
    TO *oh = (TO *)a.o + b * a.o_stride[0] + h * a.o_stride[1];
    float *lse = a.lse + (int64_t)bh * a.Sq;
    auto q_slot = [&](int s) { return reinterpret_cast<T *>(slots + s * vc_merge_slot_bytes<T, TO, D>()); };
    auto o_slot = [&](int s) { return reinterpret_cast<TO *>(q_slot(s) + R * D); };
    auto l_slot = [&](int s) { return reinterpret_cast<float *>(o_slot(s) + R * D); };
    auto first_row = [&](int k) { return r_begin + (k * VC_MERGE_WARPS + warp) * R; };
    /* step k's rows into slot k % NS (past the end: a copy of the last row, not stored); an
     * empty group past the warp's last step keeps the wait counts uniform */
    auto issue = [&](int k) {
        const int row0 = first_row(k);
        if (k < STEPS && row0 < r_end) {
            const int s = k % NS;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int64_t row = min(row0 + r, r_end - 1);
                cp_async_small<2 * CPT>(q_slot(s) + r * D + lane * CPT, qh + row * a.q_stride[2] + lane * CPT);
                cp_async_small<2 * CPT>(o_slot(s) + r * D + lane * CPT, oh + row * a.o_stride[2] + lane * CPT);
            }
            if (lane < R) cp_async_small<4>(l_slot(s) + lane, lse + min(row0 + lane, r_end - 1));
        }
        cp_async_commit();
    };
#pragma unroll
    for (int k = 0; k < NS - 1; ++k) issue(k);

    for (int j = warp; j < n; j += VC_MERGE_WARPS) {
        const int64_t t = tok[j];
        float x[CPT];
        vc_load_row<T, CPT>((const T *)a.k + b * a.k_stride[0] + h * a.k_stride[1] + t * a.k_stride[2], lane, x);
#pragma unroll
        for (int c = 0; c < CPT; ++c) ks[j * D + lane * CPT + c] = x[c];
        vc_load_row<T, CPT>((const T *)a.v + b * a.v_stride[0] + h * a.v_stride[1] + t * a.v_stride[2], lane, x);
#pragma unroll
        for (int c = 0; c < CPT; ++c) vs[j * D + lane * CPT + c] = x[c];
    }
    __syncthreads();
    for (int k = 0; k < STEPS && first_row(k) < r_end; ++k) {
        const int row0 = first_row(k), s = k % NS;
        issue(k + NS - 1); /* into the slot step k - 1 read */
        cp_async_wait<NS - 1>();
        __syncwarp(); /* the LSE slot was written by lanes 0..R-1 */
        /* R rows at once: each K and V value read from shared memory serves R rows */
        float q[R][CPT], o[R][CPT], u[R][CPT], part[R][NJ], lse_q[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            vc_load_row<T, CPT>(q_slot(s) + r * D, lane, q[r]);
            vc_load_row<TO, CPT>(o_slot(s) + r * D, lane, o[r]);
            lse_q[r] = l_slot(s)[r];
        }
        __syncwarp(); /* every lane has read the LSE slot before step k + 1 refills it */
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            float k[CPT];
#pragma unroll
            for (int c = 0; c < CPT; ++c) k[c] = j < n ? ks[j * D + lane * CPT + c] : 0.0f;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                part[r][j] = 0.0f;
#pragma unroll
                for (int c = 0; c < CPT; ++c) part[r][j] = fmaf(q[r][c], k[c], part[r][j]);
            }
        }
        /* a transposing butterfly over lanes 0-15 (15 shuffles), then the two halves of the
         * channels (1): lane l holds key (l % 16)'s whole dot product */
        float sj[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            vc_transpose_level<8>(part[r], lane);
            vc_transpose_level<4>(part[r], lane);
            vc_transpose_level<2>(part[r], lane);
            vc_transpose_level<1>(part[r], lane);
            const float dot = part[r][0] + __shfl_xor_sync(0xffffffffu, part[r][0], 16);
            sj[r] = lane % 16 < n ? dot * a.c0 : -INFINITY;
        }
        float m2[R], pj[R], l[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            m2[r] = vc_warp_max(sj[r]);
            pj[r] = lane % 16 < n ? exp2f(sj[r] - m2[r]) : 0.0f;
            l[r] = 0.5f * vc_warp_sum(pj[r]); /* every key counted in two lanes: exact halving */
#pragma unroll
            for (int c = 0; c < CPT; ++c) u[r][c] = 0.0f;
        }
        for (int j = 0; j < n; ++j) {
            float v[CPT];
#pragma unroll
            for (int c = 0; c < CPT; ++c) v[c] = vs[j * D + lane * CPT + c];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float pb = __shfl_sync(0xffffffffu, pj[r], j);
#pragma unroll
                for (int c = 0; c < CPT; ++c) u[r][c] = fmaf(pb, v[c], u[r][c]);
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const vc_exact_merge mg = vc_exact_merge_of(lse_q[r], m2[r], l[r]);
            bool finite = isfinite(mg.lse);
#pragma unroll
            for (int c = 0; c < CPT; ++c) {
                o[r][c] = vc_exact_merge_out(mg, o[r][c], u[r][c]);
                finite &= isfinite(o[r][c]);
            }
            if (row0 + r < r_end) {
                vc_store_row<TO, CPT>(oh + (int64_t)(row0 + r) * a.o_stride[2], lane, o[r]);
                if (lane == 0) lse[row0 + r] = mg.lse;
                if (__any_sync(0xffffffffu, !finite) && lane == 0) atomicOr(a.output_flag, 1u);
            }
        }
    }
    cp_async_wait<0>();
}

cudaError_t vc_exact_order_launch(const vc_exact_args &a, int BH, int bf16, cudaStream_t s) {
    const dim3 grid((a.S + 255) / 256, BH);
    if (a.D == 128) {
        if (bf16) vc_key_norm<__nv_bfloat16, 128><<<grid, 256, 0, s>>>(a);
        else vc_key_norm<__half, 128><<<grid, 256, 0, s>>>(a);
    } else {
        if (bf16) vc_key_norm<__nv_bfloat16, 64><<<grid, 256, 0, s>>>(a);
        else vc_key_norm<__half, 64><<<grid, 256, 0, s>>>(a);
    }
    vc_key_order<<<BH, VC_ORDER_THREADS, 0, s>>>(a);
    return cudaGetLastError();
}

template <typename T, typename TO, int CPT>
static cudaError_t vc_exact_merge_one(const vc_exact_args &a, dim3 grid, cudaStream_t s) {
    constexpr int smem = vc_merge_smem_bytes<T, TO, CPT * 32>(); /* above 48 KB: opt in */
    const cudaError_t e = cudaFuncSetAttribute(vc_exact_merge_rows<T, TO, CPT>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    vc_exact_merge_rows<T, TO, CPT><<<grid, 32 * VC_MERGE_WARPS, smem, s>>>(a);
    return cudaGetLastError();
}

template <int CPT>
static cudaError_t vc_exact_merge_t(const vc_exact_args &a, dim3 grid, int in_bf16, int out_bf16, cudaStream_t s) {
    if (in_bf16 && out_bf16) return vc_exact_merge_one<__nv_bfloat16, __nv_bfloat16, CPT>(a, grid, s);
    if (in_bf16) return vc_exact_merge_one<__nv_bfloat16, __half, CPT>(a, grid, s);
    if (out_bf16) return vc_exact_merge_one<__half, __nv_bfloat16, CPT>(a, grid, s);
    return vc_exact_merge_one<__half, __half, CPT>(a, grid, s);
}

cudaError_t vc_exact_merge_launch(const vc_exact_args &a, int BH, int in_bf16, int out_bf16, cudaStream_t s) {
    const dim3 grid((a.Sq + VC_MERGE_ROWS - 1) / VC_MERGE_ROWS, BH);
    return a.D == 128 ? vc_exact_merge_t<4>(a, grid, in_bf16, out_bf16, s) : vc_exact_merge_t<2>(a, grid, in_bf16, out_bf16, s);
}
