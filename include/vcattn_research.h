/* vcattn_research.h - measurement entry points of the numerics, for the tools (vcattn
 * numerics, vcattn eval's error budget), the tests and the analyses in docs/: outside the
 * stable API of vcattn.h, and free to change with the research they serve.  The same
 * library exports them. */
#ifndef VCATTN_RESEARCH_H
#define VCATTN_RESEARCH_H

#include "vcattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the error budget ---------------------------------------------------------------- */

/* Eq. (2) of the paper: O - O_q = (P - P_q) V + P_q (V - V_q).
 * pq_v = P_q V (from vcattn_sim_outputs.o_pq_v).  The value path is
 * pq_v - out, the probability path ref - pq_v. */
typedef struct vcattn_error_budget {
    double value_rel_l2;       /* |P_q (V - V_q)| / |ref| */
    double probability_rel_l2; /* |(P - P_q) V| / |ref| */
    double value_share;        /* |value|^2 / (|value|^2 + |probability|^2) */
} vcattn_error_budget;

vcattn_status vcattn_error_budget_compute(const float *ref, const float *out, const float *pq_v,
                                          int64_t n, vcattn_error_budget *b);

/* ---- ExpCast facts, as the shared numerics produce them -----------------------------
 * Over u = (s - m) log2(e) spread uniformly in log2 inside each doubling of
 * the normal E4M3 range (u in [-14, 0), P scaled so the row max is 256): */
typedef struct vcattn_expcast_facts {
    double agree_share;   /* share where the direct code == FP32 exp then RNE cast */
    int max_code_diff;    /* largest |direct - exp-then-cast| code difference */
    double ratio_min;     /* min of value(direct code) / exact value */
    double ratio_max;     /* max of the same */
    double row_tv_bound;  /* (sqrt(ratio_max) - sqrt(ratio_min)) / (sqrt(ratio_max) + sqrt(ratio_min)) */
    double beta;          /* the constant used */
} vcattn_expcast_facts;

/* samples_per_doubling >= 16 (e.g. 100000). */
vcattn_status vcattn_expcast_measure(int64_t samples_per_doubling, vcattn_expcast_facts *facts);

/* The underflow tail of the four P paths: the exp path (FP32 exp2 with the
 * row max at 448, RNE cast), ExpCast, ExpCast with the tail line
 * (vsmooth-expcast-tail-8bit), and the exp path with the max at 256
 * (vsmooth-blockmax-8bit, relative to each block's scale).  For each: how far below the row max (in
 * octaves) a key still gets a non-zero code, and the decoded mass of keys
 * spread evenly in u over [-20, -13] octaves divided by their exact mass (each
 * path in its own scale: the geometric-mean ratio decoded / exact over the
 * normal range [-8, 0]). */
typedef struct vcattn_expcast_tail_facts {
    double cut_octaves[4];       /* exp path, ExpCast, ExpCast-tail, exp path at 256 */
    double tail_mass_ratio[4];   /* same order; 1 = the tail's mass kept */
    double slope, offset;        /* the tail line's BF16 constants */
} vcattn_expcast_tail_facts;

/* samples_per_doubling >= 16. */
vcattn_status vcattn_expcast_tail_measure(int64_t samples_per_doubling, vcattn_expcast_tail_facts *facts);

/* The split P (vsmooth-split-blockmax-8bit): the two parts of a block's keys are
 * written in the same scale only if ExpCast's codes and the exp path's decode to the
 * same geometric-mean ratio decoded / 2^u (the exp keys' offset is set for that); a
 * mismatch would weight one part against the other.  Measured over u evenly in
 * [-8, 0] octaves (the normal range), with the RMS of log2(decoded / (scale 2^u)) per
 * path (the per-key error of each part in its own scale). */
typedef struct vcattn_split_facts {
    double exp_share;            /* share of a block's 128 keys written by the exp path */
    double scale[2];             /* exp keys, ExpCast keys: geometric-mean decoded / 2^u */
    double scale_ratio;          /* scale[1] / scale[0]; 1 = the two parts agree */
    double rms_log2_error[2];    /* same order */
    double top_gain[2];          /* the block's top key (u = 0): decoded / 2^8, same order; equal to
                                    scale[] = the top key weighs what the keys below it weigh */
} vcattn_split_facts;

/* samples_per_doubling >= 16. */
vcattn_status vcattn_split_measure(int64_t samples_per_doubling, vcattn_split_facts *facts);

/* ---- exact keys ------------------------------------------------------------------ */

/* The order a call of this method runs its keys in when it keeps exact keys
 * (vcattn_method_config.exact_keys): per (batch, head) of v (contiguous (B, H, S, D) FP32),
 * perm's order (NULL: sequence order) with the n tokens of largest V norm moved to the end;
 * *n_exact = n (0: out is perm's order).  The GPU builds the same order in its workspace
 * (vcattn_gpu_layout.key_order); tests/gpu/gpu_check.c compares them.  INVALID_ARGUMENT when a
 * head of perm is not a permutation of 0..seq_kv-1 or exact_keys is outside 0..16. */
vcattn_status vcattn_exact_keys_permutation(const vcattn_method_config *config, int64_t batch, int64_t heads,
                                            int64_t seq_kv, int64_t head_dim, const float *v, const int32_t *perm,
                                            int32_t *out, int *n_exact);

/* ---- codecs, exported for bindings and tests --------------------------------------- */

/* Element-wise RNE codes / decoded values of the shared numerics (n >= 0). */
vcattn_status vcattn_encode_e4m3(const float *x, uint8_t *codes, int64_t n);
vcattn_status vcattn_decode_e4m3(const uint8_t *codes, float *x, int64_t n);
vcattn_status vcattn_encode_e2m1(const float *x, uint8_t *codes, int64_t n);
vcattn_status vcattn_decode_e2m1(const uint8_t *codes, float *x, int64_t n);
vcattn_status vcattn_round_bf16(const float *x, float *y, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
