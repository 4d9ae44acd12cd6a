/* exact_keys.cu - which keys a V-Smooth method keeps out of the quantized pass (src/exact_keys.h):
 *   vc_key_norm     one thread per token: its V norm in channel order (the CPU's order);
 *   vc_key_order    one block per (batch, head): the n largest (n block-wide argmax rounds, a
 *                   total order), then the plan's order stably partitioned, them at its end.
 * The preprocessing runs both (the quantized pass reads the new order); the attention
 * kernel's epilogue merges the exact keys into its rows (attention/exact_merge.cuh). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "exact_keys.h"
#include "gpu_common.cuh"

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
