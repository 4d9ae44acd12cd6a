/* softmax.cuh - the online softmax of one 128-key block in a consumer thread:
 * INT32 scores S (the wgmma accumulator) -> the running row max, the rescale
 * factor alpha, and P as E4M3 A fragments for the P V product.
 *
 * Two ways to write P (softmax_numerics.h is the contract for both):
 *   exp path (sage2, vsmooth): p = 2^(s c - m) by MUFU.EX2, cast to E4M3 by
 *     F2FP (SageAttention2's scaling: the max offset 8.807 puts the row max
 *     at 448);
 *   ExpCast: the E4M3 byte straight from the score, one saturating FFMA per
 *     score (the bracket times 2^-24, clamped at code 0 by the saturation);
 *     the FP32 -> FP16x2 conversion rounds two brackets at once (FP16
 *     subnormals are spaced 2^-24) and one PRMT packs four codes;
 *   ExpCast against the block's own max (P_FORMAT_EXPCAST, P_SCALE_BLOCK_MAX): the
 *     ExpCast codes, with the scale m following the block's max down by at
 *     most d = min(1, 64 / blocks) log2 units per block (softmax_numerics.h, "the
 *     block-max P scale"): one FADD more per row, none per score;
 *   the exp path against the block's own max (P_FORMAT_E4M3, P_SCALE_BLOCK_MAX): the
 *     same scale rule, the block's max at 256 (2^8) instead of 448;
 *   the split (P_FORMAT_SPLIT): ExpCast block-max's scale, the keys
 *     vc_split_key_is_exp picks (in pair i = 0 of the first k-steps, keys
 *     32kk + 0..15; whole registers or half-registers) by the exp path in
 *     ExpCast's scale (softmax_numerics.h, "the split P"), the others by the
 *     split's ExpCast codes. */
#pragma once
#include <limits.h>
#include <math.h>

#include "gpu_common.cuh"
#include "numerics.h"
#include "attention/restore.cuh"
#include "ptx/cvt.cuh"

/* Max of this thread's 32 INT32 scores of accumulator row g + 8 hh (columns
 * 8j + 2t + e; masked past nvalid with TAIL): a tree of 3-input maxima of
 * depth 4, 17 VIMNMX3 (two 16-deep chains sat on the softmax's critical path). */
template <bool TAIL>
__device__ __forceinline__ int vc_row_max_s32(const int32_t (&S)[64], int hh, int t, int nvalid) {
    int v[32];
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) v[2 * j + e] = (!TAIL || 8 * j + 2 * t + e < nvalid) ? S[4 * j + 2 * hh + e] : INT_MIN;
    int w[11];
#pragma unroll
    for (int i = 0; i < 10; ++i) w[i] = max(max(v[3 * i], v[3 * i + 1]), v[3 * i + 2]);
    w[10] = max(v[30], v[31]);
    const int x0 = max(max(w[0], w[1]), w[2]), x1 = max(max(w[3], w[4]), w[5]);
    const int x2 = max(max(w[6], w[7]), w[8]), x3 = max(w[9], w[10]);
    return max(max(x0, x1), max(x2, x3));
}

/* The exp path's P of four scores S[idx[e]] (keys col[e]; 0 past nvalid with
 * TAIL): ONE FFMA per score, the exact product minus m (bias = -m, or the split's
 * offset - m), then MUFU.EX2.  For a large score scale the product's rounding
 * residual would be the exponent (2^(+-65536) at scores of ~1e12: Inf or 0, NaN
 * rows), so the DIRECT kernel rounds the product first, as the simulation's
 * t = fl(s c), in every thread of its heads (a per-thread choice spilled 4 B). */
template <bool TAIL, bool DIRECT>
__device__ __forceinline__ void vc_att_exp_p4(const int32_t (&S)[64], const int (&idx)[4], const int (&col)[4],
                                              float c, float bias, int nvalid, float (&p)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        p[e] = ex2_approx(DIRECT ? __fadd_rn(__fmul_rn((float)S[idx[e]], c), bias) : fmaf((float)S[idx[e]], c, bias));
        if (TAIL && col[e] >= nvalid) p[e] = 0.0f;
    }
}

/* ExpCast's saturating bracket of one score (plain, block-max and the split's
 * ExpCast keys): w = sat(2^-24 bracket), ONE FFMA.SAT whose saturation is the
 * clamp at code 0 (vc_expcast_code_from_bracket of vc_expcast_int_bracket_at with
 * ExpCast's or the split's constant, softmax_numerics.h); 0 (code 0) past nvalid
 * with TAIL.  The FP32 -> FP16x2 conversion of two of them is the RNE of their
 * brackets (FP16 subnormals are spaced 2^-24), the low byte of each half the
 * code.  DIRECT: the bracket from the FP32 score (vc_expcast_bracket_direct);
 * __fmul_rn keeps the product from being contracted into the subtraction of m
 * (one FFMA), whose rounding residual, up to half an ULP of a score of ~1e12
 * log2 units, became the bracket (codes past 255: NaN rows). */
