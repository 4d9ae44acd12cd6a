/* simulate.c - the CPU simulation of every low-bit method: one code path,
 * configured by vcattn_method_config flags.
 *
 * It follows the kernel's structure: per (batch, head) the K and V passes
 * (smoothing, V-Smooth permutation and block demean, quantization), then
 * 128-query tiles that walk the 128-key blocks with an online softmax, a
 * fresh accumulator per block folded into the running output (two-level
 * accumulation) and, for V-Smooth, the mean restore of eq. (6):
 *     O <- alpha*O + P_q R_q + r mu^T,   l <- alpha*l + r.
 *
 * Arithmetic: dot products accumulate in double (exact for INT8 codes, and
 * within rounding of the tensor core's FP32 accumulator otherwise).  Where the
 * kernel rounds a per-score quantity to FP32 (the scaled score, the running
 * max, exp2, the ExpCast bracket) the simulation rounds too, through R().
 * When nothing is quantized R() is the identity and the whole path is FP64:
 * that is how the tests show the permutation and the mean restore are exact.
 *
 * This file holds the entry points: the argument checks, the packing of
 * sampled rows into tasks, and the loop over (batch, head) that prepares the
 * operands (simulate_operands.c) and runs the tile tasks (simulate_tile.c).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "exact_keys.h"
#include "numerics.h"
#include "p_path.h"
#include "simulate_internal.h"

/* ---- entry points ------------------------------------------------------------------- */

static vcattn_status check_config(const vcattn_method_config *cfg) {
    if ((unsigned)cfg->qk_format > VCATTN_QK_FORMAT_NVFP4 ||
        (unsigned)cfg->qk_granularity > VCATTN_QK_GRANULARITY_THREAD ||
        (unsigned)cfg->v_format > VCATTN_V_FORMAT_NVFP4 ||
        (unsigned)cfg->p_format > VCATTN_P_FORMAT_SPLIT || (unsigned)cfg->p_scale > VCATTN_P_SCALE_BLOCK_MAX)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    /* the block-max scale's descent bound is set by the FP16 restore with P <= 448 */
    if (cfg->p_scale == VCATTN_P_SCALE_BLOCK_MAX && cfg->p_format != VCATTN_P_FORMAT_E4M3 &&
        cfg->p_format != VCATTN_P_FORMAT_EXPCAST && cfg->p_format != VCATTN_P_FORMAT_SPLIT)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (cfg->qk_format == VCATTN_QK_FORMAT_NVFP4 && cfg->qk_granularity != VCATTN_QK_GRANULARITY_BLOCK)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (cfg->exact_keys < 0 || cfg->exact_keys > VC_EXACT_KEYS_MAX) return VCATTN_STATUS_INVALID_ARGUMENT;
    return VCATTN_STATUS_SUCCESS;
}

/* The values a tile task derives from the method config (set per head: a head
 * policy can give a head the exact exponential instead of the method's P). */
static void sim_derive(sim_ctx *c, const vcattn_method_config *cfg) {
    c->cfg = cfg;
    c->fp32_pipeline = !(cfg->qk_format == VCATTN_QK_FORMAT_FP32 && cfg->v_format == VCATTN_V_FORMAT_FP32 &&
                        cfg->p_format == VCATTN_P_FORMAT_FP32);
    const int pp = VC_P_PATH_OF(*cfg);
    c->restore_group = VC_PP_GROUPED_RESTORE(pp);
    c->p_log2_offset = VC_PP_P_LOG2_OFFSET(pp);
    c->lse_log2_bias = (double)VC_PP_LSE_LOG2_BIAS(pp);
}

/* rows = NULL: every query row (n_rows unused); p already validated.  head_exact:
 * optional (B, H) flags, nonzero = that head's P by the exact exponential
 * (vcattn_method_exact_p). */
