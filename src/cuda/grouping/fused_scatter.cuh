/* fused_scatter.cuh - the last work items of the fused path: each tile's tokens to
 * their places in the permutation (stable counting sort). */
#pragma once

#include "grouping/fused_args.cuh"
#include "grouping/fused_tiles.cuh"

/* the tile's tokens to their places: perm[offset(c, tile) + rank among the tile's c] = token */
template <int D>
__device__ __forceinline__ void vc_km_scatter_item(const vc_km_fused_args &a, unsigned char *sm, int bh, int tile) {
    int *wc = reinterpret_cast<int *>(sm + vc_km_smem<D>::CS);          /* [8][64], in the V buffers */
    int *base = wc + 8 * VC_KM_FUSED_K;                                        /* [64] */
    const int K = a.K, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sb = (int)((int64_t)tile * a.nsub / a.P), se = (int)((int64_t)(tile + 1) * a.nsub / a.P);
    const int t0 = sb * VC_KM_SUB, t1 = min(se * VC_KM_SUB, a.S);
    if (tid < K) base[tid] = __ldcg(&a.offsets[((int64_t)bh * a.P + tile) * K + tid]);
    const int32_t *lab = a.labels + (int64_t)bh * a.S;
    int32_t *dst = a.perm + (int64_t)bh * a.S;
    for (int c0 = t0; c0 < t1; c0 += VC_KM_THREADS) {
        for (int i = tid; i < 8 * VC_KM_FUSED_K; i += VC_KM_THREADS) wc[i] = 0;
        __syncthreads();
        const int t = c0 + tid;
        const bool valid = t < t1;
        const int L = valid ? __ldcg(&lab[t]) : 1000;
        const unsigned peers = __match_any_sync(0xffffffffu, L);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (valid && rank == 0) wc[warp * VC_KM_FUSED_K + L] = __popc(peers);
        __syncthreads();
        if (tid < K) {
            int run = base[tid];
            for (int w = 0; w < VC_KM_THREADS / 32; ++w) {
                int x = wc[w * VC_KM_FUSED_K + tid];
                wc[w * VC_KM_FUSED_K + tid] = run;
                run += x;
            }
            base[tid] = run;
        }
        __syncthreads();
        if (valid) dst[wc[warp * VC_KM_FUSED_K + L] + rank] = t;
        __syncthreads();
    }
}
