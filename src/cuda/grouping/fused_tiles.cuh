/* fused_tiles.cuh - the shared-memory side of the fused path: the
 * 128B-swizzled operand tiles, their wgmma descriptors and the 64x64 product, the
 * V sub-tile by TMA, and the byte map of the shared tiles. */
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "grouping/fused_args.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/mma_sync.cuh"
#include "ptx/tma.cuh"

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
__device__ __forceinline__ void vc_km_tma_v(const CUtensorMap *vmap, uint64_t *bar, __nv_bfloat16 *vs, int b, int h,
                                          int s0) {
    mbarrier_arrive_expect_tx(bar, VC_KM_SUB * D * 2);
#if VC_KM_V_EVICT_FIRST
    const uint64_t pol = l2_policy_evict_first();
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) tma_load_4d_hint(vs + cb * (VC_KM_SUB * 64), vmap, bar, cb * 64, s0, h, b, pol);
#else
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) tma_load_4d(vs + cb * (VC_KM_SUB * 64), vmap, bar, cb * 64, s0, h, b);
#endif
}

/* bytes of the fused path's shared tiles (after the 1024-byte alignment of the base) */
template <int D>
struct vc_km_smem {
    static constexpr int CS = VC_KM_FUSED_K * D * 2, VB = VC_KM_SUB * D * 2, OH = VC_KM_FUSED_K * VC_KM_SUB * 2;
    static constexpr int SMALL = 3 * VC_KM_FUSED_K * 4 + VC_KM_FUSED_K * 4 + 16 + VC_KM_SUB * 2;
    static constexpr int TOTAL = CS + 2 * VB + OH + SMALL + 1024;
};
