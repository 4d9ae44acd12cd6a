/* restore.cuh - the V-Smooth mean restore, O += r mu^T per block.
 *
 * V was stored as block residuals V - mu_b; the exact product needs
 * r_b mu_b^T added back, r_b = the row sum of the quantized P of block b (as
 * the product used it: the ones rows of V^T yield it in accumulator columns
 * 128..135).  It runs on the tensor core, two blocks per instruction: one
 * m64n136k16 FP16 wgmma whose A operand holds, per quad thread t, the FP16
 * hi + lo of its partial coefficient of block 2j (columns 2t, 2t + 1) and of
 * block 2j + 1 (columns 8 + 2t, 9 + 2t), and whose B operand is the two
 * blocks' FP16 means (8 copies per channel, written by the preprocessing,
 * loaded by the producer into consecutive slots of the means ring; the
 * descriptor's K stride steps from one slot to the next).  The pair rides in
 * block 2j + 2's accumulator, right after its P V, scaled to that block's
 * scale (block 2j: alpha_{2j+1} alpha_{2j+2} r, block 2j + 1: alpha_{2j+2} r),
 * so the fold's O = alpha O + acc carries it: O itself never becomes a wgmma
 * operand, which would leave too few registers (ptxas serialized every wgmma,
 * C7512).  Plain ExpCast (VC_MODE_EXPCAST) keeps one block per instruction
 * (A columns 8..15 zero, riding in the next block's accumulator, scaled by
 * its alpha): paired it measured 2% slower, while the exp path gained 6% and
 * the other ExpCast modes 1% (Wan 720p; docs/kernel-log.md).  The FP16
 * product accumulates in FP32 after the FP8 k-steps, so the large mean term
 * does not widen the FP8 accumulator's truncation.  The block or pair still
 * pending after the last fold goes into O on the CUDA cores. */
#pragma once
#include <cuda_fp16.h>

#include "attention/consumer.cuh"
#include "attention/layout.cuh"
#include "numerics.h"
#include "ptx/cvt.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"
#include "ptx/wgmma.cuh"

/* Rows 128..135 of every V^T stage: row 128 + j holds E4M3 ones at the 16
 * keys 16j..16j+15, so accumulator columns 128..135 sum to r; and the zero
 * rows after each slot's means (the bulk copy writes 2048 B).  All threads. */
__device__ __forceinline__ void vc_att_restore_init(uint8_t *sV, uint8_t *sMU, int tid) {
    for (int i = tid; i < VC_ATT_STAGES * 256; i += VC_ATT_THREADS) {
        const int w = i % 256;
        reinterpret_cast<uint32_t *>(sV + (i / 256) * VC_ATT_V_BYTES + VC_ATT_K_BYTES)[w] =
            (w % 32) < 4 ? VC_ATT_E4M3_ONE * 0x01010101u : 0u;
    }
    for (int i = tid; i < VC_ATT_MU_SLOTS * 32; i += VC_ATT_THREADS)
        reinterpret_cast<uint32_t *>(sMU + (i / 32) * VC_ATT_MU_SLOT + VC_ATT_MU_BYTES)[i % 32] = 0u;
}

/* The kept-r area of the paired restore: read (unused) in turn 0 before any
 * turn wrote it.  All threads. */
__device__ __forceinline__ void vc_att_keep_init(uint8_t *smem, int tid) {
    for (int i = tid; i < 2 * 256; i += VC_ATT_THREADS) reinterpret_cast<float *>(smem + VC_ATT_OFF_KEEP)[i] = 0.0f;
}

/* Whether the mode restores two blocks per instruction (the simulation's
 * rule is the same: simulate_tile.c, restore_pairs). */
template <int MODE>
__device__ __forceinline__ constexpr bool vc_att_pairs() {
    return MODE != VC_MODE_SAGE2 && MODE != VC_MODE_EXPCAST; /* sage2: no restore at all */
}

/* acc += (c r) mu^T: K-major, no swizzle, channel n's 16 bytes at 16 n (SBO
 * 128 B per 8 channels).  Paired: the blocks whose means sit in slots mst,
 * mst + 1 (mst even), issued in turns kb = 3, 5, 7, ... (issue != 0), the
 * second core matrix along K (columns 8..15 of A) one slot further (the
 * descriptor's LBO, set in kernel.cu).  Single: the block in slot mst, every
 * turn, the second core matrix along K (zero in A) re-reading the first (LBO 0).  N = 136 as the P V (one
 * accumulator shape): rows 128..135 of B are the zero rows after the means,
 * so the r columns stay untouched. */
