/* softmax_numerics.h - the online softmax's P paths and their bounds, on the
 * formats of numerics.h: ExpCast's one-FMA E4M3 codes, the tail line, the
 * V-Smooth restore's row-sum split, the block-max P scale, the split P, and
 * ExpCast's unrounded map for the error analysis.  Compiled by C and CUDA like
 * numerics.h, which includes this file at its end (include numerics.h). */
#ifndef VCATTN_SOFTMAX_NUMERICS_H
#define VCATTN_SOFTMAX_NUMERICS_H

#include "numerics.h"

/* ---- ExpCast-FP8 -------------------------------------------------------------
 * An E4M3 byte read as an integer is ~ 8*log2(value) + 56.  With
 * u = (s - m) * log2(e) <= 0 and P scaled by 2^8 (row max -> 256 = code 120):
 *     c(u) = clip[0,120](RNE(8*(u + 8) + 56 + beta)) = clip(RNE(8u + 120 + beta))
 * beta = -0.35 (minimax -0.3443, rounded as in the paper).  The kernel
 * evaluates the bracket as ONE fma(a, s, b) with a = 8*log2(e)*scales and
 * b = 120 + beta - a*m, and rounds it by a magic-number add. */
#define VC_EXPCAST_BETA (-0.35f)
#define VC_EXPCAST_MAX_CODE 120
#define VC_EXPCAST_P_SCALE 256.0f /* value of code 120 */
#define VC_EXPCAST_P_LOG2_SCALE 8.0f /* log2 of VC_EXPCAST_P_SCALE */

/* The code of a bracket t = 8u + 120 + beta: RNE, clamped at 0 (NaN: 0, as
 * the kernel's saturating fma gives it) and, unreachably, at 120. */
VC_HD static inline uint8_t vc_expcast_code_from_bracket(float t) {
    if (!(t > 0.0f)) return 0;
    const float r = rintf(t);
    return r > (float)VC_EXPCAST_MAX_CODE ? (uint8_t)VC_EXPCAST_MAX_CODE : (uint8_t)r;
}

/* u in log2 units (u <= 0 relative to the running row max). */
VC_HD static inline uint8_t vc_expcast_code(float u) {
    return vc_expcast_code_from_bracket(fmaf(8.0f, u, (float)VC_EXPCAST_MAX_CODE + VC_EXPCAST_BETA));
}

/* The kernel does not convert the INT32 score with I2F: it reads the bit
 * pattern s + 0x4B400000 as the float M + s, M = 1.5 * 2^23 (exact for
 * |s| < 2^22; INT8 Q K^T with D <= 128 stays below 2^21).  With a = 8c and the
 * scale m (log2 units) the bracket is
 *     t = fma(a, M + s, fma(-8, m, fma(-a, M, 120 + beta)))
 * the innermost fma is known before the block's max (a depends on the scales
 * only), so one fma after the max gives the bias (vc_expcast_int_bracket).
 *
 * How the kernel rounds and clamps it (plain and block-max ExpCast): every
 * term is scaled by 2^-24 (a power of two: exact while a 2^-24 stays normal,
 * a >= 2^-102; below that a s < 2^-81 codes moves no code), so its ONE fma
 * per score is
 *     w = sat(fma(a 2^-24, M + s, b 2^-24)) = sat(2^-24 t)
 * with the saturation (clamp to [0, 1], NaN -> 0) as the clamp at code 0.
 * Below 2^-14, FP16 numbers are subnormal and spaced 2^-24, so the FP32 ->
 * FP16x2 conversion is the RNE of t (ties to even) and the low byte of each
 * FP16 pattern is the code; brackets stay below 120 + beta < 2^10.  Per pair
 * of scores that is one conversion and no max (the earlier form rounded
 * t + 128 to BF16 and needed a BF16x2 max with 128 for the clamp: 2.5% of
 * the default's kernel time at Wan 720p).  The code is therefore exactly
 * vc_expcast_code_from_bracket(t). */
#define VC_EXPCAST_INT_MAGIC 12582912.0f
#define VC_EXPCAST_INT_MAGIC_BITS 0x4B400000
#define VC_EXPCAST_CONST 119.65f     /* 120 + beta */
#define VC_EXPCAST_SAT_SCALE 0x1p-24f /* FP16's subnormal spacing */
/* The _at forms take the bracket's constant (the split's codes use their own,
 * VC_SPLIT_EXPCAST_CONST); the plain names are ExpCast's 120 + beta. */
