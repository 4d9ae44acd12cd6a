/* kmeans.cu - V-Smooth grouping on the GPU: k-means over the value tokens of
 * every (batch, head) at once, and the permutation by a stable counting sort.
 *
 * Two paths, the same algorithm (Lloyd iterations from the same initial centroids,
 * distances |c|^2 - 2 v.c from BF16 operands in FP32, argmin with ties to the lowest
 * index, new centroid = mean of its tokens in double, an empty cluster keeps its
 * centroid, final labels against the returned centroids, perm = stable argsort):
 *
 * K <= 64 (the default k = 64): the fused path below ("fused path"), one persistent
 *   launch for all iterations, the final labelling and the scatter (after a small
 *   init launch); both products by wgmma (sm_90a).
 * K > 64: the earlier path (kmeans_legacy.cu), one iteration = two launches,
 *   mma.sync products.
 * Shared helpers and the workspace layout: kmeans_common.cuh.
 *
 * V is read as BF16/FP16 (FP16 is rounded to BF16 for the product); the
 * centroids are kept in FP32 and rounded to BF16 for the product only.  No float
 * atomics anywhere: the result is bitwise reproducible for a given input.
 */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_common.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/tma.cuh"
#include "tma_encode.cuh"

/* ==== fused path (K <= 64): one persistent launch for every iteration ==================
 *
 * Work items, handed out in order by an atomic counter:
 *   (it, bh, tile) for it = 0 .. iters-1   assign + one-hot partial sums of the tile
 *   (iters, bh, tile)                       final labels + per-tile counts
 *   (iters + 1, bh, tile)                   scatter: the tile's tokens to perm
 * A tile is a fixed range of 128-token sub-tiles (about km2_subs_per_item), so the
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
 * r).  K = 64 is compiled without the K guards (FULL).  (The mma.sync products of
 * session 3 were kept as A/B variants until version 6 and are in git history, commit
 * dd58f4d: same results bit for bit, 1.3-1.6x slower.)  No float atomics: the result is bitwise reproducible.  The reducing CTA drops the partials'
 * L2 lines once read (discard: no write-back of dead data).  Measured steps and A/Bs:
 * docs/kernel-log.md, "GPU k-means". */

#define KM2_THREADS 256
#define KM2_SUB 128
/* Sub-tiles per work item: 32 (4096 tokens) when that still leaves >= 512 items per pass,
 * else 16.  Longer items halve the partial sums (written, reduced, dropped once per item)
 * and the per-item start (centroid load, first V sub-tile): at Wan 720p 1.96 -> 1.88 ms per
 * cold call (docs/kernel-log.md); shorter ones keep small problems spread over the SMs.
 * A function of the shape only, never of the GPU: the same input gives the same bits on any
 * device (the tiling fixes the order of the partial sums). */
#define KM2_MIN_ITEMS_FOR_LONG 512
static inline int64_t km2_subs_per_item(int64_t bh, int64_t nsub) {
    return bh * nsub >= (int64_t)KM2_MIN_ITEMS_FOR_LONG * 32 ? 32 : 16;
}
#define KM2_K 64
#define KM2_RED 2   /* float4 columns per thread per pass of the reduction */
#define KM2_BAD_LABEL 127u  /* label of a token past S (never a cluster: K <= 64) */
/* L2 traffic: V is read once per pass (evict first, so that it does not push the partial
 * sums out of L2), and the partial sums are dropped from L2 once reduced (no write-back of
 * dead lines).  Without both, the partials made a DRAM round trip: ~0.8 GB per cold call at
 * Wan 720p, 10% on top of the 7 GB of V.  Compile-time switches for A/B measurements. */
#ifndef KM2_V_EVICT_FIRST
#define KM2_V_EVICT_FIRST 1
#endif
#ifndef KM2_DISCARD_PARTIALS
#define KM2_DISCARD_PARTIALS 1
#endif

struct km2_args {
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

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *smem_row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ int km_ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void km_st_release(int *p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* ---- shared-memory tiles of the fused path ------------------------------------------------
 * Every operand tile is stored the way wgmma reads it: 128-byte rows (64 BF16) with the
 * 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), a tile of D channels
 * as D/64 column blocks of ROWS x 128 B, each 1024-byte aligned:
 *   centroids  [D/64][64 clusters][64]   K-major B of the distances
 *   V sub-tile [D/64][128 tokens][64]    K-major A of the distances, MN-major B of the sums
 *   one-hot    [2][64 clusters][64 tok]  K-major A of the sums (tokens 64i..64i+63)
 * Offset (in elements) of element (r, col) of such a tile: */
template <int ROWS>
__device__ __forceinline__ int km_sw(int r, int col) {
    return (col >> 6) * (ROWS * 64) + r * 64 + ((((col >> 3) & 7) ^ (r & 7)) << 3) + (col & 7);
}

__device__ __forceinline__ void km_fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* D(f32, 64x64) (+)= A(bf16, 64x16, smem) * B(bf16, 16x64, smem); TB = 1: B stored
 * MN-major (N contiguous).  d[4j + 2h + e] = D[16w + g + 8h][8j + 2t + e] (wgmma.cuh). */
template <int TB>
__device__ __forceinline__ void km_wgmma_64x64(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TB));
}