template <int PP, bool TAIL, bool DIRECT>
__device__ __forceinline__ float vc_att_expcast_w(int32_t s, int col, float a_s, float bias, float c, float m,
                                                  bool direct, int nvalid) {
    float w = fma_sat(a_s, __int_as_float(s + VC_EXPCAST_INT_MAGIC_BITS), bias);
    if (DIRECT && direct)
        w = fma_sat(8.0f * VC_EXPCAST_SAT_SCALE, __fsub_rn(__fmul_rn((float)s, c), m),
                    (VC_PP_IS(PP, SPLIT) ? VC_SPLIT_EXPCAST_CONST : VC_EXPCAST_CONST) * VC_EXPCAST_SAT_SCALE);
    if (TAIL && col >= nvalid) w = 0.0f; /* code 0 */
    return w;
}

/* four P values -> one E4M3 A-fragment register (two F2FP; the second merges) */
__device__ __forceinline__ uint32_t vc_att_e4m3x4(const float (&p)[4]) {
    return (uint32_t)cvt_e4m3x2(p[0], p[1]) | ((uint32_t)cvt_e4m3x2(p[2], p[3]) << 16);
}

/* c: the block's score scale (log2 units per INT32 unit, this thread's rows);
 * DIRECT (the kernel of flagged heads, kernel.cuh): where a = 8c passes
 * 2^-7 the one-FMA forms lose P: ExpCast's bracket comes from the FP32 score
 * instead (softmax_numerics.h, vc_expcast_bracket_direct) and the exp path rounds
 * s c before subtracting m, per thread, as the simulation decides per scale;
 * m: running max (log2 units; the block-max scale: the block's scale, falling
 * at most `descent` per block), alpha: exp2(m_old - m_new), lsum: FP32 row sum
 * (sage2 only: the V-Smooth methods take r from the P V product). */