VC_HD static inline float vc_expcast_bias_pre_at(float a, float bracket_const) {
    return fmaf(-a, VC_EXPCAST_INT_MAGIC, bracket_const);
}
VC_HD static inline float vc_expcast_bias_pre(float a) { return vc_expcast_bias_pre_at(a, VC_EXPCAST_CONST); }
VC_HD static inline float vc_expcast_bias(float pre, float m) { return fmaf(-8.0f, m, pre); }
VC_HD static inline float vc_expcast_int_bracket_at(float a, float s, float m, float bracket_const) {
    return fmaf(a, VC_EXPCAST_INT_MAGIC + s, vc_expcast_bias(vc_expcast_bias_pre_at(a, bracket_const), m));
}
VC_HD static inline float vc_expcast_int_bracket(float a, float s, float m) {
    return vc_expcast_int_bracket_at(a, s, m, VC_EXPCAST_CONST);
}
/* The same two bias terms times 2^-24, for the kernel's saturating fma
 * (a_s = a 2^-24): each is 2^-24 times vc_expcast_bias_pre / vc_expcast_bias. */
VC_HD static inline float vc_expcast_sat_bias_pre_at(float a_s, float bracket_const) {
    return fmaf(-a_s, VC_EXPCAST_INT_MAGIC, bracket_const * VC_EXPCAST_SAT_SCALE);
}
VC_HD static inline float vc_expcast_sat_bias_pre(float a_s) { return vc_expcast_sat_bias_pre_at(a_s, VC_EXPCAST_CONST); }
VC_HD static inline float vc_expcast_sat_bias(float pre_s, float m) {
    return fmaf(-8.0f * VC_EXPCAST_SAT_SCALE, m, pre_s);
}
/* fl(-a M + const) comes before a (M + s) is added: an error of up to half an
 * ulp of a M = 1.5 * 2^23 a in code units.  For a <= 2^-7
 * (scores of ordinary magnitude: a is ~1e-3) that is <= 2^-7 of a code; for
 * larger a (scores of thousands of log2 units per INT8 step: Q or sm_scale
 * scaled up by >= ~1e3) the error swamps the code and a whole row can get
 * code 0, so l = 0 and the output 0/0.  The simulation and the kernel (a
 * per-thread branch, taken only for such inputs) then evaluate the bracket
 * from the FP32 score t = fl(s c) relative to the scale m instead, in FP32:
 * fma(8, fl(t - m), const), which keeps the row max at the top code
 * (vc_expcast_bracket_direct; the kernel's saturating form scales 8 and
 * const by 2^-24, exactly as above). */
#define VC_EXPCAST_MAGIC_MAX_A 0.0078125f /* 2^-7 */
VC_HD static inline float vc_expcast_bracket_direct(float t, float m, float bracket_const) {
    return fmaf(8.0f, t - m, bracket_const);
}

/* The tail line's kernel form (below) keeps the bracket + 128 rounded to
 * BF16: on [128, 256) a BF16 number has a unit in the last place of exactly
 * 1, so the FP32 -> BF16 conversion is the RNE, the low byte is line 1's code,
 * and the BF16 FMA of line 2 works on that value. */
#define VC_EXPCAST_BF16_OFFSET 128.0f

/* ---- ExpCast with a tail line ------------------------------------------------
 * ExpCast's code is linear in u, so it spends E4M3's eight subnormal codes on
 * one octave and writes 0 for every key more than ~15 octaves below the row
 * max.  On long, flat rows (75K keys of video attention) those keys hold
 * ~0.5-1% of the softmax mass, all dropped the same way: a bias that does not
 * average out and grows with the number of keys.  This variant
 *   - puts the row max at code 126 (448) instead of 120 (256): 0.75 octave
 *     more range (line 1: t1 = 8u + 126 + beta, the same beta and the same
 *     0.85-code margin below the next code, 127 = NaN);
 *   - adds a second, shallower line for the lowest codes, evaluated on the
 *     BF16 code of line 1 (h1 = bf16(t1 + 128), one BF16x2 FMA per pair):
 *         h2 = bf16(h1 * SLOPE + OFFSET),   code = max(h1, 128, h2) - 128.
 *     In code units line 2 is 0.2197 t1 + 4.625: it meets line 1 at code ~6
 *     and reaches code 0 ~2.35 octaves later, so the subnormal codes cover
 *     ~3 octaves (line 1 alone: 1) and keys down to ~18 octaves below the max
 *     keep a non-zero code (line 1 alone: ~15.7).
 * How SLOPE and OFFSET were chosen (before any attention input was run with
 * them): among BF16-representable pairs, the one whose decoded P, over keys
 * spread uniformly in u below 13 octaves under the max, carries the exact
 * mass (relative bias 1e-3) with the smallest mass-weighted RMS error (0.066);
 * the scale reference is the geometric-mean ratio decoded / 2^u over the
 * normal range.  The extra cost in the kernel: one HFMA2.BF16 and one HMNMX2
 * per pair of scores. */