/* descriptor of a 128B-swizzled tile at smem address `addr`: LBO and SBO both 1024 B (8 rows
 * x 128 B).  K-major: SBO is the 8-row step, LBO unused.  MN-major with N = 64 (one
 * column block): the 8-row step along K is SBO (CUTLASS's canonical form); LBO, the step
 * between column blocks, is not used by N = 64 - set to the same 1024 so that either
 * reading of the two fields gives the same layout. */
__device__ __forceinline__ uint64_t km_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

/* The low word of km_desc(addr), computed once per tile: the descriptor of addr + off is then
 * km_desc_at(lo, off), one integer add (the 14-bit address field cannot carry out: shared
 * addresses are below 256 KB).  Rebuilding the descriptor from the address for every wgmma
 * cost ~12 instructions each, a fifth of the k-means loop. */
__device__ __forceinline__ uint32_t km_desc_lo(uint32_t addr) { return (uint32_t)km_desc(addr); }
__device__ __forceinline__ uint64_t km_desc_at(uint32_t lo, uint32_t byte_off) {
    return ((uint64_t)(uint32_t)(km_desc(0) >> 32) << 32) | (uint64_t)(lo + (byte_off >> 4));
}

__device__ __forceinline__ void km_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void km_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void km_wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void km_reg_fence(float (&d)[32]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* V sub-tile rows [s0, s0 + 128) into vs by TMA, completing on bar: one box of 64 channels
 * x 128 tokens per 64-channel column block, written 128B-swizzled - the layout km_sw
 * describes - and rows past S zero-filled by the TMA unit.  One thread issues. */
template <int D>
__device__ __forceinline__ void km2_tma_v(const CUtensorMap *vmap, uint64_t *bar, __nv_bfloat16 *vs, int b, int h,
                                          int s0) {
    mbarrier_arrive_expect_tx(bar, KM2_SUB * D * 2);
#if KM2_V_EVICT_FIRST
    const uint64_t pol = l2_policy_evict_first();
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) tma_load_4d_hint(vs + cb * (KM2_SUB * 64), vmap, bar, cb * 64, s0, h, b, pol);
#else
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) tma_load_4d(vs + cb * (KM2_SUB * 64), vmap, bar, cb * 64, s0, h, b);
#endif
}

/* bytes of the fused path's shared tiles (after the 1024-byte alignment of the base) */
template <int D>
struct km2_lay {
    static constexpr int CS = KM2_K * D * 2, VB = KM2_SUB * D * 2, OH = KM2_K * KM2_SUB * 2;
    static constexpr int SMALL = 3 * KM2_K * 4 + KM2_K * 4 + 16 + KM2_SUB * 2;
    static constexpr int TOTAL = CS + 2 * VB + OH + SMALL + 1024;
};

