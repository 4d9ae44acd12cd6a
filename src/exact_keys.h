/* exact_keys.h - the few keys per head that skip quantization (sink keys), one definition
 * for the CPU simulation (simulate.c, exact_keys.c) and the kernels (src/cuda/exact_keys.cu).
 *
 * Why: in sink heads a dozen tokens with 6-15x the typical V norm carry most of the
 * attention mass, and eight bits of score cannot place them: the error of the whole head
 * is theirs (docs/fidelity-analysis.md, "A lever for sink heads").  So a V-Smooth method
 * with exact_keys = n keeps, per (batch, head), the n tokens of largest V norm out of the
 * quantized pass: the plan's permutation is re-ordered with them at its end, the quantized
 * pass runs over the first S - n permuted keys (its K mean is still over all S, softmax is
 * shift-invariant per row and the LSE gets q . mean back), and a small FP32 attention over
 * the n exact keys is merged into each row through the two log-sum-exps.
 *
 * Every function is a pure `VC_HD static inline` function of its arguments (numerics.h). */
#ifndef VCATTN_EXACT_KEYS_H
#define VCATTN_EXACT_KEYS_H

#include "numerics.h"

/* Fewest keys per exact key: short sequences keep n <= S / 16, so the quantized pass
 * always holds most keys (and a 16-key call keeps one). */
#define VC_EXACT_KEYS_MIN_RATIO 16
#define VC_EXACT_KEYS_MAX 16 /* what a method config may ask (the merge kernel's products are 16 keys wide) */

/* The number of exact keys of a call with skv keys whose method asks for `wanted` (0 when
 * the call has no V-Smooth: the permutation is what carries them). */
VC_HD static inline int vc_exact_keys_count(int wanted, int v_smooth, int64_t skv) {
    if (!v_smooth || wanted <= 0) return 0;
    const int64_t cap = skv / VC_EXACT_KEYS_MIN_RATIO;
    return (int64_t)wanted < cap ? wanted : (int)cap;
}

/* A token's rank key: its squared V norm, summed in channel order by FMA (one thread per
 * token on the GPU, the same order on the CPU: the same keys are picked bit for bit). */
VC_HD static inline float vc_exact_key_norm_step(float acc, float v) { return fmaf(v, v, acc); }

/* The norm a token is ranked by: a NaN ranks below every number (a NaN V makes a NaN
 * output either way), a picked token below that. */
#define VC_EXACT_KEY_PICKED (-2.0f)
VC_HD static inline float vc_exact_key_rank_norm(float n) { return n == n ? n : -1.0f; }

/* Whether token a (rank norm na) ranks before token b: larger first, ties to the lower
 * index - a total order, so the CPU and the GPU's reductions pick the same keys. */
VC_HD static inline int vc_exact_key_before(float na, int32_t a, float nb, int32_t b) {
    return na > nb || (na == nb && a < b);
}

#define VC_EXACT_LOG2E_F 1.44269504088896341f
#define VC_EXACT_LN2_F 0.693147180559945309f

/* The merge of a row's quantized pass (normalized output O_q, natural-log LSE lse_q, q . mean
 * included) with its exact keys (scores s_j in log2 units, m2 = max_j s_j, l = sum_j
 * 2^(s_j - m2), u = sum_j 2^(s_j - m2) v_j):  O = w_q O_q + w_e u,  LSE = lse.
 * In FP32; the simulation and the kernel run the same expressions. */
typedef struct vc_exact_merge {
    float w_q, w_e, lse;
} vc_exact_merge;

VC_HD static inline vc_exact_merge vc_exact_merge_of(float lse_q, float m2, float l) {
    const float lq2 = lse_q * VC_EXACT_LOG2E_F, le2 = m2 + log2f(l);
    const float top = fmaxf(lq2, le2); /* le2 is finite for finite scores: a row always has them */
    const float a = exp2f(lq2 - top), e = exp2f(le2 - top), d = a + e;
    vc_exact_merge r;
    r.w_q = a / d;
    r.w_e = exp2f(m2 - top) / d;
    r.lse = (top + log2f(d)) * VC_EXACT_LN2_F;
    return r;
}

/* One channel of the merged output. */
VC_HD static inline float vc_exact_merge_out(vc_exact_merge m, float o_q, float u) { return fmaf(m.w_q, o_q, m.w_e * u); }

#endif
