/* restore.cuh - the V-Smooth mean restore, O += r mu^T per block.
 *
 * V was stored as block residuals V - mu_b; the exact product needs
 * r_b mu_b^T added back, r_b = the row sum of the quantized P of block b (as
 * the product used it: the ones rows of V^T yield it in accumulator columns
 * 128..135).  It runs on the tensor core: alpha r, split into two FP16 halves,
 * is the A operand of one m64n136k16 FP16 wgmma whose B operand is the block's
 * FP16 means ({mu, mu, 0...} per channel, written by the preprocessing, loaded
 * by the producer into the means ring).  It is issued right after the NEXT
 * block's P V into the same accumulator (scaled by that block's alpha, so the
 * fold's O = alpha O + acc carries it): O itself never becomes a wgmma
 * operand, which would leave too few registers (ptxas serialized every wgmma,
 * C7512).  The FP16 product accumulates in FP32 after the FP8 k-steps, so the
 * large mean term does not widen the FP8 accumulator's truncation.  The last
 * block's term goes into O after the last fold, on the CUDA cores. */
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

/* acc += (alpha r) mu^T of the block whose means sit in slot mst: K-major,
 * no swizzle, channel n's 16 bytes at 16 n (SBO 128 B per 8 channels); the
 * second core matrix along K (columns 8..15, zero in A) re-reads the first.
 * N = 136 as the P V (one accumulator shape): rows 128..135 of B are the
 * zero rows after the means, so the r columns stay untouched. */
__device__ __forceinline__ void vc_att_issue_restore(vc_att_consumer &cs, uint64_t desc_mu0, unsigned mst) {
    wgmma_m64n136k16_f32_f16_rs(cs.acc, cs.RA, desc_mu0 + mst * (VC_ATT_MU_SLOT >> 4), 1);
}

/* RA = FP16 hi + lo of sc * rprev (numerics.h, vc_rowsum_f16_split) */
__device__ __forceinline__ void vc_att_make_ra(vc_att_consumer &cs, const float (&sc)[2]) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const float x = sc[hh] * cs.rprev[hh];
        const float hi = __uint_as_float(__float_as_uint(x) & 0xFFFFE000u);
        cs.RA[hh] = cvt_f16x2(hi, x - hi);
    }
}

/* The last block's term, once, on the CUDA cores (O as a wgmma accumulator
 * would need registers the pipeline does not have). */
__device__ __forceinline__ void vc_att_restore_last(vc_att_consumer &cs, const uint8_t *sMU, int nkb, int t) {
    const uint32_t smu = smem_u32(sMU + ((nkb - 1) & (VC_ATT_MU_SLOTS - 1)) * VC_ATT_MU_SLOT) + 32 * t;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        /* the quad's FP16-split partials, summed (s0 + s1) + (s2 + s3) */
        float rs = vc_rowsum_f16_split(cs.rprev[hh]);
        rs += __shfl_xor_sync(0xffffffffu, rs, 1);
        rs += __shfl_xor_sync(0xffffffffu, rs, 2);
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float mu = __half2float(__ushort_as_half(
                    (unsigned short)(__float_as_uint(lds_f32(smu + 128 * j + 16 * e)) & 0xFFFFu)));
                cs.O[4 * j + 2 * hh + e] = fmaf(rs, mu, cs.O[4 * j + 2 * hh + e]);
            }
    }
}
