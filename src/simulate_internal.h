/* simulate_internal.h - what the three parts of the CPU simulation share
 * (not public): the per-(batch, head) prepared operands, the run's context,
 * the FP32 rounding rule R(), and the calls between the parts.
 *
 *   simulate_operands.c  the Q/K quantizers and the K and V passes
 *   simulate_tile.c      one task of up to 128 query rows (the online softmax)
 *   simulate_exact_keys.c  one row's attention over its head's exact keys
 *   simulate.c           the entry points: checks, task packing, the loop
 *                        over (batch, head)
 *
 * The model the three implement is described at the top of simulate.c.
 */
#ifndef VCATTN_SIMULATE_INTERNAL_H
#define VCATTN_SIMULATE_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453

/* ---- per-(batch, head) prepared operands ------------------------------------------ */

typedef struct {
    int64_t nblk;      /* key blocks (Skv rounded up to 128) */
    float *kt;         /* [nblk][D][128] K code values (or dequantized), transposed per block;
                          every value is exact in FP32 */
    float *kscale;     /* [nblk*128] per-key dequantization scale (1 when folded into kt) */
    float *ksm;        /* [nblk*128][D] smoothed, permuted K in FP32 (for Q smoothing's delta) */
    double *vq;        /* [nblk*128][D] V (or the residual) in channel-scale units */
    float *vqf;        /* vq in FP32 (exact: codes or dequantized codes) for the fast path */
    float *vexact;     /* [nblk*128][D] the exact permuted V (error budget) */
    double *mu;        /* [nblk][D] block means in channel-scale units (0 without V-Smooth) */
    double chan_scale[128];
    int k_exp;         /* NVFP4 K: the tensor scale's exponent (kscale = 2^k_exp), else 0 */
    int v_shift;       /* V held times 2^-v_shift (0 unless max|V| > 2^60: FP32 sums of P V stay finite) */
    int ve_shift;      /* vexact holds V times 2^-ve_shift: v_shift, or for the per-channel format
                          (whose codes are never shifted) its own shift, so that the FP32 sum of
                          P_q times the exact V (o_pq_v) stays finite too */
    double kmean[128]; /* K channel mean (0 without K smoothing) */
    const int32_t *perm; /* permuted position -> original token, NULL = identity */
    const int32_t *exact_tok; /* the n_exact tokens that skip quantization (exact_keys.h) */
    int n_exact;
} head_data;

typedef struct {
    const vcattn_attention_params *p;
    const vcattn_method_config *cfg;
    vcattn_sim_outputs *extra;
    head_data hd;
    int64_t b, h;
    int64_t skv; /* keys of the quantized pass: seq_kv less the head's exact keys */
    int64_t tiles;
    int fp32_pipeline;   /* round per-score quantities like the kernel does */
    int restore_group;   /* the V-Smooth means restored eight blocks at a time (the
                          * kernel's rule, restore.cuh vc_att_grouped: all but plain
                          * ExpCast against the running max) */
    double sml2e;        /* softmax scale * log2(e), the score -> log2 factor */
    float p_log2_offset; /* subtracted from the row max (P's static scale) */
    double lse_log2_bias;
    /* query-row sampling (vcattn_simulate_attention_rows): task t computes
     * the listed rows rows[task_first[t] .. task_first[t+1]) (at most 128,
     * from at most task_sources tiles); outputs are indexed by list
     * position.  rows = NULL: task t is tile t, every row, outputs by
     * sequence position. */
    const int64_t *rows;
    int64_t n_out; /* output rows per (batch, head): n_rows, or seq_q */
    int64_t *task_first;
    int64_t task_sources; /* most source tiles a task spans (1 for a full run) */
    float q_nvfp4_scale; /* NVFP4 tensor scale of this head's (smoothed) Q */
    int q_exp;           /* its exponent (NVFP4 Q codes are held times 2^-q_exp), else 0 */
    /* set by a task whose FP32 scores or outputs are not finite (finite
     * inputs, scores beyond FP32): the run answers SCORE_OVERFLOW */
    atomic_int overflow;
    /* per-worker scratch */
    double **scratch;
    size_t scratch_doubles;
} sim_ctx;

