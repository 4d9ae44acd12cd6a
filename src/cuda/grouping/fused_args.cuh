/* fused_args.cuh - the fused k-means path (K <= 64): how the work is cut, its
 * constants and the arguments of its kernels (host and device).  The kernels are
 * fused_kernels.cuh, the host side kmeans.cu and workspace.cu. */
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

/* The fused path (K <= 64): one persistent launch for every iteration.
 *
 * Work items, handed out in order by an atomic counter:
 *   (it, bh, tile) for it = 0 .. iters-1   assign + one-hot partial sums of the tile
 *   (iters, bh, tile)                       final labels + per-tile counts
 *   (iters + 1, bh, tile)                   scatter: the tile's tokens to perm
 * A tile is a fixed range of 128-token sub-tiles (about vc_km_subs_per_item), so the
 * partial sum of (bh, tile) is computed the same way whichever CTA takes it.  The CTA
 * that completes the last tile of (it, bh) (ticket on done[bh]) reduces the P partials
 * in tile order (double) into the new centroids (FP32, BF16 copy, norms of the BF16
 * values) - or, after the final labelling, the counting-sort offsets - and publishes
 * ready[bh] = it + 1 (release).  A CTA taking an item of (it, bh) waits for
 * ready[bh] >= it (acquire); the items it waits for were handed out before its own, so
 * the lowest unfinished item never waits: no deadlock, whatever the residency.
 *
 * Per sub-tile: V (128 x D BF16) double-buffered into 128B-swizzled tiles by TMA (one
 * thread issues, an mbarrier per buffer; 16-byte aligned V - else 2-byte loads by all
 * threads), with an evict-first L2 policy; distances |c|^2 - 2 v.c by wgmma (warpgroup g: tokens 64g..64g+63 x 64
 * centroids, m64n64k16 from shared memory, so every centroid byte is read once per
 * warpgroup); argmin, ties to the lowest index; partial sums onehot(labels)^T V as a
 * second wgmma (warpgroup g: 64 clusters x channels 64g..64g+63, V as the MN-major B
 * operand) whose accumulators stay in registers for the whole tile and which runs
 * asynchronously until the next sub-tile's barrier.  D = 64 keeps the mma.sync sums
 * (warp w: clusters 32(w/4).. x channels (w%4) D/4..).  The one-hot matrix (64 x 128
 * BF16) lives in shared memory and is shared by the warps: the thread that labels
 * token r clears r's old entry and sets the new one (no other thread touches column
 * r).  K = 64 is compiled without the K guards (FULL).  (An mma.sync form of both
 * products gives the same bits and is 1.3-1.6x slower: docs/kernel-log.md.)  No float
 * atomics: the result is bitwise reproducible.  The reducing CTA drops the partials'
 * L2 lines once read (discard: no write-back of dead data).  Measured steps and A/Bs:
 * docs/kernel-log.md, "GPU k-means". */

#define VC_KM_THREADS 256
#define VC_KM_SUB 128
/* Sub-tiles per work item: 32 (4096 tokens) when that still leaves >= 512 items per pass,
 * else 16.  Longer items halve the partial sums (written, reduced, dropped once per item)
 * and the per-item start (centroid load, first V sub-tile): at Wan 720p 1.96 -> 1.88 ms per
 * cold call (docs/kernel-log.md); shorter ones keep small problems spread over the SMs.
 * A function of the shape only, never of the GPU: the same input gives the same bits on any
 * device (the tiling fixes the order of the partial sums). */
#define VC_KM_MIN_ITEMS_FOR_LONG 512
static inline int64_t vc_km_subs_per_item(int64_t bh, int64_t nsub) {
    return bh * nsub >= (int64_t)VC_KM_MIN_ITEMS_FOR_LONG * 32 ? 32 : 16;
}
#define VC_KM_FUSED_K 64
#define VC_KM_RED 2   /* float4 columns per thread per pass of the reduction */
#define VC_KM_BAD_LABEL 127u  /* label of a token past S (never a cluster: K <= 64) */
/* L2 traffic: V is read once per pass (evict first, so that it does not push the partial
 * sums out of L2), and the partial sums are dropped from L2 once reduced (no write-back of
 * dead lines).  Without both, the partials made a DRAM round trip: ~0.8 GB per cold call at
 * Wan 720p, 10% on top of the 7 GB of V.  Compile-time switches for A/B measurements. */
#ifndef VC_KM_V_EVICT_FIRST
#define VC_KM_V_EVICT_FIRST 1
#endif
#ifndef VC_KM_DISCARD_PARTIALS
#define VC_KM_DISCARD_PARTIALS 1
#endif

struct vc_km_fused_args {
    const void *v;
    int64_t vs0, vs1, vs2;
    int H, S, K, BH, P, nsub, iters, is_bf16;
    int tma;                /* V sub-tiles by TMA (the map encoded); else 2-byte loads */
    long long total;        /* (iters + 2) * BH * P items */
    float *cent;            /* (BH, K, D) FP32 */
    __nv_bfloat16 *centb;   /* (BH, K, D) BF16 copy used by the product */
    float *cnorm;           /* (BH, K) |bf16(c)|^2 */
    float *part_sum;        /* (BH, P, K, D) */
    int *part_cnt;          /* (BH, P, K) */
    int *offsets;           /* (BH, P, K) */
    int32_t *labels;        /* (BH, S) */
    int32_t *perm;          /* (BH, S) */
    unsigned long long *next; /* work counter */
    int *done, *ready;      /* (BH) each */
};