template <bool PAIRS>
__device__ __forceinline__ void vc_att_issue_restore(vc_att_consumer &cs, uint64_t desc_mu0, unsigned mst, int issue) {
    const uint64_t desc = desc_mu0 + mst * (VC_ATT_MU_SLOT >> 4);
    if (PAIRS)
        wgmma_m64n136k16_f32_f16_rs_if(cs.acc, cs.RA, desc, 1, issue);
    else
        wgmma_m64n136k16_f32_f16_rs(cs.acc, cs.RA, desc, 1);
}

__device__ __forceinline__ uint32_t vc_att_f16_split(float x) {
    const float hi = __uint_as_float(__float_as_uint(x) & 0xFFFFE000u);
    return cvt_f16x2(hi, x - hi);
}

/* This consumer thread's 8 bytes of the kept-r area (a fresh %tid.x read: a
 * register holding the address through the loop cost a spill). */
__device__ __forceinline__ uint32_t vc_att_keep_addr(const uint8_t *smem) {
    return smem_u32(smem + VC_ATT_OFF_KEEP) + 8u * (read_tid_x() - 128u);
}

/* For turn kb (sc = alpha_kb; rprev = r of block kb - 1), called from inside
 * the softmax once alpha is known (softmax.cuh):
 *   kb odd  (block kb - 1 opens a pair): sc r is kept in shared memory until
 *           the next turn (two registers live through that turn's softmax
 *           spilled);
 *   kb even (block kb - 1 closes it): RA = FP16 hi + lo (numerics.h,
 *           vc_rowsum_f16_split) of sc * (the kept value) and of sc r, for
 *           the restore of turn kb + 1 (RA is free: the restore that read it,
 *           if any, completed before the fold).
 * Branch-free (RA is rewritten in odd turns too, unused). */
__device__ __forceinline__ void vc_att_make_ra(uint32_t (&RA)[4], const float (&rprev)[2], const float (&sc)[2],
                                               unsigned kb, const uint8_t *smem) {
    const uint32_t keep = vc_att_keep_addr(smem);
    const float w0 = sc[0] * rprev[0], w1 = sc[1] * rprev[1];
    if (kb & 1u) sts_v2_f32(keep, w0, w1);
    float k[2];
    lds_v2_f32(keep, k[0], k[1]);
    RA[0] = vc_att_f16_split(sc[0] * k[0]);
    RA[1] = vc_att_f16_split(sc[1] * k[1]);
    RA[2] = vc_att_f16_split(w0);
    RA[3] = vc_att_f16_split(w1);
}

/* Single-block restore, after turn kb's softmax: RA = FP16 hi + lo of
 * alpha_kb r of block kb - 1 (columns 8..15 stay zero). */
__device__ __forceinline__ void vc_att_make_ra_single(vc_att_consumer &cs, const float (&sc)[2]) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) cs.RA[hh] = vc_att_f16_split(sc[hh] * cs.rprev[hh]);
}

/* The mean terms still pending after the last fold, once, on the CUDA cores
 * (O as a wgmma accumulator would need registers the pipeline does not
 * have): with an even block count the pair's first block (its coefficient
 * kept by vc_att_make_ra, already at the last block's scale), then the last
 * block.  Each as the quad's FP16-split partials summed
 * (s0 + s1) + (s2 + s3), as numerics.h and the simulation. */
__device__ __forceinline__ void vc_att_restore_term(vc_att_consumer &cs, uint32_t smu, int hh, float r) {
    float rs = vc_rowsum_f16_split(r);
    rs += __shfl_xor_sync(0xffffffffu, rs, 1);
    rs += __shfl_xor_sync(0xffffffffu, rs, 2);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float mu = __half2float(
                __ushort_as_half((unsigned short)(__float_as_uint(lds_f32(smu + 128 * j + 16 * e)) & 0xFFFFu)));
            cs.O[4 * j + 2 * hh + e] = fmaf(rs, mu, cs.O[4 * j + 2 * hh + e]);
        }
}

template <bool PAIRS>
__device__ __forceinline__ void vc_att_restore_last(vc_att_consumer &cs, const uint8_t *smem, int nkb, int t) {
    const uint8_t *sMU = smem + VC_ATT_OFF_MU;
    const uint32_t smu_last = smem_u32(sMU + ((nkb - 1) & (VC_ATT_MU_SLOTS - 1)) * VC_ATT_MU_SLOT) + 32 * t;
    const uint32_t smu_prev = smem_u32(sMU + ((nkb - 2) & (VC_ATT_MU_SLOTS - 1)) * VC_ATT_MU_SLOT) + 32 * t;
    const bool kept = PAIRS && (nkb & 1) == 0;
    float w[2] = {0.0f, 0.0f};
    if (kept) lds_v2_f32(vc_att_keep_addr(smem), w[0], w[1]);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        if (kept) vc_att_restore_term(cs, smu_prev, hh, w[hh]);
        vc_att_restore_term(cs, smu_last, hh, cs.rprev[hh]);
    }
}