static vcattn_status simulate_run(const vcattn_attention_params *p, const vcattn_method_config *config,
                                  const int32_t *perm, const uint8_t *head_exact, const int64_t *rows,
                                  int64_t n_rows, vcattn_sim_outputs *extra) {
    vcattn_status st = VCATTN_STATUS_SUCCESS;
    if (!config) return VCATTN_STATUS_NULL_POINTER;
    if ((st = check_config(config))) return st;
    vcattn_method_config exact_cfg = *config;
    if (head_exact && (st = vcattn_method_exact_p(config, &exact_cfg))) return st;
    if (extra && extra->row_tv && extra->tv_row_stride < 1) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (vc_has_non_finite(p->q, p->batch, p->heads, p->seq_q, p->head_dim, p->q_stride) ||
        vc_has_non_finite(p->k, p->batch, p->heads, p->seq_kv, p->head_dim, p->k_stride) ||
        vc_has_non_finite(p->v, p->batch, p->heads, p->seq_kv, p->head_dim, p->v_stride))
        return VCATTN_STATUS_NON_FINITE;

    sim_ctx c;
    memset(&c, 0, sizeof c);
    atomic_init(&c.overflow, 0);
    c.p = p;
    c.cfg = config;
    c.extra = extra;
    sim_derive(&c, config);
    c.tiles = (p->seq_q + VC_TILE_Q - 1) / VC_TILE_Q;
    c.n_out = p->seq_q;
    int64_t tasks = c.tiles;
    c.task_sources = 1;
    int workers = vc_thread_count(p->num_threads);
    if (rows) {
        /* Pack consecutive listed rows into tasks of up to 128 rows from up
         * to SIM_TASK_SOURCES tiles: each task reads every K/V block once for
         * all its rows (one tile's few sampled rows alone would make the run
         * memory-bound), yet there are enough tasks for every worker. */
        enum { SIM_TASK_SOURCES = 32 };
        int64_t pack = (n_rows + 4 * (int64_t)workers - 1) / (4 * (int64_t)workers);
        if (pack > VC_TILE_Q) pack = VC_TILE_Q;
        if (pack < 1) pack = 1;
        c.rows = rows;
        c.n_out = n_rows;
        c.task_sources = SIM_TASK_SOURCES;
        c.task_first = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n_rows + 1));
        if (!c.task_first) return VCATTN_STATUS_OUT_OF_MEMORY;
        tasks = 0;
        int64_t in_task = 0, sources = 0, last_tile = -1;
        for (int64_t i = 0; i < n_rows; ++i) {
            int64_t tile = rows[i] / VC_TILE_Q;
            int new_source = tile != last_tile;
            if (tasks == 0 || in_task == pack || (new_source && sources == SIM_TASK_SOURCES)) {
                c.task_first[tasks++] = i;
                in_task = 0;
                sources = 0;
                new_source = 1;
            }
            if (new_source) ++sources;
            last_tile = tile;
            ++in_task;
        }
        c.task_first[tasks] = n_rows;
    }
    c.sml2e = R(&c, vc_softmax_scale(p) * LOG2E);

    int want_tv = extra && extra->row_tv;
    int64_t nblk = (p->seq_kv + VC_BLOCK_K - 1) / VC_BLOCK_K; /* enough for the quantized pass */
    c.scratch_doubles = vc_sim_tile_scratch_doubles(p->head_dim, nblk, want_tv, c.task_sources);
    c.scratch = (double **)calloc((size_t)workers, sizeof(double *));
    unsigned char *seen = config->v_smooth && perm ? (unsigned char *)malloc((size_t)p->seq_kv) : NULL;
    /* the exact keys (exact_keys.h): each head's order with them at its end */
    const int n_exact = vc_exact_keys_count(config->exact_keys, config->v_smooth, p->seq_kv);
    int32_t *order = n_exact ? (int32_t *)malloc(sizeof(int32_t) * (size_t)p->seq_kv) : NULL;
    float *norm = n_exact ? (float *)malloc(sizeof(float) * (size_t)p->seq_kv) : NULL;
    c.skv = p->seq_kv - n_exact;
    if (!c.scratch || (config->v_smooth && perm && !seen) || (n_exact && (!order || !norm))) {
        free(c.scratch);
        free(seen);
        free(order);
        free(norm);
        free(c.task_first);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    for (int w = 0; w < workers && st == VCATTN_STATUS_SUCCESS; ++w) {
        c.scratch[w] = (double *)malloc(sizeof(double) * c.scratch_doubles);
        if (!c.scratch[w]) st = VCATTN_STATUS_OUT_OF_MEMORY;
    }

    for (int64_t b = 0; b < p->batch && st == VCATTN_STATUS_SUCCESS; ++b)
        for (int64_t h = 0; h < p->heads && st == VCATTN_STATUS_SUCCESS; ++h) {
            c.b = b;
            c.h = h;
            sim_derive(&c, head_exact && head_exact[b * p->heads + h] ? &exact_cfg : config);
            if ((st = vc_sim_head_data_alloc(&c.hd, c.skv, p->head_dim))) break;
            if (config->v_smooth && perm) {
                c.hd.perm = perm + (b * p->heads + h) * p->seq_kv;
                if (!vc_perm_is_valid(c.hd.perm, p->seq_kv, seen)) {
                    st = VCATTN_STATUS_INVALID_ARGUMENT;
                    vc_sim_head_data_free(&c.hd);
                    break;
                }
            }
            if (n_exact) {
                vc_exact_keys_order(vc_row(p->v, p->v_stride, b, h, 0), p->v_stride[2], p->seq_kv, p->head_dim,
                                    c.hd.perm, n_exact, norm, order);
                c.hd.perm = order;
                c.hd.exact_tok = order + c.skv;
                c.hd.n_exact = n_exact;
            }
            c.q_nvfp4_scale = config->qk_format == VCATTN_QK_FORMAT_NVFP4 ? vc_sim_q_nvfp4_tensor_scale(&c) : 1.0f;
            c.q_exp = config->qk_format == VCATTN_QK_FORMAT_NVFP4 ? ilogbf(c.q_nvfp4_scale) : 0;
            vc_sim_prepare_k(&c);
            vc_sim_prepare_v(&c);
            vc_parallel_for(tasks, workers, vc_sim_tile_task, &c);
            vc_sim_head_data_free(&c.hd);
            if (atomic_load(&c.overflow)) st = VCATTN_STATUS_SCORE_OVERFLOW;
        }

    for (int w = 0; w < workers; ++w) free(c.scratch[w]);
    free(c.scratch);
    free(seen);
    free(order);
    free(norm);
    free(c.task_first);
    return st;
}

