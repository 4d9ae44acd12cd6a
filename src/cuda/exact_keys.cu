/* exact_keys.cu - the keys a V-Smooth method keeps out of the quantized pass (src/exact_keys.h):
 *   vc_key_norm     one thread per token: its V norm in channel order (the CPU's order);
 *   vc_key_order    one block per (batch, head): the n largest (n block-wide argmax rounds, a
 *                   total order), then the plan's order stably partitioned, them at its end;
 *   vc_exact_merge_rows  one warp per query row: FP32 scores against the n exact keys, their
 *                   softmax and P V, merged with the quantized pass's output and LSE.
 * The preprocessing runs the first two (the quantized pass reads the new order); the
 * attention call runs the merge after the attention kernel. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "exact_keys.h"
#include "gpu_common.cuh"

template <typename T>
__device__ __forceinline__ float vc_elem_f32(T x);
template <>
__device__ __forceinline__ float vc_elem_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ float vc_elem_f32<__half>(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T vc_f32_to(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 vc_f32_to<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half vc_f32_to<__half>(float x) { return __float2half_rn(x); }

template <typename T>
__global__ void __launch_bounds__(256) vc_key_norm(vc_exact_args a) {
    const int bh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= a.S) return;
    const int b = bh / a.H, h = bh % a.H;
    const T *row = (const T *)a.v + b * a.v_stride[0] + h * a.v_stride[1] + (int64_t)t * a.v_stride[2];
    float acc = 0.0f;
    for (int d = 0; d < a.D; ++d) acc = vc_exact_key_norm_step(acc, vc_elem_f32<T>(row[d]));
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

/* CPT channels per lane; one warp per row, VC_MERGE_ROWS rows per block of 4 warps */
#define VC_MERGE_ROWS 64

template <typename T, typename TO, int CPT>
__global__ void __launch_bounds__(128) vc_exact_merge_rows(vc_exact_args a) {
    extern __shared__ float kv[]; /* [n][D] K then [n][D] V of the exact keys, FP32 */
    const int bh = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bh / a.H, h = bh % a.H, D = CPT * 32;
    const int32_t *tok = a.order + (int64_t)bh * a.S + (a.S - a.n);
    float *ks = kv, *vs = kv + a.n * D;
    for (int i = threadIdx.x; i < a.n * D; i += blockDim.x) {
        const int j = i / D, d = i % D, t = tok[j];
        ks[i] = vc_elem_f32<T>(((const T *)a.k)[b * a.k_stride[0] + h * a.k_stride[1] + (int64_t)t * a.k_stride[2] + d]);
        vs[i] = vc_elem_f32<T>(((const T *)a.v)[b * a.v_stride[0] + h * a.v_stride[1] + (int64_t)t * a.v_stride[2] + d]);
    }
    __syncthreads();
    const int r_end = min(a.Sq, (blockIdx.x + 1) * VC_MERGE_ROWS);
    for (int row = blockIdx.x * VC_MERGE_ROWS + warp; row < r_end; row += 4) {
        float q[CPT], u[CPT], s[VC_EXACT_KEYS_MAX];
        vc_load_row<T, CPT>((const T *)a.q + b * a.q_stride[0] + h * a.q_stride[1] + (int64_t)row * a.q_stride[2],
                            lane, q);
        float m2 = -INFINITY;
#pragma unroll
        for (int j = 0; j < VC_EXACT_KEYS_MAX; ++j) {
            if (j < a.n) {
                float part = 0.0f;
#pragma unroll
                for (int c = 0; c < CPT; ++c) part = fmaf(q[c], ks[j * D + lane * CPT + c], part);
                s[j] = vc_warp_sum(part) * a.c0;
                m2 = fmaxf(m2, s[j]);
            }
        }
        float l = 0.0f;
#pragma unroll
        for (int c = 0; c < CPT; ++c) u[c] = 0.0f;
#pragma unroll
        for (int j = 0; j < VC_EXACT_KEYS_MAX; ++j) {
            if (j < a.n) {
                const float pj = exp2f(s[j] - m2);
                l += pj;
#pragma unroll
                for (int c = 0; c < CPT; ++c) u[c] = fmaf(pj, vs[j * D + lane * CPT + c], u[c]);
            }
        }
        float *lse = a.lse + (int64_t)bh * a.Sq + row;
        const vc_exact_merge mg = vc_exact_merge_of(*lse, m2, l);
        TO *o = (TO *)a.o + b * a.o_stride[0] + h * a.o_stride[1] + (int64_t)row * a.o_stride[2] + lane * CPT;
        bool finite = isfinite(mg.lse);
#pragma unroll
        for (int c = 0; c < CPT; ++c) {
            const float x = vc_exact_merge_out(mg, vc_elem_f32<TO>(o[c]), u[c]);
            finite &= isfinite(x);
            o[c] = vc_f32_to<TO>(x);
        }
        __syncwarp();
        if (lane == 0) *lse = mg.lse;
        if (__any_sync(0xffffffffu, !finite) && lane == 0) atomicOr(a.output_flag, 1u);
    }
}

cudaError_t vc_exact_order_launch(const vc_exact_args &a, int BH, int bf16, cudaStream_t s) {
    const dim3 grid((a.S + 255) / 256, BH);
    if (bf16) vc_key_norm<__nv_bfloat16><<<grid, 256, 0, s>>>(a);
    else vc_key_norm<__half><<<grid, 256, 0, s>>>(a);
    vc_key_order<<<BH, VC_ORDER_THREADS, 0, s>>>(a);
    return cudaGetLastError();
}

template <int CPT>
static void vc_exact_merge_t(const vc_exact_args &a, dim3 grid, size_t smem, int in_bf16, int out_bf16, cudaStream_t s) {
    if (in_bf16 && out_bf16) vc_exact_merge_rows<__nv_bfloat16, __nv_bfloat16, CPT><<<grid, 128, smem, s>>>(a);
    else if (in_bf16) vc_exact_merge_rows<__nv_bfloat16, __half, CPT><<<grid, 128, smem, s>>>(a);
    else if (out_bf16) vc_exact_merge_rows<__half, __nv_bfloat16, CPT><<<grid, 128, smem, s>>>(a);
    else vc_exact_merge_rows<__half, __half, CPT><<<grid, 128, smem, s>>>(a);
}

cudaError_t vc_exact_merge_launch(const vc_exact_args &a, int BH, int in_bf16, int out_bf16, cudaStream_t s) {
    const dim3 grid((a.Sq + VC_MERGE_ROWS - 1) / VC_MERGE_ROWS, BH);
    const size_t smem = sizeof(float) * 2 * (size_t)a.n * a.D; /* <= 32 KB: no opt-in needed */
    if (a.D == 128) vc_exact_merge_t<4>(a, grid, smem, in_bf16, out_bf16, s);
    else vc_exact_merge_t<2>(a, grid, smem, in_bf16, out_bf16, s);
    return cudaGetLastError();
}