#define VC_EXPCAST_TAIL_MAX_CODE 126
/* The P scale the LSE removes: line 1 is ExpCast's line moved up by 6 codes
 * (0.75 octave), so its scale is ExpCast's 256 times 2^0.75 - not 448, the
 * value of the top code, which sits mid-mantissa where the linear code reads
 * 4% high (448 put a -0.03 bias on the LSE).  log2 = 8.75 exactly. */
#define VC_EXPCAST_TAIL_P_SCALE 430.53896f             /* 2^8.75 */
#define VC_EXPCAST_TAIL_P_LOG2_SCALE 8.75f
#define VC_EXPCAST_TAIL_BIASED_CONST 253.65f         /* 126 + beta + 128 */
#define VC_EXPCAST_TAIL_SLOPE 0.2197265625f          /* BF16 0x3E61 */
#define VC_EXPCAST_TAIL_OFFSET 104.5f                /* BF16 0x42D1 */

VC_HD static inline float vc_expcast_tail_bias_pre(float a) {
    return fmaf(-a, VC_EXPCAST_INT_MAGIC, VC_EXPCAST_TAIL_BIASED_CONST);
}
VC_HD static inline float vc_expcast_tail_biased_bracket(float a, float s, float m) {
    return fmaf(a, VC_EXPCAST_INT_MAGIC + s, vc_expcast_bias(vc_expcast_tail_bias_pre(a), m));
}

/* The code from the biased bracket v = t1 + 128, as the kernel computes it:
 * the FP32 -> BF16 conversion rounds line 1 (RNE to an integer on [128, 256)),
 * one BF16 FMA gives line 2 from that BF16 value (exact in FP32 wherever the
 * result can reach 128, so rounding the FP32 FMA to BF16 is the single RNE of
 * the hardware's BF16 FMA), and two BF16 maxima (which return the other
 * operand for a NaN) take the larger line, clamped at code 0. */
VC_HD static inline uint8_t vc_expcast_tail_code_biased(float v) {
    const float h1 = vc_bf16_round(v);
    const float h2 = vc_bf16_round(fmaf(h1, VC_EXPCAST_TAIL_SLOPE, VC_EXPCAST_TAIL_OFFSET));
    float h = h1 > VC_EXPCAST_BF16_OFFSET ? h1 : VC_EXPCAST_BF16_OFFSET; /* NaN: 128 */
    if (h2 > h) h = h2;
    const float c = h - VC_EXPCAST_BF16_OFFSET;
    return c > (float)VC_EXPCAST_TAIL_MAX_CODE ? (uint8_t)VC_EXPCAST_TAIL_MAX_CODE : (uint8_t)c; /* unreachable clamp */
}

/* u in log2 units (u <= 0 relative to the row max), for the facts and tests. */
VC_HD static inline uint8_t vc_expcast_tail_code(float u) {
    return vc_expcast_tail_code_biased(fmaf(8.0f, u, VC_EXPCAST_TAIL_BIASED_CONST));
}

/* The tail line's code before any rounding, for the error analysis
 * (dev/ppath_analysis.c): line 1 t1 = 8u + 126 + beta and line 2 evaluated
 * on the unrounded t1, max(t1, (t1 + 128) SLOPE + OFFSET - 128) (no clamp). */
VC_HD static inline double vc_expcast_tail_code_linear(double u) {
    const double t1 = 8.0 * u + (double)VC_EXPCAST_TAIL_MAX_CODE + (double)VC_EXPCAST_BETA;
    const double t2 = (t1 + (double)VC_EXPCAST_BF16_OFFSET) * (double)VC_EXPCAST_TAIL_SLOPE +
                      (double)VC_EXPCAST_TAIL_OFFSET - (double)VC_EXPCAST_BF16_OFFSET;
    return t1 > t2 ? t1 : t2;
}

