/* restore.cuh - the V-Smooth mean restore, O += r mu^T per block.
 *
 * V was stored as block residuals V - mu_b; the exact product needs
 * r_b mu_b^T added back, r_b = the row sum of the quantized P of block b (as
 * the product used it: the ones rows of V^T yield it in accumulator columns
 * DH..DH+7).  It runs on the tensor core as an m64n(DH+8)k16 FP16 wgmma riding
 * in a later block's accumulator (so the fold's O = alpha O + acc carries it:
 * O itself never becomes a wgmma operand, which would leave too few
 * registers, C7512), eight blocks per instruction (every V-Smooth mode).
 * The ones rows of V^T are all ones, so every quad thread holds the full r of
 * its two rows; thread t keeps the coefficients of blocks t and t + 4 of the
 * open group (softmax_numerics.h, "the grouped mean restore"), at the current block's
 * scale, in shared memory; A holds their FP16 hi + lo (columns 2t, 2t + 1:
 * block t; 8 + 2t, 9 + 2t: block t + 4) and B the group's means, each twice
 * (written so by the preprocessing, one 4 KB group slot of the means ring;
 * the descriptor's K stride steps to the second half).  The group of blocks
 * 8g..8g+7 rides in block 8g + 8's accumulator, the last (partial) group in
 * the last block's, and the last block's own term goes into O on the CUDA
 * cores after the last fold.  (One block per instruction, the form plain
 * ExpCast kept longest, and two per instruction: docs/kernel-log.md.)
 * The FP16 product accumulates in FP32 after the FP8 k-steps, so the large
 * mean term does not widen the FP8 accumulator's truncation. */
#pragma once
#include <cuda_fp16.h>

#include "attention/consumer.cuh"
#include "attention/layout.cuh"
#include "numerics.h"
#include "ptx/cvt.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"
#include "ptx/wgmma.cuh"

/* Rows DH..DH+7 of every V^T stage: all ones, so every one of accumulator columns DH..DH+7
 * is r (the quantized row sum; alone, without the restore, on a step that turns V-Smooth
 * off).  All threads. */
template <int DH>
__device__ __forceinline__ void vc_att_ones_init(uint8_t *sV, int tid) {
    for (int i = tid; i < VC_ATT_STAGES * 256; i += VC_ATT_THREADS_OF(DH))
        reinterpret_cast<uint32_t *>(sV + (i / 256) * VC_ATT_V_BYTES + VC_ATT_V_CODE_BYTES(DH))[i % 256] =
            VC_ATT_E4M3_ONE * 0x01010101u;
}

/* The ones rows, and the zero rows after each slot's means (the bulk copy writes
 * VC_ATT_MU_BYTES(DH)).  All threads. */
template <int DH>
__device__ __forceinline__ void vc_att_restore_init(uint8_t *sV, uint8_t *sMU, int tid) {
    vc_att_ones_init<DH>(sV, tid);
    for (int i = tid; i < VC_ATT_MU_SLOTS * 32; i += VC_ATT_THREADS_OF(DH))
        reinterpret_cast<uint32_t *>(sMU + (i / 32) * VC_ATT_MU_SLOT + VC_ATT_MU_BYTES(DH))[i % 32] = 0u;
}

/* The pending coefficients of the grouped restore (and the block-max group
 * floor's G): zero before turn 0.  All threads. */
template <int DH>
__device__ __forceinline__ void vc_att_keep_init(uint8_t *smem, int tid) {
    for (int i = tid; i < VC_ATT_CONSUMER_THREADS * VC_ATT_KEEP_BYTES / 4; i += VC_ATT_THREADS_OF(DH))
        reinterpret_cast<float *>(smem + VC_ATT_OFF_KEEP)[i] = 0.0f;
}

/* acc += (c r) mu^T: K-major, no swizzle, channel n's 16 bytes at 16 n (SBO
 * 128 B per 8 channels): the group slot starting at 2176-byte slot mst
 * (even), the second core matrix along K (blocks 4..7) one slot further (the
 * descriptor's LBO, set in kernel.cuh), issued when `issue` != 0.  N = DH + 8
 * as the P V (one accumulator shape): rows DH..DH+7 of B are the zero rows
 * after the means, so the r columns stay untouched. */
template <int DH>
__device__ __forceinline__ void vc_att_issue_restore(vc_att_consumer<DH> &cs, uint64_t desc_mu0, unsigned mst,
                                                     int issue) {
    const uint64_t desc = desc_mu0 + mst * (VC_ATT_MU_SLOT >> 4);
    if (VC_ATT_DIAG == 2) return; /* mainloop.cuh: the softmax alone */
    if constexpr (DH == 64)
        wgmma_m64n72k16_f32_f16_rs_if(cs.acc, cs.RA, desc, 1, issue);
    else
        wgmma_m64n136k16_f32_f16_rs_if(cs.acc, cs.RA, desc, 1, issue);
}

__device__ __forceinline__ uint32_t vc_att_f16_split(float x) {
    const float hi = __uint_as_float(__float_as_uint(x) & 0xFFFFE000u);
    return cvt_f16x2(hi, x - hi);
}

