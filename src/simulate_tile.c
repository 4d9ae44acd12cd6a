/* simulate_tile.c - one task of the CPU simulation: up to 128 query rows
 * walk the 128-key blocks with an online softmax (scores, P in the method's
 * format, one fold of a fresh P V accumulator per block, the V-Smooth mean
 * restore), then the epilogue.  The model is described at the top of
 * simulate.c; the operands come from simulate_operands.c.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "exact_keys.h"
#include "numerics.h"
#include "simulate_internal.h"

/* The per-block steps below are split out of the task for reading only:
 * forced inline, each compiles into the task's own target clone
 * (VC_HOT_LOOPS) exactly as the task's body did, the same operations in the
 * same order. */
#if defined(__GNUC__)
#define TILE_STEP static inline __attribute__((always_inline))
#else
#define TILE_STEP static inline
#endif

typedef struct {
    float *qc;       /* [128][D] Q code values (exact in FP32) of the task's rows */
    float *qtile;    /* [128][D] one source tile's Q code values */
    double *s;       /* [128][128] block scores */
    double *o, *oe;  /* [128][D] running output, and P_q times exact V */
    double *pq;      /* [128] one row's quantized P */
    double *acc;     /* [D] */
    float *delta;    /* [sources][nblk*128] Q-smoothing score term per key, per source tile */
    float *pstore;   /* [128][nblk*128] quantized P of sampled rows (row_tv) */
    double *mstore;  /* [128][nblk] running max at each block (row_tv) */
} tile_scratch;

size_t vc_sim_tile_scratch_doubles(int64_t D, int64_t nblk, int want_tv, int64_t sources) {
    size_t keys = (size_t)nblk * VC_BLOCK_K;
    size_t n = 128 * (size_t)D * 4 + 128 * 128 + 128 + (size_t)D + (size_t)sources * keys / 2 + 1;
    if (want_tv) n += 128 * keys / 2 + 1 + 128 * (size_t)nblk;
    return n;
}

static tile_scratch tile_scratch_carve(double *base, int64_t D, int64_t nblk, int want_tv,
                                       int64_t sources) {
    tile_scratch t;
    size_t keys = (size_t)nblk * VC_BLOCK_K;
    t.qc = (float *)base; /* 128*D doubles reserved: room to spare */
    t.qtile = (float *)(base + 128 * D);
    t.s = base + 2 * 128 * D;
    t.o = t.s + 128 * 128;
    t.oe = t.o + 128 * D;
    t.pq = t.oe + 128 * D;
    t.acc = t.pq + 128;
    t.delta = (float *)(t.acc + D);
    double *next = t.acc + D + (size_t)sources * keys / 2 + 1;
    t.pstore = want_tv ? (float *)next : NULL;
    t.mstore = want_tv ? next + 128 * keys / 2 + 1 : NULL;
    return t;
}

/* Exact softmax probabilities of one query row vs the simulated ones: the
 * row's total variation 0.5 * sum |p - p_q / l|. */