/* V-Smooth mean restore on the tensor core: the row sum r enters an FP16
 * product as hi + lo, each rounded to FP16 (r <= 128 * 448 fits), so hi + lo
 * carries ~22 significant bits of r; the products with the FP16 means are
 * exact in FP32.
 * The grouped mean restore (every V-Smooth mode of the kernel): the
 * kernel restores eight blocks per FP16 product, with each block's full row
 * sum r_b (one FP32 tensor-core sum of its 128 quantized P).  The
 * coefficient of block b is kept at the current block's scale, fl(alpha_k
 * c), from block b + 1 on (c = fl(alpha_{b+1} r_b) first); blocks 8g..8g+7
 * ride together in block 8g + 8's P V accumulator as sum_b split(c_b) mu_b,
 * the group still open at the end (blocks up to the second-to-last) rides
 * in the last block's, and the last block's own term split(r) mu goes into O
 * on the CUDA cores after the last fold.  A coefficient at its restore is
 * r_b 2^(m_b - m_f): at most r_b for the running max (alpha <= 1); for the
 * block-max scale the group floor below keeps it under 2^0.875 r_b <=
 * 2^15.875 < 65,504.  The CPU-only NVFP4 methods restore one block at a
 * time (the simulation's single form), each quad thread's 32-key partial r_t
 * split on its own, in the next block's accumulator; the pending last
 * block's partials are summed (s0 + s1) + (s2 + s3). */
#define VC_RESTORE_GROUP 8 /* blocks per grouped mean restore */
VC_HD static inline float vc_rowsum_f16_split(float r) {
    /* hi: r cut to 11 significant bits (one LOP3 in the kernel), lo = r - hi
     * (exact); one FP16x2 conversion rounds both */
    const float hi = vc_f32_from_bits(vc_f32_bits(r) & 0xFFFFE000u);
    return vc_fp16_round(hi) + vc_fp16_round(r - hi);
}

/* ---- the block-max P scale (VCATTN_P_SCALE_BLOCK_MAX) -----------------------
 * The online softmax writes block n's P against a scale m_n (log2 units): P =
 * 2^(t - m_n) times the format's P scale, and folds O = 2^(m_{n-1} - m_n) O +
 * acc_n.  The running max (m_n = the largest score so far) puts a block whose
 * own max lies far below the row's max far down in P's range: on long video
 * rows (75,600 keys) ExpCast then writes 0 for keys that hold ~1% of the mass
 * (docs/fidelity-analysis.md).  The block-max rule follows the block's own max
 * instead, as far as the pipeline's number ranges allow:
 *     m_n = max(blockmax_n, m_{n-1} - d),   d = min(1, 64 / blocks)
 * so every block's max still lands at the top code, the scale rises at once
 * and falls at most d per block:
 *   - the grouped V-Smooth restore multiplies a block's row sum r (<= 128
 *     keys x 256) by the alphas up to the block its group rides in, and
 *     the descent would let that reach 2^(8d) r, past the FP16 maximum: in
 *     the block a group's restore rides in (8g + 8, or the last block), the
 *     scale is also floored, m_f >= G - 7/8 with G the largest m_b of the
 *     group's blocks (vc_blockmax_group_floor); the simulation measured it at
 *     -0.02 dB on randn, where d = 1/8 instead had cost 0.28 dB
 *     (docs/kernel-log.md);
 *   - m_n >= (running max) - 64 over the whole row (at most `blocks` steps of
 *     d): O and l, held in the scale m_n, stay within 2^64 of their
 *     running-max values, finite in FP32 for any key count below 2^50.
 * No state beyond m; d is one constant per call.  (A floor m_n >= running max
 * - 64 with d = 2 needs two more registers per thread, which the kernel does not
 * have, and measured no more faithful.)  d = 1 holds below 64 blocks (8,192
 * keys); there 1 octave per block is still far more than the block maxima of
 * a row move (docs/kernel-log.md).  (The total was 80 until the grouped
 * restore: 64 lets Wan 720p's 591 blocks skip the group floor.) */