static vcattn_status simulate_batch(const vcattn_attention_params *sub, const int32_t *perm,
                                    const uint8_t *head_exact, void *config) {
    return simulate_run(sub, (const vcattn_method_config *)config, perm, head_exact, NULL, 0, NULL);
}

vcattn_status vcattn_simulate_attention(const vcattn_attention_params *p,
                                        const vcattn_method_config *config,
                                        const int32_t *perm, vcattn_sim_outputs *extra) {
    return vcattn_simulate_attention_heads(p, config, perm, NULL, NULL, 0, extra);
}

vcattn_status vcattn_simulate_attention_rows(const vcattn_attention_params *p,
                                             const vcattn_method_config *config,
                                             const int32_t *perm, const int64_t *rows,
                                             int64_t n_rows, vcattn_sim_outputs *extra) {
    vcattn_status st = vc_rows_params_validate(p, rows, n_rows);
    if (st) return st;
    return simulate_run(p, config, perm, NULL, rows, n_rows, extra);
}

vcattn_status vcattn_simulate_attention_heads(const vcattn_attention_params *p,
                                              const vcattn_method_config *config,
                                              const int32_t *perm, const uint8_t *head_exact,
                                              const int64_t *rows, int64_t n_rows,
                                              vcattn_sim_outputs *extra) {
    vcattn_status st = rows ? vc_rows_params_validate(p, rows, n_rows) : vcattn_attention_params_validate(p);
    if (st) return st;
    if (p->q_lens || p->kv_lens) {
        /* the extra outputs are (B, H, Sq, ...) arrays of the padded problem: not with lengths */
        if (extra) return VCATTN_STATUS_INVALID_ARGUMENT;
        if (!config) return VCATTN_STATUS_NULL_POINTER;
        return vc_lengths_run(p, config->v_smooth ? perm : NULL, head_exact, simulate_batch, (void *)config);
    }
    return simulate_run(p, config, perm, head_exact, rows, n_rows, extra);
}