VC_HOT_LOOPS static double row_total_variation(const sim_ctx *c, int64_t row, const float *pstore,
                                               const double *mstore, double m_final, double l) {
    const vcattn_attention_params *p = c->p;
    const head_data *hd = &c->hd;
    const int64_t D = p->head_dim, Skv = c->skv;
    const float *q = vc_row(p->q, p->q_stride, c->b, c->h, row);
    double scale = vc_softmax_scale(p), mx = -INFINITY, sum = 0.0, tv = 0.0;
    double *s = (double *)malloc(sizeof(double) * (size_t)Skv);
    if (!s) return NAN;
    /* 8 keys at a time: independent dot products, each over d in order */
    int64_t j = 0;
    for (; j + 8 <= Skv; j += 8) {
        const float *k[8];
        double dot[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        for (int u = 0; u < 8; ++u) k[u] = vc_row(p->k, p->k_stride, c->b, c->h, orig_token(hd, j + u));
        for (int64_t d = 0; d < D; ++d)
            for (int u = 0; u < 8; ++u) dot[u] += (double)q[d] * k[u][d];
        for (int u = 0; u < 8; ++u) {
            s[j + u] = dot[u] * scale;
            if (s[j + u] > mx) mx = s[j + u];
        }
    }
    for (; j < Skv; ++j) {
        const float *k = vc_row(p->k, p->k_stride, c->b, c->h, orig_token(hd, j));
        double dot = 0.0;
        for (int64_t d = 0; d < D; ++d) dot += (double)q[d] * k[d];
        s[j] = dot * scale;
        if (s[j] > mx) mx = s[j];
    }
    for (j = 0; j < Skv; ++j) sum += (s[j] = exp(s[j] - mx));
    for (j = 0; j < Skv; ++j) {
        double pe = s[j] / sum;
        double pqn = (double)pstore[j] * exp2(mstore[j / VC_BLOCK_K] - m_final) / l;
        tv += fabs(pe - pqn);
    }
    free(s);
    return 0.5 * tv;
}

/* The rows a task computes, in slots i = 0..nsel-1: sequence row
 * seq_row[i], output row out_row[i], source tile src[i] (the 128-row
 * tile holding it).  A full run computes one tile, every row; a sampled
 * run packs the listed rows of several consecutive tiles into one task,
 * so each K/V block is read once for up to 128 rows. */
typedef struct {
    int64_t seq_row[VC_TILE_Q], out_row[VC_TILE_Q], src_tile[VC_TILE_Q], nsel, nsrc;
    int src[VC_TILE_Q];
} task_rows;

TILE_STEP void task_rows_select(const sim_ctx *c, int64_t task, task_rows *tr) {
    const int64_t Sq = c->p->seq_q;
    tr->nsel = 0;
    tr->nsrc = 0;
    if (c->rows) {
        for (int64_t k = c->task_first[task]; k < c->task_first[task + 1]; ++k, ++tr->nsel) {
            tr->seq_row[tr->nsel] = c->rows[k];
            tr->out_row[tr->nsel] = k;
            if (tr->nsrc == 0 || c->rows[k] / VC_TILE_Q != tr->src_tile[tr->nsrc - 1])
                tr->src_tile[tr->nsrc++] = c->rows[k] / VC_TILE_Q;
            tr->src[tr->nsel] = (int)(tr->nsrc - 1);
        }
    } else {
        tr->src_tile[tr->nsrc++] = task;
        for (int64_t r = task * VC_TILE_Q; r < Sq && tr->nsel < VC_TILE_Q; ++r, ++tr->nsel) {
            tr->seq_row[tr->nsel] = tr->out_row[tr->nsel] = r;
            tr->src[tr->nsel] = 0;
        }
    }
}

/* Q, per source tile: load (zero padding past Sq), smooth, quantize the
 * WHOLE tile, as a full run does (its scale groups and the Q mean span the
 * tile), then keep the code rows of this task's rows in t->qc, their scales
 * in qscale, and the tile's Q-smoothing score term in t->delta. */
TILE_STEP void task_load_q(const sim_ctx *c, const task_rows *tr, const tile_scratch *t, int64_t keys,
                           float *qscale) {
    const vcattn_method_config *cfg = c->cfg;
    const head_data *hd = &c->hd;
    const int64_t D = c->p->head_dim, Skv = c->skv;
    for (int64_t si = 0; si < tr->nsrc; ++si) {
        const int64_t q0 = tr->src_tile[si] * VC_TILE_Q;
        float *delta = t->delta + si * keys;
        float qraw[VC_TILE_Q * 128], qm[128];
        vc_sim_q_tile_load(c, q0, qraw, qm);
        for (int64_t j = 0; j < keys; ++j) delta[j] = 0.0f;
        if (cfg->smooth_q) {
            /* in the units of the scores: NVFP4 codes are held times 2^-(q_exp + k_exp) */
            const int dexp = -(c->q_exp + hd->k_exp);
            /* 8 keys at a time: independent sums (each still over d in order, so
             * the same bits) instead of one long dependency chain; this is per
             * tile, so with sampled rows it is paid for every tile touched */
            int64_t j = 0;
            for (; j + 8 <= Skv; j += 8) {
                double s8[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
                const float *k0 = hd->ksm + j * D;
                for (int64_t d = 0; d < D; ++d)
                    for (int u = 0; u < 8; ++u) s8[u] += (double)qm[d] * k0[u * D + d];
                for (int u = 0; u < 8; ++u) delta[j + u] = (float)R(c, ldexp(s8[u], dexp));
            }
            for (; j < Skv; ++j) {
                double s = 0.0;
                for (int64_t d = 0; d < D; ++d) s += (double)qm[d] * hd->ksm[j * D + d];
                delta[j] = (float)R(c, ldexp(s, dexp));
            }
        }
        int64_t group_of[VC_TILE_Q];
        for (int64_t i = 0; i < VC_TILE_Q; ++i) group_of[i] = q_group_of_row(cfg->qk_granularity, i);
        int64_t groups = cfg->qk_granularity == VCATTN_QK_GRANULARITY_THREAD ? 64 : 1;
        float tscale[VC_TILE_Q];
        vc_sim_quantize_qk_rows(cfg, qraw, VC_TILE_Q, D, group_of, groups, t->qtile, tscale, c->q_nvfp4_scale);
        for (int64_t i = 0; i < tr->nsel; ++i)
            if (tr->src[i] == si) {
                memcpy(t->qc + i * D, t->qtile + (tr->seq_row[i] - q0) * D, sizeof(float) * (size_t)D);
                qscale[i] = tscale[tr->seq_row[i] - q0];
            }
    }
}

/* S = Q K^T for the block (vectorized over keys) into t->s.  The quantized
 * path accumulates in FP32 like the tensor core (exact for INT8 codes:
 * |sum| < 2^24); the exact path in FP64. */
TILE_STEP void block_scores(const sim_ctx *c, const tile_scratch *t, int64_t nsel, const float *kt) {
    const int64_t D = c->p->head_dim;
    for (int64_t i = 0; i < nsel; ++i) {
        double *s = t->s + i * VC_BLOCK_K;
        const float *qr = t->qc + i * D;
        if (c->fp32_pipeline) {
            /* 32 keys at a time so the accumulators stay in registers
             * (each still sums over d in order: the same bits) */
            for (int64_t jc = 0; jc < VC_BLOCK_K; jc += 32) {
                float sf[32] = {0};
                for (int64_t d = 0; d < D; ++d) {
                    const float qv = qr[d], *kr = kt + d * VC_BLOCK_K + jc;
                    for (int64_t j = 0; j < 32; ++j) sf[j] += qv * kr[j];
                }
                for (int64_t j = 0; j < 32; ++j) s[jc + j] = sf[j];
            }
        } else {
            for (int64_t j = 0; j < VC_BLOCK_K; ++j) s[j] = 0.0;
            for (int64_t d = 0; d < D; ++d) {
                const double qv = qr[d];
                const float *kr = kt + d * VC_BLOCK_K;
                for (int64_t j = 0; j < VC_BLOCK_K; ++j) s[j] += qv * (double)kr[j];
            }
        }
    }
}

/* One row's scores of the block as the kernel holds them: sd (the
 * accumulator plus the Q-smoothing term), cc (the dequantization factor),
 * tt (the score in log2 units), and their max.  0 when some score is not
 * finite in FP32. */
TILE_STEP int row_scores(const sim_ctx *c, const double *s, const float *delta, double cqi, const float *ks,
                         int64_t nvalid, double *tt, double *cc, double *sd, double *rowmax_out) {
    double rowmax = -INFINITY;
    int finite = 1;
    for (int64_t j = 0; j < nvalid; ++j) {
        sd[j] = R(c, delta[j] + s[j]); /* the accumulator the kernel holds */
        cc[j] = R(c, cqi * ks[j]);     /* per (row group, key group) factor */
        tt[j] = R(c, sd[j] * cc[j]);   /* score in log2 units */
        if (tt[j] > rowmax) rowmax = tt[j];
        finite &= isfinite(tt[j]) && isfinite(cc[j]);
    }
    *rowmax_out = rowmax;
    return finite;
}

/* One score's ExpCast code (plain, with the tail line, or the split's: bracket_const
 * VC_EXPCAST_CONST, VC_EXPCAST_TAIL_BIASED_CONST or VC_SPLIT_EXPCAST_CONST), as the kernel
 * evaluates its bracket: from the INT32 score s (vc_expcast_int_bracket_at, the
 * tail's biased form), or from the FP32 score t where the scale a = 8c passes
 * VC_EXPCAST_MAGIC_MAX_A (the DIRECT kernel, vc_expcast_bracket_direct) */
TILE_STEP uint8_t expcast_score_code(int tail, float bracket_const, double t, double cscale, double s, double m_new) {
    const float a = 8.0f * (float)cscale;
    const float v = a > VC_EXPCAST_MAGIC_MAX_A ? vc_expcast_bracket_direct((float)t, (float)m_new, bracket_const)
                    : tail ? vc_expcast_tail_biased_bracket(a, (float)s, (float)m_new)
                           : vc_expcast_int_bracket_at(a, (float)s, (float)m_new, bracket_const);
    return tail ? vc_expcast_tail_code_biased(v) : vc_expcast_code_from_bracket(v);
}

/* One row's P for the block in the method's format into pq (what the P V
 * product multiplies); returns lsum, the row sum of the unquantized
 * exponentials in P's scale. */
TILE_STEP double row_p(const sim_ctx *c, const double *tt, const double *cc, const double *sd, int64_t nvalid,
                       double m_new, double *pq) {
    double lsum = 0.0;
    switch (c->cfg->p_format) {
    case VCATTN_P_FORMAT_EXPCAST:
    case VCATTN_P_FORMAT_EXPCAST_TAIL: {
        /* ONE fma per score: c = clip(RNE(8 * (t - m) + 120 + beta)), evaluated
         * as the kernel does (softmax_numerics.h): the bracket from the INT32 score
         * (vc_expcast_int_bracket), RNE and the clamp at 0 by the kernel's
         * saturating fma and FP16 conversion (vc_expcast_code_from_bracket);
         * the tail variant keeps the bracket + 128 rounded to BF16, puts the
         * row max at code 126 and adds the tail line (vc_expcast_tail_code_biased) */
        const int tail = c->cfg->p_format == VCATTN_P_FORMAT_EXPCAST_TAIL;
        const float p_scale = tail ? VC_EXPCAST_TAIL_P_SCALE : VC_EXPCAST_P_SCALE;
        for (int64_t j = 0; j < nvalid; ++j) {
            pq[j] = vc_e4m3_decode(expcast_score_code(tail, tail ? VC_EXPCAST_TAIL_BIASED_CONST : VC_EXPCAST_CONST,
                                                      tt[j], cc[j], sd[j], m_new));
            lsum += R(c, exp2(R(c, tt[j] - m_new))) * p_scale;
        }
        break;
    }
    case VCATTN_P_FORMAT_SPLIT:
        /* softmax_numerics.h, "the split P": in ExpCast's scale (the block's max at code
         * 120 = 256), keys vc_split_key_is_exp by the exp path, the rest by ExpCast's
         * codes with the split's constant; both parts' mean gain 1, the top key's */
        for (int64_t j = 0; j < nvalid; ++j) {
            const double u = R(c, tt[j] - m_new);
            lsum += R(c, exp2(u)) * VC_EXPCAST_P_SCALE;
            pq[j] = vc_split_key_is_exp(j) ? vc_e4m3_round((float)R(c, exp2(R(c, u + VC_SPLIT_EXP_LOG2_OFFSET))))
                                           : vc_e4m3_decode(expcast_score_code(0, VC_SPLIT_EXPCAST_CONST, tt[j], cc[j], sd[j], m_new));
        }
        break;
    case VCATTN_P_FORMAT_E4M3:
        for (int64_t j = 0; j < nvalid; ++j) {
            double e = R(c, exp2(R(c, tt[j] - m_new)));
            lsum += e;
            pq[j] = vc_e4m3_round((float)e);
        }
        break;
    case VCATTN_P_FORMAT_NVFP4:
        /* SageAttention3's two levels: P~ = 2688 * 2^(t - m); per 16
         * keys sf = max/6 (FP32), codes e2m1(P~ / sf), the MMA
         * dequantizes with sf rounded to E4M3 */
        for (int64_t j = 0; j < nvalid; ++j) {
            pq[j] = R(c, exp2(R(c, tt[j] - m_new)));
            lsum += pq[j];
        }
        for (int64_t j = nvalid; j < VC_BLOCK_K; ++j) pq[j] = 0.0;
        for (int64_t g = 0; g < nvalid; g += VC_NVFP4_BLOCK) {
            float mx = 0.0f;
            for (int k = 0; k < VC_NVFP4_BLOCK; ++k) mx = fmaxf(mx, (float)pq[g + k]);
            float sf = mx / VC_E2M1_MAX, sfq = vc_e4m3_round(sf);
            for (int k = 0; k < VC_NVFP4_BLOCK; ++k)
                pq[g + k] = sf > 0.0f ? vc_e2m1_round((float)pq[g + k] / sf) * sfq : 0.0f;
        }
        break;
    case VCATTN_P_FORMAT_FP32:
    default:
        for (int64_t j = 0; j < nvalid; ++j) {
            pq[j] = R(c, exp2(R(c, tt[j] - m_new)));
            lsum += pq[j];
        }
        break;
    }
    return lsum;
}

/* A row's mean terms not yet restored.  Single (NVFP4 P, CPU only): rprev, block
 * kb-1's four r partials, restored in block kb's accumulator.  Grouped:
 * rlast, block kb-1's r, and coef, the open group's coefficients at the
 * current block's scale (softmax_numerics.h, "the grouped mean restore"); G, the
 * block-max group floor's largest scale of the open group. */
typedef struct {
    double rprev[4];
    double rlast;
    float coef[VC_RESTORE_GROUP];
    float G;
    const double *mu_prev;
} mean_pending;

/* The row sum r of the block's quantized P and the running l's update:
 * l <- alpha*l + r (or + lsum); with the quad partials (quad), r's four
 * 32-key partials rt, each kept in its own l4 partial.  Returns r. */
TILE_STEP double row_sum_fold(const sim_ctx *c, const double *pq, int64_t nvalid, double alpha, double lsum,
                              int quad, double *l4i, double *li, double *rt) {
    double r = 0.0;
    for (int64_t j = 0; j < nvalid; ++j) r += pq[j];
    r = R(c, r);
    if (quad) {
        for (int q = 0; q < 4; ++q) {
            double h[2] = {0.0, 0.0};
            for (int half = 0; half < 2; ++half)
                for (int64_t j = 32 * q + 16 * half; j < 32 * q + 16 * half + 16 && j < nvalid; ++j) h[half] += pq[j];
            rt[q] = R(c, R(c, h[0]) + R(c, h[1]));
            l4i[q] = R(c, alpha * l4i[q] + rt[q]);
        }
    } else {
        *li = R(c, alpha * *li + (c->cfg->rowsum_from_quantized_p ? r : R(c, lsum)));
    }
    return r;
}

/* P V for this block into a fresh accumulator, then one fold into row i's
 * output o (and oe, P_q times the exact V):
 * O = alpha*O + acc + r*mu   (mu = 0 without V-Smooth); in the kernel-like
 * pipeline the earlier blocks' mean terms ride in acc instead (grouped, or
 * one block at a time: below). */
TILE_STEP void row_pv_fold(const sim_ctx *c, const tile_scratch *t, int64_t i, int64_t kb, const double *pq,
                           int64_t nvalid, double alpha, double r, const double *vq, const float *vqf, const float *ve,
                           const double *mu, int quad, mean_pending *pend, const double *rt) {
    const int64_t D = c->p->head_dim;
    double *acc = t->acc, *o = t->o + i * D, *oe = t->oe + i * D;
    if (c->fp32_pipeline) {
        /* P_q V_q and P_q V in FP32, as the FP8 tensor core accumulates
         * (quantized P and V codes are exact in FP32) */
        float af[128] = {0}, ef[128] = {0};
        for (int64_t j = 0; j < nvalid; ++j) {
            const float w = (float)pq[j], *vr = vqf + j * D, *er = ve + j * D;
            if (w == 0.0f) continue;
            for (int64_t d = 0; d < D; ++d) af[d] += w * vr[d];
            for (int64_t d = 0; d < D; ++d) ef[d] += w * er[d];
        }
        for (int64_t d = 0; d < D; ++d) {
            acc[d] = af[d];
            oe[d] = oe[d] * alpha + ef[d];
        }
    } else {
        for (int64_t d = 0; d < D; ++d) acc[d] = 0.0;
        for (int64_t d = 0; d < D; ++d) oe[d] *= alpha;
        for (int64_t j = 0; j < nvalid; ++j) {
            const double w = pq[j], *vr = vq + j * D;
            const float *er = ve + j * D;
            if (w == 0.0) continue;
            for (int64_t d = 0; d < D; ++d) acc[d] += w * vr[d];
            for (int64_t d = 0; d < D; ++d) oe[d] += w * (double)er[d];
        }
    }
    if (quad && c->restore_group) {
        /* grouped (softmax_numerics.h): the open group's coefficients move to this
         * block's scale, block kb-1 joins them, and when it closes its group
         * (or this is the last block) the group rides in this accumulator */
        float *cf = pend->coef;
        for (int s = 0; s < VC_RESTORE_GROUP; ++s) cf[s] = (float)alpha * cf[s];
        if (kb >= 1) {
            const int64_t b = kb - 1, g0 = b - b % VC_RESTORE_GROUP;
            cf[b % VC_RESTORE_GROUP] = (float)alpha * (float)pend->rlast;
            const int closes = b % VC_RESTORE_GROUP == VC_RESTORE_GROUP - 1;
            if (closes || kb == c->hd.nblk - 1) {
                for (int64_t d = 0; d < D; ++d) {
                    double sum = 0.0;
                    for (int64_t s = 0; s <= b - g0; ++s)
                        sum += (double)vc_rowsum_f16_split(cf[s]) * c->hd.mu[(g0 + s) * D + d];
                    acc[d] = R(c, acc[d] + sum);
                }
                if (closes)
                    for (int s = 0; s < VC_RESTORE_GROUP; ++s) cf[s] = 0.0f;
            }
        }
        for (int64_t d = 0; d < D; ++d) o[d] = R(c, alpha * o[d] + acc[d]);
        pend->rlast = r;
    } else if (quad) {
        /* single (NVFP4 P, CPU only): block kb-1's mean term in this block's
         * accumulator, each quad partial FP16-split at this block's scale */
        if (pend->mu_prev != NULL) {
            double s1 = 0.0;
            for (int q = 0; q < 4; ++q) s1 += vc_rowsum_f16_split((float)((float)alpha * (float)pend->rprev[q]));
            for (int64_t d = 0; d < D; ++d) acc[d] = R(c, acc[d] + s1 * pend->mu_prev[d]);
        }
        for (int64_t d = 0; d < D; ++d) o[d] = R(c, alpha * o[d] + acc[d]);
        for (int q = 0; q < 4; ++q) pend->rprev[q] = rt[q];
    } else {
        for (int64_t d = 0; d < D; ++d) o[d] = R(c, R(c, alpha * o[d] + R(c, acc[d])) + r * mu[d]);
    }
}

/* The kernel-like pipeline's end: the last block's mean term, pending after
 * the last fold, on the CUDA cores (single: the quad's FP16-split partials
 * summed (s0 + s1) + (s2 + s3); grouped: split(r)), and single's l from its
 * partials, (l0 + l1) + (l2 + l3). */
static double quad_split_sum(const float *r4) {
    const float s01 = vc_rowsum_f16_split(r4[0]) + vc_rowsum_f16_split(r4[1]);
    const float s23 = vc_rowsum_f16_split(r4[2]) + vc_rowsum_f16_split(r4[3]);
    return (double)(s01 + s23);
}

TILE_STEP void quad_finish(const sim_ctx *c, const tile_scratch *t, int64_t nsel, const double *mu_last,
                           const mean_pending *pend, double (*l4)[4], double *l) {
    const int64_t D = c->p->head_dim;
    for (int64_t i = 0; i < nsel; ++i) {
        double *o = t->o + i * D;
        if (c->restore_group) {
            const double sr = (double)vc_rowsum_f16_split((float)pend[i].rlast);
            for (int64_t d = 0; d < D; ++d) o[d] = R(c, o[d] + sr * mu_last[d]);
            continue; /* l: the row's own, folded as it went */
        }
        float r4[4];
        for (int q = 0; q < 4; ++q) r4[q] = (float)pend[i].rprev[q];
        const double sr = quad_split_sum(r4);
        for (int64_t d = 0; d < D; ++d) o[d] = R(c, o[d] + sr * mu_last[d]);
        l[i] = (double)((float)l4[i][0] + (float)l4[i][1]) + (double)((float)l4[i][2] + (float)l4[i][3]);
        l[i] = R(c, l[i]);
    }
}

/* The epilogue: normalize, channel scale, LSE, the exact keys' merge, and the optional
 * outputs. */
TILE_STEP void tile_epilogue(sim_ctx *c, const tile_scratch *t, const task_rows *tr, const double *m,
                             const double *l, int want_tv, int64_t keys) {
    const vcattn_attention_params *p = c->p;
    const head_data *hd = &c->hd;
    const int64_t D = p->head_dim, Nout = c->n_out;
    for (int64_t i = 0; i < tr->nsel; ++i) {
        const int64_t row = tr->seq_row[i], orw = tr->out_row[i];
        float *out = p->o + c->b * p->o_stride[0] + c->h * p->o_stride[1] + orw * p->o_stride[2];
        double inv_l = 1.0 / l[i];
        int finite = l[i] > 0.0 && isfinite(inv_l);
        float lse = 0.0f;
        if (p->lse || hd->n_exact) {
            /* K smoothing shifted every score of the row by -q.mean(k): add it back */
            const float *q = vc_row(p->q, p->q_stride, c->b, c->h, row);
            double qk = 0.0;
            for (int64_t d = 0; d < D; ++d) qk += (double)q[d] * hd->kmean[d];
            double lse2 = m[i] + log2(l[i]) - c->lse_log2_bias;
            lse = (float)(lse2 * LN2 + qk * vc_softmax_scale(p));
            /* K smoothing keeps the scores in range while q.mean(k) itself may not be:
             * an LSE beyond FP32 is refused like an output */
            finite &= isfinite(lse);
        }
        /* the exact keys: the quantized pass's output and LSE merged with theirs */
        vc_exact_merge mg = {1.0f, 0.0f, lse};
        float u[128];
        if (hd->n_exact) {
            float m2, lx;
            finite &= vc_sim_exact_keys_part(c, row, &m2, &lx, u);
            mg = vc_exact_merge_of(lse, m2, lx);
            finite &= isfinite(mg.lse);
        }
        for (int64_t d = 0; d < D; ++d) {
            const float oq = (float)(t->o[i * D + d] * inv_l * hd->chan_scale[d]);
            out[d] = hd->n_exact ? vc_exact_merge_out(mg, oq, u[d]) : oq;
            finite &= isfinite(out[d]);
        }
        if (!finite) atomic_store(&c->overflow, 1); /* never garbage silently */
        if (c->extra && c->extra->o_f64) {
            double *od = c->extra->o_f64 + ((c->b * p->heads + c->h) * Nout + orw) * D;
            for (int64_t d = 0; d < D; ++d) {
                const double oq = t->o[i * D + d] * inv_l * hd->chan_scale[d];
                od[d] = hd->n_exact ? (double)mg.w_q * oq + (double)mg.w_e * u[d] : oq;
            }
        }
        if (c->extra && c->extra->o_pq_v) {
            /* the exact keys' P and V are exact: their part is u */
            float *oe = c->extra->o_pq_v + ((c->b * p->heads + c->h) * Nout + orw) * D;
            const double vs = ldexp(1.0, hd->ve_shift);
            int oe_finite = 1;
            for (int64_t d = 0; d < D; ++d) {
                const float oq = (float)(t->oe[i * D + d] * inv_l * vs);
                oe[d] = hd->n_exact ? vc_exact_merge_out(mg, oq, u[d]) : oq;
                oe_finite &= isfinite(oe[d]);
            }
            /* P_q V beyond FP32 (V within a few percent of FLT_MAX): refused like o */
            if (!oe_finite) atomic_store(&c->overflow, 1);
        }
        if (p->lse) p->lse[(c->b * p->heads + c->h) * Nout + orw] = mg.lse;
        if (want_tv && orw % c->extra->tv_row_stride == 0) {
            /* ceil(Nout / stride) without Nout + stride, which overflows for a huge stride */
            int64_t nsamp = (Nout - 1) / c->extra->tv_row_stride + 1;
            c->extra->row_tv[(c->b * p->heads + c->h) * nsamp + orw / c->extra->tv_row_stride] =
                row_total_variation(c, row, t->pstore + i * keys, t->mstore + i * hd->nblk, m[i], l[i]);
        }
    }
}

VC_HOT_LOOPS void vc_sim_tile_task(void *vctx, int64_t task, int worker) {
    sim_ctx *c = (sim_ctx *)vctx;
    const vcattn_method_config *cfg = c->cfg;
    const head_data *hd = &c->hd;
    const int64_t D = c->p->head_dim, Skv = c->skv;
    task_rows tr;
    task_rows_select(c, task, &tr);
    const int64_t nsel = tr.nsel;
    const int want_tv = c->extra && c->extra->row_tv;
    tile_scratch t = tile_scratch_carve(c->scratch[worker], D, hd->nblk, want_tv, c->task_sources);
    int64_t keys = hd->nblk * VC_BLOCK_K;
    float qscale[VC_TILE_Q];
    task_load_q(c, &tr, &t, keys, qscale);

    double m[VC_TILE_Q], l[VC_TILE_Q], cq[VC_TILE_Q];
    const float descent = vc_blockmax_descent(hd->nblk);
    /* The quantized pipeline follows the kernel (src/cuda/attention/).
     * Grouped: each block's row sum r of the quantized P is one sum, l is
     * folded with it, and the mean terms of blocks 8g..8g+7 (split(c_b) mu_b)
     * ride together in block 8g+8's P V accumulator.  Single (NVFP4 P,
     * no kernel): r comes in 4 partials r_t (the 32 keys of quad thread t, two
     * 16-key tensor-core sums), l is kept as 4 partials summed
     * (l0 + l1) + (l2 + l3) at the end, and block kb-1's term rides in block
     * kb's accumulator.  The last block's term goes into O after the last
     * fold. */
    const int quad = c->fp32_pipeline && cfg->rowsum_from_quantized_p;
    const int group_floor = quad && c->restore_group && cfg->p_scale == VCATTN_P_SCALE_BLOCK_MAX &&
                            vc_blockmax_needs_group_floor(vc_blockmax_descent(hd->nblk));
    double l4[VC_TILE_Q][4];
    mean_pending pend[VC_TILE_Q];
    const double *mu_prev = NULL;
    for (int64_t i = 0; i < nsel; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0;
        cq[i] = R(c, (double)c->sml2e * qscale[i]);
        for (int q = 0; q < 4; ++q) l4[i][q] = pend[i].rprev[q] = 0.0;
        for (int s = 0; s < VC_RESTORE_GROUP; ++s) pend[i].coef[s] = 0.0f;
        pend[i].rlast = 0.0;
        pend[i].G = 0.0f;
        pend[i].mu_prev = NULL;
    }
    memset(t.o, 0, sizeof(double) * (size_t)(128 * D));
    memset(t.oe, 0, sizeof(double) * (size_t)(128 * D));

    for (int64_t kb = 0; kb < hd->nblk; ++kb) {
        const int64_t j0 = kb * VC_BLOCK_K;
        const int64_t nvalid = Skv - j0 < VC_BLOCK_K ? Skv - j0 : VC_BLOCK_K;
        const float *kt = hd->kt + kb * D * VC_BLOCK_K;
        const float *ks = hd->kscale + j0;
        const double *vq = hd->vq + j0 * D, *mu = hd->mu + kb * D;
        const float *vqf = hd->vqf + j0 * D, *ve = hd->vexact + j0 * D;

        block_scores(c, &t, nsel, kt);

        for (int64_t i = 0; i < nsel; ++i) {
            double tt[VC_BLOCK_K], cc[VC_BLOCK_K], sd[VC_BLOCK_K], rowmax;
            if (!row_scores(c, t.s + i * VC_BLOCK_K, t.delta + tr.src[i] * keys + j0, cq[i], ks, nvalid, tt, cc,
                            sd, &rowmax)) {
                /* finite inputs whose scores overflow FP32: no answer */
                atomic_store(&c->overflow, 1);
                return;
            }
            const double bmax = R(c, rowmax - c->p_log2_offset);
            double m_new;
            if (cfg->p_scale == VCATTN_P_SCALE_BLOCK_MAX) {
                /* numerics.h: the block's own max, falling at most d per block
                 * (FP32, as the kernel) */
                m_new = vc_blockmax_scale((float)m[i], descent, (float)bmax);
                if (group_floor) {
                    /* the grouped restore's floor in the blocks a group rides in */
                    const int opens = kb % VC_RESTORE_GROUP == 0;
                    if ((opens && kb >= VC_RESTORE_GROUP) || (kb == hd->nblk - 1 && kb >= 1))
                        m_new = vc_blockmax_group_floor((float)m_new, pend[i].G);
                    pend[i].G = opens ? (float)m_new : fmaxf(pend[i].G, (float)m_new);
                }
            } else {
                m_new = fmax(m[i], bmax);
            }
            double alpha = m[i] == -INFINITY ? 0.0 : R(c, exp2(R(c, m[i] - m_new)));
            double *pq = t.pq;
            double lsum = row_p(c, tt, cc, sd, nvalid, m_new, pq);
            double rt[4] = {0.0, 0.0, 0.0, 0.0};
            double r = row_sum_fold(c, pq, nvalid, alpha, lsum, quad && !c->restore_group, l4[i], &l[i], rt);
            pend[i].mu_prev = mu_prev;
            row_pv_fold(c, &t, i, kb, pq, nvalid, alpha, r, vq, vqf, ve, mu, quad, &pend[i], rt);
            if (want_tv) {
                float *ps = t.pstore + i * keys;
                for (int64_t j = 0; j < nvalid; ++j) ps[j0 + j] = (float)pq[j];
                t.mstore[i * hd->nblk + kb] = m_new;
            }
            m[i] = m_new;
        }
        mu_prev = mu;
    }
    if (quad) quad_finish(c, &t, nsel, mu_prev, pend, l4, l);

    tile_epilogue(c, &t, &tr, m, l, want_tv, keys);
}