#define VC_BLOCKMAX_DESCENT 1.0f
#define VC_BLOCKMAX_TOTAL_DESCENT 64.0f
VC_HD static inline float vc_blockmax_descent(int64_t blocks) {
    const float d = VC_BLOCKMAX_TOTAL_DESCENT / (float)(blocks > 0 ? blocks : 1);
    return d < VC_BLOCKMAX_DESCENT ? d : VC_BLOCKMAX_DESCENT;
}
/* operands in this order: the kernel measured ~1% faster with it (docs/kernel-log.md) */
VC_HD static inline float vc_blockmax_scale(float m_prev, float descent, float block_max) {
    return fmaxf(m_prev - descent, block_max);
}
/* The exp path against the block-max scale (vsmooth-blockmax-8bit): P =
 * E4M3(2^(t - m_n + 8)), the block's max at 256 as ExpCast's code 120, not at
 * SageAttention2's 448 (2^8.807): the grouped restore's FP16 coefficient bound
 * below (r <= 128 x 256 times 2^(7/8)) holds for both block-max methods, where
 * 448 would reach 105,000.  E4M3 is a floating-point format, so the top value
 * changes no relative step, only where the subnormal range starts (keys more
 * than 18.0 octaves under the block's scale round to 0 instead of 18.8;
 * `vcattn numerics`). */
#define VC_BLOCKMAX_E4M3_P_LOG2_OFFSET 8.0f
/* The grouped mean restore's bound (below): in a block that a group's
 * restore rides in, the scale stays within 7/8 of the group's largest G. */
#define VC_BLOCKMAX_GROUP_FLOOR 0.875f
VC_HD static inline float vc_blockmax_group_floor(float m, float group_max) {
    return fmaxf(m, group_max - VC_BLOCKMAX_GROUP_FLOOR);
}
/* Without the floor a group's 8 alphas reach at most 2^(8d): within the same
 * 2^0.875 for d <= 7/64, i.e. from 586 blocks (75,000 keys) on, where the
 * floor is skipped (a per-call constant in the kernel). */
VC_HD static inline int vc_blockmax_needs_group_floor(float descent) {
    return descent > VC_BLOCKMAX_GROUP_FLOOR / (float)VC_RESTORE_GROUP;
}

/* ---- the split P (VCATTN_P_FORMAT_SPLIT) -------------------------------------
 * ExpCast's codes cost one FFMA per score but carry its linear mantissa: a
 * per-key gain (1 + m/8) / 2^(m/8) of up to 6% that no constant beta removes,
 * which on Gaussian rows leaves the ExpCast block-max method ~2-4% (rel-L2^2)
 * behind SageAttention2 (docs/fidelity-analysis.md); the exp path (MUFU.EX2 and
 * an RNE cast, one MUFU more per score) costs ~12% of the kernel at Wan 720p.
 * The split writes 1/4 of each block's keys by the exp path and the rest by
 * ExpCast, in one scale, with both parts centred on the block's top key:
 *   - the block-max scale puts the block's max at u = 0 whenever it sets the
 *     scale (on short and peaked rows: nearly every block), so its code is
 *     always RNE(const) and it holds ~16% of the block's sum of P^2 on
 *     Gaussian rows.  Its weight against the block's other keys is a fixed
 *     bias unless the top code reads what the codes below it read on average:
 *     with the paper's beta (-0.35, const 119.65) the codes decode to 1.00896
 *     times 2^(u+8) (geometric mean over the normal range, `vcattn
 *     numerics`) while the top code 120 reads 256 exactly, 0.9% light.  The
 *     split's ExpCast keys use beta = -0.35 - 8 log2(1.00896) = -0.453
 *     (VC_SPLIT_EXPCAST_CONST = 119.547): their mean gain is 1, the top code
 *     still 120 = 256.  (The other code that could sit at gain 1, 119 = 240
 *     with const 118.80, cuts the tail 0.1 octave earlier; 120.91 would put
 *     the top at 288, past the grouped restore's FP16 bound.)  In the
 *     simulation on Gaussian rows (dev/randn_budget.c, 8 heads x 8192 keys,
 *     four seeds) it gains ~0.06 dB, about what 1/8 of the keys more by the
 *     exp path would (docs/kernel-log.md, "The split's top key");
 *   - the exp keys get E4M3(2^(t - m + VC_SPLIT_EXP_LOG2_OFFSET)): 8 (the max
 *     at 256) minus log2 of the exp path's own mean gain (0.99898), so their
 *     mean gain is 1 too and their top key also rounds to 256.
 * The row sum of the quantized P is the normalizer, as for both parents.
 * Which keys: keys 0-15 and 32-47 of a block by the exp path - in the kernel
 * the P register pair i = 0 of the k-steps kk = 0, 1 (the A fragment of k-step
 * kk, pair i, holds keys 32 kk + 16 i + {2t, 2t + 1, 8 + 2t, 9 + 2t}), so the
 * choice is made at compile time and costs no select: 16 MUFU.EX2 per thread
 * and block instead of the exp path's 64.  Why 1/4: a warp's MUFU takes 8
 * cycles per instruction, so the exp keys' MUFU work (after the block's max is
 * known) hides behind ExpCast's conversions up to about a quarter of the keys
 * and then sets the softmax's length; measured on the H200 (same call, Wan
 * 720p, over the ExpCast block-max kernel): 1/4 of the keys +1.1%, 5/16 +3.8%,
 * 3/8 +4.1% (2026-12-04; 1/2 +7.4% earlier), while the error on Gaussian rows
 * falls about linearly with the share (docs/kernel-log.md, "The split P" and
 * "The split's top key").  (A fixed
 * subset rather than a choice by value: choosing the block's largest P for the
 * exp path would need both values or a select per score, which costs what the
 * exp path costs.) */