template <int D, bool FULL, bool ACC>
__device__ __forceinline__ void km2_cluster_item(const km2_args &a, const CUtensorMap *vmap, uint64_t *vbar,
                                                 uint32_t &vpar, unsigned char *sm, int it, int bh, int tile) {
    typedef km2_lay<D> L;
    __nv_bfloat16 *cs = reinterpret_cast<__nv_bfloat16 *>(sm);                /* centroids */
    __nv_bfloat16 *vbuf = reinterpret_cast<__nv_bfloat16 *>(sm + L::CS);      /* [2] V sub-tiles */
    __nv_bfloat16 *oh = reinterpret_cast<__nv_bfloat16 *>(sm + L::CS + 2 * L::VB); /* one-hot */
    float *cn = reinterpret_cast<float *>(sm + L::CS + 2 * L::VB + L::OH);    /* [64] */
    int *cnt_s = reinterpret_cast<int *>(cn + KM2_K);                          /* [64] */
    int *tot = cnt_s + KM2_K;                                                  /* [64] */
    int *flag = tot + KM2_K;                                                   /* [4] */
    uint16_t *lab16 = reinterpret_cast<uint16_t *>(flag + 4);                  /* [128] */

    const int K = FULL ? KM2_K : a.K, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int qr = lane >> 2, qc = (lane & 3) * 2;
    const int wg = warp >> 2; /* warpgroup */
    constexpr bool accumulate = ACC; /* it < a.iters; a template so that no wgmma sits in a divergent branch */
    constexpr bool sums_wg = D == 128; /* D = 64: one 64-channel block, the sums by mma.sync */
    const int b = bh / a.H, h = bh % a.H;
    const char *vbase = reinterpret_cast<const char *>(a.v) + (b * a.vs0 + h * a.vs1) * 2;
    const int sb = (int)((int64_t)tile * a.nsub / a.P), se = (int)((int64_t)(tile + 1) * a.nsub / a.P);
    const int n = se - sb;
    const uint32_t cs_d = km_desc_lo((uint32_t)__cvta_generic_to_shared(cs)),
                   vb_d = km_desc_lo((uint32_t)__cvta_generic_to_shared(vbuf)),
                   oh_d = km_desc_lo((uint32_t)__cvta_generic_to_shared(oh));

    /* centroids (BF16, rows >= K zero) by cp.async and their norms; then the first V sub-tile */
    {
        const __nv_bfloat16 *cg = a.centb + (int64_t)bh * K * D;
        for (int i = tid; i < KM2_K * (D / 8); i += KM2_THREADS) {
            int r = i / (D / 8), c8 = (i % (D / 8)) * 8;
            if (FULL || r < K)
                cp_async_16(&cs[km_sw<KM2_K>(r, c8)], cg + r * D + c8);
            else
                *reinterpret_cast<uint4 *>(&cs[km_sw<KM2_K>(r, c8)]) = make_uint4(0, 0, 0, 0);
        }
        if (tid < KM2_K) {
            cn[tid] = tid < K ? __ldcg(a.cnorm + (int64_t)bh * K + tid) : INFINITY;
            cnt_s[tid] = 0;
        }
        if (tid < KM2_SUB) lab16[tid] = (uint16_t)KM2_BAD_LABEL;
        if (accumulate)
            for (int i = tid; i < L::OH / 16; i += KM2_THREADS) reinterpret_cast<uint4 *>(oh)[i] = make_uint4(0, 0, 0, 0);
        cp_async_commit();
        /* the scatter items use the V buffers as scratch (generic writes) before the TMA writes */
        km_fence_async_smem();
        __syncthreads();
        if (a.tma && tid == 0) km2_tma_v<D>(vmap, &vbar[0], vbuf, b, h, sb * KM2_SUB);
    }

    float accs[32];
#pragma unroll
    for (int e = 0; e < 32; ++e) accs[e] = 0.0f;
    const int chh = warp >> 2, g = warp & 3; /* mma.sync sums: cluster half, channel group */

    for (int j = 0; j < n; ++j) {
        const int s0 = (sb + j) * KM2_SUB;
        __nv_bfloat16 *vs = vbuf + (j & 1) * (L::VB / 2);
        const uint32_t vs_d = vb_d + (((j & 1) * L::VB) >> 4) + ((wg * 64 * 128) >> 4); /* this warpgroup's rows */
        const uint32_t vt_d = vb_d + (((j & 1) * L::VB) >> 4) + ((wg * (KM2_SUB * 128)) >> 4); /* its channels */
        if (!a.tma) { /* V not 16-byte aligned: 2-byte loads by every thread */
            for (int i = tid; i < KM2_SUB * D / 2; i += KM2_THREADS) {
                int r = (2 * i) / D, d = (2 * i) % D, s = s0 + r;
                __nv_bfloat162 pair;
                if (s < a.S) {
                    const void *row = vbase + (int64_t)s * a.vs2 * 2;
                    pair = __floats2bfloat162_rn(km_load_value(row, d, a.is_bf16), km_load_value(row, d + 1, a.is_bf16));
                } else {
                    pair = __floats2bfloat162_rn(0.0f, 0.0f);
                }
                *reinterpret_cast<__nv_bfloat162 *>(&vs[km_sw<KM2_SUB>(r, d)]) = pair;
            }
        }
        if (a.tma) { /* sub-tile j landed; buffer j & 1's parity flips with every use */
            mbarrier_wait(&vbar[j & 1], (vpar >> (j & 1)) & 1u);
            vpar ^= 1u << (j & 1);
        }
        if (j == 0) cp_async_wait<0>(); /* the centroids */
        if (a.tma && !a.is_bf16) /* FP16 -> BF16 in place, each thread its own chunks */
            for (int i = tid; i < KM2_SUB * (D / 8); i += KM2_THREADS) {
                int r = i / (D / 8), c8 = (i % (D / 8)) * 8;
                uint16_t *e = reinterpret_cast<uint16_t *>(&vs[km_sw<KM2_SUB>(r, c8)]);
#pragma unroll
                for (int q = 0; q < 8; ++q)
                    e[q] = __bfloat16_as_ushort(__float2bfloat16_rn(__half2float(__ushort_as_half(e[q]))));
            }
        if (j == 0 || !a.tma || !a.is_bf16)
            km_fence_async_smem(); /* this thread's shared writes (not the TMA's) -> visible to wgmma */
        if (accumulate && sums_wg) { /* the sums of sub-tile j-1 have read their V and one-hot */
            km_wgmma_wait0();
            km_reg_fence(accs);
        }
        __syncthreads(); /* sub-tile j visible; every warp is past sub-tile j-1 */
        if (a.tma && j + 1 < n && tid == 0)
            km2_tma_v<D>(vmap, &vbar[(j + 1) & 1], vbuf + ((j + 1) & 1) * (L::VB / 2), b, h, s0 + KM2_SUB);

        /* distances: warpgroup wg = tokens 64wg.. x all 64 centroids (B read once per
         * warpgroup); warp w holds tokens 16w.. of them */
        {
            float acc[32];
#pragma unroll
            for (int e = 0; e < 32; ++e) acc[e] = 0.0f;
            km_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const uint32_t koff = (kk & 3) * 32;
                const uint64_t da = km_desc_at(vs_d, (kk >> 2) * (KM2_SUB * 128) + koff);
                const uint64_t db = km_desc_at(cs_d, (kk >> 2) * (KM2_K * 128) + koff);
                km_wgmma_64x64<0>(acc, da, db, kk > 0);
            }
            km_wgmma_commit();
            km_wgmma_wait0();
            km_reg_fence(acc);
            /* |c|^2 - 2 v.c with one rounding (2 v.c is exact): the same value as c - 2.0f * acc */
            float2 c2[8];
#pragma unroll
            for (int t = 0; t < 8; ++t)
                if (t * 8 < K) c2[t] = *reinterpret_cast<const float2 *>(&cn[t * 8 + qc]);
            int args[2];
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float best = INFINITY;
                int arg = 0;
#pragma unroll
                for (int t = 0; t < 8; ++t) {
                    if (t * 8 < K) {
                        const float d0 = __fmaf_rn(-2.0f, acc[4 * t + hf * 2], c2[t].x);
                        const float d1 = __fmaf_rn(-2.0f, acc[4 * t + hf * 2 + 1], c2[t].y);
                        if (d0 < best) { best = d0; arg = t * 8 + qc; }
                        if (d1 < best) { best = d1; arg = t * 8 + qc + 1; }
                    }
                }
#pragma unroll
                for (int o = 1; o <= 2; o <<= 1) {
                    float ob = __shfl_xor_sync(0xffffffffu, best, o);
                    int oa = __shfl_xor_sync(0xffffffffu, arg, o);
                    if (ob < best || (ob == best && oa < arg)) { best = ob; arg = oa; }
                }
                args[hf] = arg; /* every lane of the quad holds it now */
            }
            /* lane 0 of a quad writes the label of its row qr, lane 1 that of row qr + 8 (both
             * halves in one pass: half the issue of one writer per quad) */
            if ((lane & 3) < 2) {
                /* token r's column of the one-hot matrix is only touched by this thread */
                const int hf = lane & 1, arg = hf ? args[1] : args[0];
                const int r = warp * 16 + hf * 8 + qr;
                const bool valid = s0 + r < a.S;
                if (accumulate) {
                    const int old = lab16[r];
                    __nv_bfloat16 *ob = oh + (r >> 6) * (KM2_K * 64); /* token block r / 64 */
                    if (old != (int)KM2_BAD_LABEL) ob[km_sw<KM2_K>(old, r & 63)] = __float2bfloat16_rn(0.0f);
                    if (valid) ob[km_sw<KM2_K>(arg, r & 63)] = __float2bfloat16_rn(1.0f);
                }
                lab16[r] = valid ? (uint16_t)arg : (uint16_t)KM2_BAD_LABEL;
                if (valid) atomicAdd(&cnt_s[arg], 1); /* integers: order-free */
            }
        }
        km_fence_async_smem();
        __syncthreads(); /* labels of sub-tile j visible */

        if (accumulate) {
            if (sums_wg) {
                /* onehot [64 clusters x 128 tokens] . V [128 tokens x 64 channels of warpgroup wg],
                 * accumulated over the tile; waited for before the next sub-tile's barrier */
                km_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < KM2_SUB / 16; ++kk) {
                    const uint64_t da = km_desc_at(oh_d, (kk >> 2) * (KM2_K * 128) + (kk & 3) * 32);
                    const uint64_t db = km_desc_at(vt_d, kk * 16 * 128);
                    km_wgmma_64x64<1>(accs, da, db, 1);
                }
                km_wgmma_commit();
            } else if (chh * 32 < K) {
                constexpr int NCH = D / 4; /* channels per warp */
                const int br = (lane & 7) + ((lane >> 3) & 1) * 8, bc = g * NCH + (lane >> 4) * 8;
                const int orow = chh * 32 + (lane & 15), ocol = (lane >> 4) * 8;
                const bool m1 = FULL || chh * 32 + 16 < K;
#pragma unroll
                for (int k0 = 0; k0 < KM2_SUB; k0 += 16) {
                    uint32_t a0[4], a1[4];
                    const int tcol = k0 + ocol, tb = (tcol >> 6) * (KM2_K * 64);
                    ldmatrix_x4(a0, oh + tb + km_sw<KM2_K>(orow, tcol & 63));
                    if (m1) ldmatrix_x4(a1, oh + tb + km_sw<KM2_K>(orow + 16, tcol & 63));
#pragma unroll
                    for (int n0 = 0; n0 < NCH; n0 += 16) {
                        uint32_t bf[4];
                        ldmatrix_x4_trans(bf, vs + km_sw<KM2_SUB>(k0 + br, bc + n0));
                        const uint32_t b01[2] = {bf[0], bf[1]}, b23[2] = {bf[2], bf[3]};
                        mma_bf16_16816(*reinterpret_cast<float(*)[4]>(&accs[(n0 / 8) * 4]), a0, b01);
                        mma_bf16_16816(*reinterpret_cast<float(*)[4]>(&accs[(n0 / 8 + 1) * 4]), a0, b23);
                        if (m1) {
                            mma_bf16_16816(*reinterpret_cast<float(*)[4]>(&accs[16 + (n0 / 8) * 4]), a1, b01);
                            mma_bf16_16816(*reinterpret_cast<float(*)[4]>(&accs[16 + (n0 / 8 + 1) * 4]), a1, b23);
                        }
                    }
                }
            }
        } else {
            /* final labelling: labels out (the scatter items read them) */
            if (tid < KM2_SUB && s0 + tid < a.S) a.labels[(int64_t)bh * a.S + s0 + tid] = lab16[tid];
        }
    }

    /* this tile's partial sums and counts */
    if (accumulate && sums_wg) {
        km_wgmma_wait0();
        km_reg_fence(accs);
    }
    __syncthreads();
    if (accumulate) {
        float *dst = a.part_sum + ((int64_t)bh * a.P + tile) * K * D;
        if (sums_wg) {
            /* thread: clusters 16(w%4) + g (+8), channels 64wg + 8j + 2t (+1) */
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int c = g * 16 + hh * 8 + qr;
                if (c < K)
#pragma unroll
                    for (int t = 0; t < 8; ++t)
                        __stcg(reinterpret_cast<float2 *>(&dst[c * D + wg * 64 + t * 8 + qc]),
                               make_float2(accs[4 * t + 2 * hh], accs[4 * t + 2 * hh + 1]));
            }
        } else if (chh * 32 < K) {
            constexpr int NCH = D / 4;
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                if (chh * 32 + m * 16 >= K) break;
                const int c0 = chh * 32 + m * 16 + qr;
#pragma unroll
                for (int t = 0; t < NCH / 8; ++t) {
                    const int col = g * NCH + t * 8 + qc;
                    __stcg(reinterpret_cast<float2 *>(&dst[c0 * D + col]), make_float2(accs[m * 16 + t * 4], accs[m * 16 + t * 4 + 1]));
                    __stcg(reinterpret_cast<float2 *>(&dst[(c0 + 8) * D + col]), make_float2(accs[m * 16 + t * 4 + 2], accs[m * 16 + t * 4 + 3]));
                }
            }
        }
    }
    const int64_t cbase = ((int64_t)bh * a.P) * K;
    if (tid < K) __stcg(&a.part_cnt[cbase + (int64_t)tile * K + tid], cnt_s[tid]);
    __threadfence();
    __syncthreads();
    if (tid == 0) flag[0] = atomicAdd(&a.done[bh], 1);
    __syncthreads();
    if (flag[0] != (it + 1) * a.P - 1) return;

    /* the last tile of (it, bh): reduce (or the offsets after the final labelling) */
    __threadfence();
    if (tid < K) {
        int s = 0;
        for (int t = 0; t < a.P; ++t) s += __ldcg(&a.part_cnt[cbase + (int64_t)t * K + tid]);
        tot[tid] = s;
    }
    __syncthreads();
    if (accumulate) {
        const int nv4 = K * D / 4; /* a multiple of 256 */
        const float4 *src = reinterpret_cast<const float4 *>(a.part_sum + (int64_t)bh * a.P * K * D);
        float4 *cent = reinterpret_cast<float4 *>(a.cent + (int64_t)bh * K * D);
        uint2 *centb = reinterpret_cast<uint2 *>(a.centb + (int64_t)bh * K * D);
        for (int base = 0; base < nv4; base += KM2_RED * KM2_THREADS) {
            double s[KM2_RED][4];
#pragma unroll
            for (int u = 0; u < KM2_RED; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[u][e] = 0.0;
            for (int t = 0; t < a.P; ++t) {
#pragma unroll
                for (int u = 0; u < KM2_RED; ++u) {
                    const int i = base + u * KM2_THREADS + tid;
                    if (i < nv4) {
                        const float4 x = __ldcg(src + (int64_t)t * nv4 + i);
                        s[u][0] += x.x; s[u][1] += x.y; s[u][2] += x.z; s[u][3] += x.w;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < KM2_RED; ++u) {
                const int i = base + u * KM2_THREADS + tid;
                if (i >= nv4) break; /* warp-uniform */
                const int c = i / (D / 4), cntc = tot[c];
                float4 x = __ldcg(cent + i);
                if (cntc > 0) {
                    const double dn = (double)cntc;
                    x = make_float4((float)(s[u][0] / dn), (float)(s[u][1] / dn), (float)(s[u][2] / dn),
                                    (float)(s[u][3] / dn));
                }
                __stcg(cent + i, x);
                const __nv_bfloat162 lo = __floats2bfloat162_rn(x.x, x.y), hi = __floats2bfloat162_rn(x.z, x.w);
                __stcg(centb + i, make_uint2(*reinterpret_cast<const uint32_t *>(&lo), *reinterpret_cast<const uint32_t *>(&hi)));
                const float2 fl = __bfloat1622float2(lo), fh = __bfloat1622float2(hi);
                float q = fl.x * fl.x;
                q = fmaf(fl.y, fl.y, q);
                q = fmaf(fh.x, fh.x, q);
                q = fmaf(fh.y, fh.y, q);
#pragma unroll
                for (int o = D / 8; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
                if ((lane & (D / 4 - 1)) == 0) __stcg(a.cnorm + (int64_t)bh * K + c, q);
            }
        }
#if KM2_DISCARD_PARTIALS
        __syncthreads(); /* every thread is done reading the partials */
        {
            const char *pb = reinterpret_cast<const char *>(src);
            const int lines = a.P * K * D * 4 / 128; /* K * D * 4 is a multiple of 4 KB */
            for (int i = tid; i < lines; i += KM2_THREADS) l2_discard_line(pb + (int64_t)i * 128);
        }
#endif
    } else {
        /* counting sort: offsets[(bh, tile, c)] = sum of earlier clusters + this cluster's earlier tiles */
        if (tid == 0) km_exclusive_scan(tot, K);
        __syncthreads();
        if (tid < K) {
            int run = tot[tid];
            for (int t = 0; t < a.P; ++t) {
                __stcg(&a.offsets[cbase + (int64_t)t * K + tid], run);
                run += __ldcg(&a.part_cnt[cbase + (int64_t)t * K + tid]);
            }
        }
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) km_st_release(&a.ready[bh], it + 1);
}

/* the tile's tokens to their places: perm[offset(c, tile) + rank among the tile's c] = token */
template <int D>
__device__ __forceinline__ void km2_scatter_item(const km2_args &a, unsigned char *sm, int bh, int tile) {
    int *wc = reinterpret_cast<int *>(sm + km2_lay<D>::CS);          /* [8][64], in the V buffers */
    int *base = wc + 8 * KM2_K;                                        /* [64] */
    const int K = a.K, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sb = (int)((int64_t)tile * a.nsub / a.P), se = (int)((int64_t)(tile + 1) * a.nsub / a.P);
    const int t0 = sb * KM2_SUB, t1 = min(se * KM2_SUB, a.S);
    if (tid < K) base[tid] = __ldcg(&a.offsets[((int64_t)bh * a.P + tile) * K + tid]);
    const int32_t *lab = a.labels + (int64_t)bh * a.S;
    int32_t *dst = a.perm + (int64_t)bh * a.S;
    for (int c0 = t0; c0 < t1; c0 += KM2_THREADS) {
        for (int i = tid; i < 8 * KM2_K; i += KM2_THREADS) wc[i] = 0;
        __syncthreads();
        const int t = c0 + tid;
        const bool valid = t < t1;
        const int L = valid ? __ldcg(&lab[t]) : 1000;
        const unsigned peers = __match_any_sync(0xffffffffu, L);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (valid && rank == 0) wc[warp * KM2_K + L] = __popc(peers);
        __syncthreads();
        if (tid < K) {
            int run = base[tid];
            for (int w = 0; w < KM2_THREADS / 32; ++w) {
                int x = wc[w * KM2_K + tid];
                wc[w * KM2_K + tid] = run;
                run += x;
            }
            base[tid] = run;
        }
        __syncthreads();
        if (valid) dst[wc[warp * KM2_K + L] + rank] = t;
        __syncthreads();
    }
}

template <int D, bool FULL>
__global__ void __launch_bounds__(KM2_THREADS, 2) km2_main(const km2_args a, const __grid_constant__ CUtensorMap vmap) {
    extern __shared__ __align__(16) unsigned char km2_smem[];
    __shared__ long long s_item;
    __shared__ __align__(8) uint64_t vbar[2]; /* V sub-tile buffers full (TMA) */
    uint32_t vpar = 0;                        /* parity of each buffer's next phase */
    if (threadIdx.x == 0) {
        mbarrier_init(&vbar[0], 1);
        mbarrier_init(&vbar[1], 1);
        fence_mbarrier_init();
    }
    /* the swizzled tiles want 1024-byte alignment (the launch adds 1 KB of slack) */
    unsigned char *sm = km2_smem + ((1024u - ((uint32_t)__cvta_generic_to_shared(km2_smem) & 1023u)) & 1023u);
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
            km2_scatter_item<D>(a, sm, bh, tile);
        else
            if (it < a.iters)
                km2_cluster_item<D, FULL, true>(a, &vmap, vbar, vpar, sm, it, bh, tile);
            else
                km2_cluster_item<D, FULL, false>(a, &vmap, vbar, vpar, sm, it, bh, tile);
    }
}

/* initial centroids (the given ones, or K tokens as km_init), their BF16 copy and norms;
 * zeroes the counters.  grid (K, BH), one thread per channel. */
__global__ void km2_init(const km2_args a, int D, const float *init, uint64_t seed) {
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

/* ---- host side -------------------------------------------------------------------------- */

static size_t km_align(size_t x) { return (x + 255) & ~(size_t)255; }

static vcattn_status km_validate(const vcattn_gpu_kmeans_params *p, km_layout *L) {
    if (!p) return VCATTN_STATUS_NULL_POINTER;
    if (!p->v || !p->perm || !p->centroids) return VCATTN_STATUS_NULL_POINTER;
    if (p->batch <= 0 || p->heads <= 0 || p->seq <= 0) return VCATTN_STATUS_BAD_SHAPE;
    if (p->head_dim != 64 && p->head_dim != 128) return VCATTN_STATUS_UNSUPPORTED_HEAD_DIM;
    if (p->clusters < 16 || p->clusters > KM_MAX_K || p->clusters % 16 != 0 || p->iterations < 0)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->dtype != VCATTN_GPU_DTYPE_BF16 && p->dtype != VCATTN_GPU_DTYPE_FP16) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->seq > INT32_MAX / 2 || p->batch * p->heads > 65535) return VCATTN_STATUS_SIZE_OVERFLOW;
    for (int i = 0; i < 3; ++i)
        if (p->v_stride[i] < 0) return VCATTN_STATUS_BAD_STRIDE;
    if (p->seq > 1 && p->v_stride[2] < p->head_dim && p->v_stride[1] < p->head_dim) return VCATTN_STATUS_BAD_STRIDE;
    L->bh = p->batch * p->heads;
    L->fused = p->clusters <= KM2_K;
    L->nsub = (p->seq + KM2_SUB - 1) / KM2_SUB;
    {
        const int64_t spi = km2_subs_per_item(L->bh, L->nsub);
        L->P = (L->nsub + spi - 1) / spi;
    }
    L->ntiles = L->fused ? L->P : (p->seq + KM_TOKENS - 1) / KM_TOKENS;
    if (L->fused && L->bh * L->P > INT32_MAX / 4) return VCATTN_STATUS_SIZE_OVERFLOW;
    size_t o = 0;
    L->cent = o;     o += km_align((size_t)L->bh * p->clusters * p->head_dim * sizeof(float));
    L->labels = o;   o += km_align((size_t)L->bh * p->seq * sizeof(int32_t));
    L->part_sum = o; o += km_align((size_t)L->bh * L->ntiles * p->clusters * p->head_dim * sizeof(float));
    L->part_cnt = o; o += km_align((size_t)L->bh * L->ntiles * p->clusters * sizeof(int));
    L->offsets = o;  o += km_align((size_t)L->bh * L->ntiles * p->clusters * sizeof(int));
    L->centb = o;    o += km_align((size_t)L->bh * p->clusters * p->head_dim * sizeof(__nv_bfloat16));
    L->cnorm = o;    o += km_align((size_t)L->bh * p->clusters * sizeof(float));
    L->ctr = o;      o += km_align(sizeof(unsigned long long) + 2 * (size_t)L->bh * sizeof(int));
    L->total = o;
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_kmeans_workspace_size(const vcattn_gpu_kmeans_params *p, size_t *bytes) {
    if (!bytes) return VCATTN_STATUS_NULL_POINTER;
    km_layout L;
    vcattn_status st = km_validate(p, &L);
    if (st) return st;
    *bytes = L.total;
    return VCATTN_STATUS_SUCCESS;
}

/* The V map of the fused path: dims (channels, tokens, heads, batch) with the caller's
 * strides, box 64 channels x 128 tokens, 128B swizzle, zero fill past S.  false (-> the
 * 2-byte load path) when V is not 16-byte aligned or the driver refuses the map. */
static bool km2_make_vmap(const vcattn_gpu_kmeans_params *p, CUtensorMap *m) {
    PFN_cuTensorMapEncodeTiled_v12000 fn = vc_tma_encode_fn();
    if (!fn || !km_vec16(p)) return false;
    cuuint64_t dims[4] = {(cuuint64_t)p->head_dim, (cuuint64_t)p->seq, (cuuint64_t)p->heads, (cuuint64_t)p->batch};
    cuuint64_t strides[3] = {(cuuint64_t)p->v_stride[2] * 2, (cuuint64_t)p->v_stride[1] * 2,
                             (cuuint64_t)p->v_stride[0] * 2};
    cuuint32_t box[4] = {64, KM2_SUB, 1, 1}, estr[4] = {1, 1, 1, 1};
    return fn(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void *>(p->v), dims, strides, box, estr,
              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D, bool FULL>
static vcattn_status km2_launch(const km2_args &a, const CUtensorMap &vmap, cudaStream_t stream) {
    const size_t smem = km2_lay<D>::TOTAL;
    vcattn_status st;
    if ((st = km_cuda(cudaFuncSetAttribute(km2_main<D, FULL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))))
        return st;
    int dev = 0, sms = 0, per_sm = 0;
    if ((st = km_cuda(cudaGetDevice(&dev))) || (st = km_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))) ||
        (st = km_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, km2_main<D, FULL>, KM2_THREADS, smem))))
        return st;
    if (per_sm < 1) return VCATTN_STATUS_CUDA_ERROR;
    long long grid = (long long)sms * per_sm;
    if (grid > a.total) grid = a.total;
    km2_main<D, FULL><<<(unsigned)grid, KM2_THREADS, smem, stream>>>(a, vmap);
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_kmeans(const vcattn_gpu_kmeans_params *p, void *workspace,
                                           size_t workspace_bytes, void *stream_ptr) {
    km_layout L;
    vcattn_status st = km_validate(p, &L);
    if (st) return st;
    if (!workspace) return VCATTN_STATUS_NULL_POINTER;
    /* the partial sums are read as float4 and dropped from L2 in 128-byte lines */
    if (workspace_bytes < L.total || (uintptr_t)workspace % 256) return VCATTN_STATUS_INVALID_ARGUMENT;
    if ((st = vcattn_gpu_device_check())) return st;
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    char *ws = (char *)workspace;
    float *cent = (float *)(ws + L.cent);
    const int K = p->clusters, D = (int)p->head_dim;

    if (!L.fused) {
        st = vc_kmeans_legacy(p, L, ws, stream);
    } else {
        km2_args a;
        a.v = p->v;
        a.vs0 = p->v_stride[0];
        a.vs1 = p->v_stride[1];
        a.vs2 = p->v_stride[2];
        a.H = (int)p->heads;
        a.S = (int)p->seq;
        a.K = K;
        a.BH = (int)L.bh;
        a.P = (int)L.P;
        a.nsub = (int)L.nsub;
        a.iters = p->iterations;
        a.is_bf16 = p->dtype == VCATTN_GPU_DTYPE_BF16;
        CUtensorMap vmap;
        memset(&vmap, 0, sizeof vmap);
        a.tma = km2_make_vmap(p, &vmap);
        a.total = ((long long)p->iterations + 2) * L.bh * L.P;
        a.cent = cent;
        a.centb = (__nv_bfloat16 *)(ws + L.centb);
        a.cnorm = (float *)(ws + L.cnorm);
        a.part_sum = (float *)(ws + L.part_sum);
        a.part_cnt = (int *)(ws + L.part_cnt);
        a.offsets = (int *)(ws + L.offsets);
        a.labels = p->labels ? p->labels : (int32_t *)(ws + L.labels);
        a.perm = p->perm;
        a.next = (unsigned long long *)(ws + L.ctr);
        a.done = (int *)(ws + L.ctr + sizeof(unsigned long long));
        a.ready = a.done + L.bh;
        km2_init<<<dim3(K, (unsigned)L.bh), 128, 0, stream>>>(a, D, p->init_centroids, p->seed);
        if (D == 128)
            st = K == KM2_K ? km2_launch<128, true>(a, vmap, stream) : km2_launch<128, false>(a, vmap, stream);
        else
            st = K == KM2_K ? km2_launch<64, true>(a, vmap, stream) : km2_launch<64, false>(a, vmap, stream);
    }
    if (st) return st;
    size_t cent_bytes = (size_t)L.bh * K * D * sizeof(float);
    if (p->centroids != cent)
        st = km_cuda(cudaMemcpyAsync(p->centroids, cent, cent_bytes, cudaMemcpyDeviceToDevice, stream));
    if (st) return st;
    return km_cuda(cudaGetLastError());
}
