/* fused_kernels.cuh - the kernels of the fused path: the persistent kernel that
 * hands out the work items (fused_args.cuh) in order, and the init launch. */
#pragma once

#include "grouping/common.cuh"
#include "grouping/fused_args.cuh"
#include "grouping/fused_cluster.cuh"
#include "grouping/fused_scatter.cuh"
#include "grouping/fused_sync.cuh"
#include "ptx/mbarrier.cuh"

template <int D, bool FULL>
__global__ void __launch_bounds__(VC_KM_THREADS, 2) vc_km_fused(const vc_km_fused_args a, const __grid_constant__ CUtensorMap vmap) {
    extern __shared__ __align__(16) unsigned char vc_km_smem_raw[];
    __shared__ long long s_item;
    __shared__ __align__(8) uint64_t vbar[2]; /* V sub-tile buffers full (TMA) */
    uint32_t vpar = 0;                        /* parity of each buffer's next phase */
    if (threadIdx.x == 0) {
        mbarrier_init(&vbar[0], 1);
        mbarrier_init(&vbar[1], 1);
        fence_mbarrier_init();
    }
    /* the swizzled tiles want 1024-byte alignment (the launch adds 1 KB of slack) */
    unsigned char *sm = vc_km_smem_raw + ((1024u - ((uint32_t)__cvta_generic_to_shared(vc_km_smem_raw) & 1023u)) & 1023u);
    const int per_it = a.BH * a.P;
    for (;;) {
        if (threadIdx.x == 0) s_item = (long long)atomicAdd(a.next, 1ull);
        __syncthreads();
        const long long item = s_item;
        __syncthreads();
        if (item >= a.total) break;
        const int it = (int)(item / per_it), rem = (int)(item % per_it), bh = rem / a.P, tile = rem % a.P;
        if (it > 0) {
            if (threadIdx.x == 0)
                while (km_ld_acquire(&a.ready[bh]) < it) __nanosleep(128);
            __syncthreads();
        }
        if (it == a.iters + 1)
            vc_km_scatter_item<D>(a, sm, bh, tile);
        else
            if (it < a.iters)
                vc_km_cluster_item<D, FULL, true>(a, &vmap, vbar, vpar, sm, it, bh, tile);
            else
                vc_km_cluster_item<D, FULL, false>(a, &vmap, vbar, vpar, sm, it, bh, tile);
    }
}

/* initial centroids (the given ones, or K tokens as km_init), their BF16 copy and norms;
 * zeroes the counters.  grid (K, BH), one thread per channel. */
__global__ void vc_km_fused_init(const vc_km_fused_args a, int D, const float *init, uint64_t seed) {
    __shared__ float part[4];
    const int c = blockIdx.x, bh = blockIdx.y, d = threadIdx.x;
    float x = 0.0f;
    if (d < D) {
        if (init) {
            x = init[((int64_t)bh * a.K + c) * D + d];
        } else {
            x = km_load_value(km_init_row(a, bh, c, seed), d, a.is_bf16);
        }
        const int64_t o = ((int64_t)bh * a.K + c) * D + d;
        a.cent[o] = x;
        a.centb[o] = __float2bfloat16_rn(x);
    }
    float xb = __bfloat162float(__float2bfloat16_rn(x)), q = xb * xb;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if ((d & 31) == 0) part[d >> 5] = q;
    __syncthreads();
    if (d == 0) {
        a.cnorm[(int64_t)bh * a.K + c] = (part[0] + part[1]) + (part[2] + part[3]);
        if (c == 0) {
            a.done[bh] = 0;
            a.ready[bh] = 0;
            if (bh == 0) *a.next = 0ull;
        }
    }
}