/* Keys of a block's 128 by the exp path: a multiple of 8, at most 64.  An
 * experiment may build with another count (-DVC_SPLIT_EXP_KEYS=40 in both
 * CMAKE_C_FLAGS and CMAKE_CUDA_FLAGS, so the simulation and the kernel agree);
 * the tests pin the shipped 32. */
#ifndef VC_SPLIT_EXP_KEYS
#define VC_SPLIT_EXP_KEYS 32
#endif
/* The candidates are the keys of pair i = 0 (key & 16 == 0), taken in key
 * order: rank (key / 32) * 16 + key % 16.  A P register holds keys 2t, 2t + 1
 * (positions < 8 of their 16) and 8 + 2t, 9 + 2t, so a multiple of 8 splits no
 * half-register. */
VC_HD static inline int vc_split_key_is_exp(int64_t key_in_block) {
    return (key_in_block & 16) == 0 && (key_in_block >> 5) * 16 + (key_in_block & 15) < VC_SPLIT_EXP_KEYS;
}
#define VC_SPLIT_EXPCAST_CONST 119.547f   /* 120 + beta, beta = -0.35 - 8 log2(1.00896) */
#define VC_SPLIT_EXP_LOG2_OFFSET 8.001472f /* 8 - log2(0.99898) */
/* The split's ExpCast codes are ExpCast's bracket and kernel forms (the _at
 * forms above) with VC_SPLIT_EXPCAST_CONST: the same RNE, clamp and saturating
 * evaluation; codes never pass 120, the bracket's top is 119.547. */
VC_HD static inline uint8_t vc_split_expcast_code(float u) { /* u <= 0 relative to the scale */
    return vc_expcast_code_from_bracket(fmaf(8.0f, u, VC_SPLIT_EXPCAST_CONST));
}

/* ---- ExpCast's deterministic map, without rounding (error analysis) ---------
 * ExpCast's code before rounding, t = 8u + 120 + beta (no clamp), and the
 * E4M3 byte read as a real number: between two adjacent codes c and c + 1 the
 * value is interpolated linearly, dec(c) + (t - c)(dec(c + 1) - dec(c)).
 * Inside an exponent that is the mantissa read linearly, 2^(e-7)(1 + m/8)
 * with m real; codes 0..8 give t 2^-9; t <= 0 gives 0; t is capped at 126
 * (448).  So decode_linear(8u + K) is the piecewise-linear interpolation of
 * 2^u through the powers of two (Mitchell's approximation): the "mantissa"
 * part of ExpCast's error, and decode(RNE(t)) - decode_linear(t) the
 * "rounding" part.  Used by dev/ppath_analysis.c only. */
VC_HD static inline double vc_expcast_code_linear(double u) {
    return 8.0 * u + (double)VC_EXPCAST_MAX_CODE + (double)VC_EXPCAST_BETA;
}

VC_HD static inline double vc_e4m3_decode_linear(double t) {
    if (!(t > 0.0)) return 0.0;
    if (t >= 126.0) return (double)vc_e4m3_decode(126);
    const int c = (int)t; /* floor: t > 0 */
    const double lo = (double)vc_e4m3_decode((uint8_t)c), hi = (double)vc_e4m3_decode((uint8_t)(c + 1));
    return lo + (t - (double)c) * (hi - lo);
}

/* The conventional path for comparison: P = 2^u scaled so the max is 256,
 * FP32 exp then RNE cast to E4M3. */
VC_HD static inline uint8_t vc_exp_then_cast_code(float u) {
    return vc_e4m3_encode(exp2f(u) * VC_EXPCAST_P_SCALE);
}

#endif /* VCATTN_SOFTMAX_NUMERICS_H */