template <int PP, bool TAIL, bool DIRECT>
__device__ __forceinline__ void vc_att_softmax(const int32_t (&S)[64], float c, int nvalid, int t, float (&m)[2],
                                               float (&alpha)[2], float (&lsum)[2], float descent,
                                               uint32_t (&P)[4][4], uint32_t (&RA)[4], const float (&rprev)[2],
                                               unsigned kb, int nkb, const float (&G)[2], const uint8_t *smem) {
    float bias[2], bias_exp[2]; /* bias_exp: the split's exp keys */
    /* the block-max scale's group floor (softmax_numerics.h, "the grouped mean
     * restore"): in the block a group's restore rides in, m_n >= G - 7/8,
     * G the largest scale of the group's blocks (vc_att_group_max, updated in
     * the fold before this softmax) */
    const bool kFloor = VC_PP_BLOCK_MAX(PP) && vc_blockmax_needs_group_floor(descent); /* per call */
    const bool floor_here = ((kb & (VC_ATT_RESTORE_GROUP - 1u)) == 0u && kb >= VC_ATT_RESTORE_GROUP) ||
                            (kb == (unsigned)nkb - 1u && kb >= 1u);
    const float c8 = 8.0f * c; /* exact */
    /* ExpCast reads the INT32 score s as the float M + s (M = 1.5 * 2^23: an
     * integer add on the bit pattern, exact for |s| < 2^22, so no I2F on the
     * ALU pipe); the bias absorbs -8c M before the max is known
     * (softmax_numerics.h, vc_expcast_int_bracket).  Plain and block-max ExpCast
     * scale the fma's terms by 2^-24 for the saturating form (a_s, bpre) */
    constexpr bool kSat = VC_PP_SATURATING_CODES(PP);
    const float a_s = kSat ? c8 * VC_EXPCAST_SAT_SCALE : c8; /* exact */
    const float bpre = VC_PP_IS(PP, SPLIT) ? vc_expcast_sat_bias_pre_at(a_s, VC_SPLIT_EXPCAST_CONST)
                                           : vc_expcast_sat_bias_pre(a_s);
    const bool direct = DIRECT && c8 > VC_EXPCAST_MAGIC_MAX_A;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int mx = vc_row_max_s32<TAIL>(S, hh, t, nvalid);
        /* c > 0 and rounding is monotone: max_j fl(s_j c) = fl(max_j(s_j) c) */
        float tm = mx == INT_MIN ? -INFINITY : (float)mx * c;
        tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
        tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
        /* the block-max scale (softmax_numerics.h): m - descent is known before tm,
         * so the path from tm to the bias keeps its one max */
        float m_new = VC_PP_BLOCK_MAX(PP) && VC_PP_EXPCAST_CODES(PP)
                          ? vc_blockmax_scale(m[hh], descent, tm)
                      : VC_PP_BLOCK_MAX(PP)
                          ? vc_blockmax_scale(m[hh], descent, tm - VC_PP_P_LOG2_OFFSET(PP))
                      : VC_PP_EXPCAST_CODES(PP) ? fmaxf(m[hh], tm)
                                                : fmaxf(m[hh], tm - VC_PP_P_LOG2_OFFSET(PP));
        if (kFloor && floor_here) m_new = vc_blockmax_group_floor(m_new, G[hh]);
        alpha[hh] = m[hh] == -INFINITY ? 0.0f : ex2_approx(m[hh] - m_new);
        if (VC_PP_EXPCAST_CODES(PP)) {
            /* one fma after the max */
            bias[hh] = vc_expcast_sat_bias(bpre, m_new);
        } else {
            bias[hh] = -m_new;
        }
        if (VC_PP_IS(PP, SPLIT)) bias_exp[hh] = VC_SPLIT_EXP_LOG2_OFFSET - m_new;
        m[hh] = m_new;
        lsum[hh] = 0.0f;
    }
    /* a[kk][2i + hh] = row g + 8hh, keys 32kk + 16i + {2t, 2t+1, 8+2t, 9+2t} */
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                /* the grouped restore's operand (restore.cuh), here: its
                 * shared-memory load then overlaps the last quarter of the
                 * P conversion (the paired form's load after the softmax sat
                 * on the turn's critical path, +4%), and most of S is dead */
                if (VC_PP_V_SMOOTH(PP) && kk == 3 && i == 0 && hh == 0)
                    vc_att_make_ra_group(RA, rprev, alpha, kb, nkb, t, smem);
                const int j0 = 4 * kk + 2 * i;
                const int idx[4] = {4 * j0 + 2 * hh, 4 * j0 + 2 * hh + 1, 4 * j0 + 4 + 2 * hh, 4 * j0 + 5 + 2 * hh};
                const int col[4] = {8 * j0 + 2 * t, 8 * j0 + 2 * t + 1, 8 * j0 + 8 + 2 * t, 8 * j0 + 9 + 2 * t};
                /* the split's rule (vc_split_key_is_exp) decides per half-register: keys
                 * 2t, 2t + 1 of the register's 16 and keys 8 + 2t, 9 + 2t each share it;
                 * constants after unrolling */
                const bool exp_lo = VC_PP_IS(PP, SPLIT) && vc_split_key_is_exp(32 * kk + 16 * i);
                const bool exp_hi = VC_PP_IS(PP, SPLIT) && vc_split_key_is_exp(32 * kk + 16 * i + 8);
                if (exp_lo && exp_hi) {
                    /* the split's exp keys: the exp path with their bias */
                    float p[4];
                    vc_att_exp_p4<TAIL, DIRECT>(S, idx, col, c, bias_exp[hh], nvalid, p);
                    P[kk][2 * i + hh] = vc_att_e4m3x4(p);
                } else if (exp_lo) {
                    /* half and half: keys 2t, 2t + 1 by the exp path (one F2FP.E4M3 into the
                     * low two bytes), 8 + 2t, 9 + 2t by ExpCast (the low bytes of an FP16x2
                     * conversion); one PRMT packs them, as ExpCast's register costs */
                    float p[4];
                    vc_att_exp_p4<TAIL, DIRECT>(S, idx, col, c, bias_exp[hh], nvalid, p); /* p[2], p[3] unused */
                    const float w2 = vc_att_expcast_w<PP, TAIL, DIRECT>(S[idx[2]], col[2], a_s, bias[hh], c, m[hh],
                                                                          direct, nvalid);
                    const float w3 = vc_att_expcast_w<PP, TAIL, DIRECT>(S[idx[3]], col[3], a_s, bias[hh], c, m[hh],
                                                                          direct, nvalid);
                    P[kk][2 * i + hh] = prmt((uint32_t)cvt_e4m3x2(p[0], p[1]), cvt_f16x2(w2, w3), 0x6410);
                } else if (kSat) {
                    float w[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        w[e] = vc_att_expcast_w<PP, TAIL, DIRECT>(S[idx[e]], col[e], a_s, bias[hh], c, m[hh], direct,
                                                                    nvalid);
                    P[kk][2 * i + hh] = prmt(cvt_f16x2(w[0], w[1]), cvt_f16x2(w[2], w[3]), 0x6420);
                } else {
                    float p[4];
                    vc_att_exp_p4<TAIL, DIRECT>(S, idx, col, c, bias[hh], nvalid, p);
                    if (!VC_PP_ROWSUM_QUANTIZED(PP)) lsum[hh] += (p[0] + p[1]) + (p[2] + p[3]);
                    P[kk][2 * i + hh] = vc_att_e4m3x4(p);
                }
            }
}