/* This consumer thread's VC_ATT_KEEP_BYTES of the kept area (a fresh %tid.x
 * read: a register holding the address through the loop cost a spill):
 * the pending coefficients p0[2], p1[2], then the block-max floor's G[2]. */
__device__ __forceinline__ uint32_t vc_att_keep_addr(const uint8_t *smem) {
    return smem_u32(smem + VC_ATT_OFF_KEEP) + VC_ATT_KEEP_BYTES * (read_tid_x() - 128u);
}

/* Grouped restore, for turn kb (sc = alpha_kb, rprev = r of block b = kb - 1),
 * called from inside the softmax once alpha is known (softmax.cuh): this
 * thread's pending coefficients (blocks t and t + 4 of the open group) move
 * to block kb's scale and block b's joins them when it is one of the two;
 * when b closes its group, or kb is the last block (the partial group rides
 * in the last block's accumulator), RA = FP16 hi + lo (vc_rowsum_f16_split)
 * of the four, for the restore issued with block kb's P V, and a closed
 * group empties.  RA is free then: the restore that read it completed before
 * the fold.  (Turn 0: b wraps to a "closed group" of zeros, harmless.) */
__device__ __forceinline__ void vc_att_make_ra_group(uint32_t (&RA)[4], const float (&rprev)[2], const float (&sc)[2],
                                                     unsigned kb, int nkb, int t, const uint8_t *smem) {
    const uint32_t keep = vc_att_keep_addr(smem);
    float p[4];
    lds_v4_f32(keep, p[0], p[1], p[2], p[3]);
    const unsigned b = kb - 1u;
    const bool mine = (b & 3u) == (unsigned)t, upper = ((b >> 2) & 1u) != 0u;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const float w = sc[hh] * rprev[hh];
        p[hh] = mine && !upper ? w : sc[hh] * p[hh];
        p[2 + hh] = mine && upper ? w : sc[hh] * p[2 + hh];
    }
    const bool closes = (b & (VC_ATT_RESTORE_GROUP - 1u)) == VC_ATT_RESTORE_GROUP - 1u;
    if (closes || kb == (unsigned)nkb - 1u) { /* warp-uniform */
#pragma unroll
        for (int i = 0; i < 4; ++i) RA[i] = vc_att_f16_split(p[i]);
    }
    if (closes) p[0] = p[1] = p[2] = p[3] = 0.0f;
    sts_v4_f32(keep, p[0], p[1], p[2], p[3]);
}

/* The block-max group floor's G after block b (softmax_numerics.h): the largest
 * scale m of the open group's blocks, b included (G restarts with each
 * group's first block).  Called in the fold of block b, off the softmax's
 * path; G lives in shared memory between turns (in registers it spilled).
 * The softmax of block b + 1 floors its scale with it. */
__device__ __forceinline__ void vc_att_group_max(float (&G)[2], const float (&m)[2], unsigned b, const uint8_t *smem) {
    const uint32_t gaddr = vc_att_keep_addr(smem) + 16u;
    lds_v2_f32(gaddr, G[0], G[1]);
    const bool opens = (b & (VC_ATT_RESTORE_GROUP - 1u)) == 0u;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) G[hh] = opens ? m[hh] : fmaxf(G[hh], m[hh]);
    sts_v2_f32(gaddr, G[0], G[1]);
}

/* The mean term still pending after the last fold, once, on the CUDA cores
 * (O as a wgmma accumulator would need registers the pipeline does not
 * have): the last block, with its full r.  smu: this thread's channels'
 * means (32 t bytes into the slot, plus the block's 4-byte word inside each
 * channel's 16 bytes). */
template <int DH>
__device__ __forceinline__ void vc_att_restore_term(vc_att_consumer<DH> &cs, uint32_t smu, int hh, float r) {
    const float rs = vc_rowsum_f16_split(r);
#pragma unroll
    for (int j = 0; j < DH / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float mu = __half2float(
                __ushort_as_half((unsigned short)(__float_as_uint(lds_f32(smu + 128 * j + 16 * e)) & 0xFFFFu)));
            cs.O[4 * j + 2 * hh + e] = fmaf(rs, mu, cs.O[4 * j + 2 * hh + e]);
        }
}

template <int DH>
__device__ __forceinline__ void vc_att_restore_last(vc_att_consumer<DH> &cs, const uint8_t *smem, int nkb, int t) {
    const uint8_t *sMU = smem + VC_ATT_OFF_MU;
    const unsigned L = (unsigned)nkb - 1u;
    /* group L / 8's slot, half (L / 4) % 2, the word of block L % 4 */
    const uint32_t smu =
        smem_u32(sMU + (2u * ((L >> 3) & (VC_ATT_MU_GROUP_SLOTS - 1u)) + ((L >> 2) & 1u)) * VC_ATT_MU_SLOT) + 32 * t +
        4 * (L & 3u);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) vc_att_restore_term(cs, smu, hh, cs.rprev[hh]);
}