/* The kernel's FP32 rounding of a per-score quantity; the identity on the
 * all-FP32 method, whose whole path is then FP64 (the exactness tests). */
static inline double R(const sim_ctx *c, double x) { return c->fp32_pipeline ? (double)(float)x : x; }

/* The original token at permuted position j. */
static inline int64_t orig_token(const head_data *hd, int64_t j) { return hd->perm ? hd->perm[j] : j; }

/* Q/K scale groups.  SageAttention2 "per_thread" on sm90: a Q scale covers
 * rows {16w+g, 16w+g+8} of each 64-row block (w = warp, g = lane/4, the rows
 * a thread owns in the wgmma accumulator); a K scale covers the keys
 * {8j+2t, 8j+2t+1} of a 128-key block (t = lane%4, the accumulator columns). */
static inline int64_t q_group_of_row(vcattn_qk_granularity g, int64_t row_in_tile) {
    if (g == VCATTN_QK_GRANULARITY_THREAD) {
        int64_t blk = row_in_tile / 64, r = row_in_tile % 64;
        return blk * 32 + (r / 16) * 8 + (r % 8);
    }
    return 0;
}

static inline int64_t k_group_of_key(vcattn_qk_granularity g, int64_t key_in_block) {
    return g == VCATTN_QK_GRANULARITY_THREAD ? (key_in_block % 8) / 2 : 0;
}


/* ---- simulate_operands.c ------------------------------------------------------------ */

/* Quantizes rows[0..n) (each D floats, row i in group group_of[i]) of a Q
 * tile or a K block to code values `codes` (row-major [n][D]) and per-row
 * scales.  Rows >= valid are zero padding. */
void vc_sim_quantize_qk_rows(const vcattn_method_config *cfg, const float *rows, int64_t n,
                             int64_t D, const int64_t *group_of, int64_t groups, float *codes,
                             float *row_scale, float nvfp4_tensor_scale);

vcattn_status vc_sim_head_data_alloc(head_data *hd, int64_t Skv, int64_t D);
void vc_sim_head_data_free(head_data *hd);
/* The K pass (smoothing, permutation, quantization into hd->kt, hd->kscale)
 * and the V pass (shift, V-Smooth block demean, quantization, 16-bit means)
 * of slice (c->b, c->h) into c->hd. */
void vc_sim_prepare_k(sim_ctx *c);
void vc_sim_prepare_v(sim_ctx *c);

/* Loads the 128-row Q tile at q0 into qraw (zero padding past Sq) and, with
 * Q smoothing (SageAttention3), subtracts the tile's mean (padding rows
 * included) into qm; the task adds its score term delta_j = mean . k_j back
 * before the softmax. */
void vc_sim_q_tile_load(const sim_ctx *c, int64_t q0, float *qraw, float *qm);
/* The NVFP4 tensor scale of one head's Q, as the tiles quantize it (smoothed). */
float vc_sim_q_nvfp4_tensor_scale(const sim_ctx *c);

/* ---- simulate_exact_keys.c ------------------------------------------------------------ */

/* The exact keys' part of one query row of slice (c->b, c->h): FP32 scores in log2 units in
 * the order of hd.exact_tok, their max *m2, sum *l and u[d] = sum_j 2^(s_j - m2) v_j[d].
 * Returns 0 when a score or sum is not finite. */
int vc_sim_exact_keys_part(const sim_ctx *c, int64_t row, float *m2, float *l, float *u);

/* ---- simulate_tile.c ---------------------------------------------------------------- */

/* Doubles of per-worker scratch one task needs. */
size_t vc_sim_tile_scratch_doubles(int64_t D, int64_t nblk, int want_tv, int64_t sources);
/* vc_parallel_for body: task `task` of the (batch, head) slice c->hd holds. */
void vc_sim_tile_task(void *vctx, int64_t task, int worker);

#endif
