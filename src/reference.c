/* reference.c - exact attention on the CPU: FP64 scores, softmax and output.
 * The truth every method is measured against. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Work item: 32 query rows of one (batch, head). */
#define REF_ROWS 32

typedef struct {
    const vcattn_attention_params *p;
    double scale;
    const int64_t *rows; /* query rows to compute (NULL: all); output row i is rows[i] */
    int64_t n_out;       /* output rows per (batch, head): n_rows, or seq_q */
    int64_t row_tiles;
    double *scratch; /* per worker: REF_ROWS * Skv scores + REF_ROWS * D output */
    atomic_int overflow; /* a scaled score beyond FP64 (e.g. softmax_scale 1e300), or an LSE beyond FP32 */
} ref_ctx;

VC_HOT_LOOPS static void ref_task(void *vctx, int64_t index, int worker) {
    ref_ctx *c = (ref_ctx *)vctx;
    const vcattn_attention_params *p = c->p;
    const int64_t D = p->head_dim, Skv = p->seq_kv;
    int64_t bh = index / c->row_tiles, tile = index % c->row_tiles;
    int64_t b = bh / p->heads, h = bh % p->heads;
    /* r0..r1 index output rows; the query is row src(r) of the sequence */
    int64_t r0 = tile * REF_ROWS, r1 = r0 + REF_ROWS < c->n_out ? r0 + REF_ROWS : c->n_out;
    double *scores = c->scratch + (size_t)worker * (size_t)(REF_ROWS * (Skv + D));
    double *acc = scores + REF_ROWS * Skv;

    /* Q transposed, (d, row): the score loop runs the rows' sums side by
     * side (vectorized over rows), each row's sum still over d in order */
    double qt[128][REF_ROWS];
    memset(qt, 0, sizeof qt);
    for (int64_t r = r0; r < r1; ++r) {
        const float *q = vc_row(p->q, p->q_stride, b, h, c->rows ? c->rows[r] : r);
        for (int64_t d = 0; d < D; ++d) qt[d][r - r0] = (double)q[d] * c->scale;
    }
    double mx[REF_ROWS];
    for (int64_t r = 0; r < r1 - r0; ++r) mx[r] = -INFINITY;
    for (int64_t j = 0; j < Skv; ++j) {
        const float *k = vc_row(p->k, p->k_stride, b, h, j);
        double s[REF_ROWS] = {0.0};
        for (int64_t d = 0; d < D; ++d) {
            const double kv = (double)k[d];
            for (int64_t r = 0; r < REF_ROWS; ++r) s[r] += qt[d][r] * kv;
        }
        for (int64_t r = 0; r < r1 - r0; ++r) {
            scores[r * Skv + j] = s[r];
            if (s[r] > mx[r]) mx[r] = s[r];
        }
    }
    double sum[REF_ROWS];
    for (int64_t r = 0; r < r1 - r0; ++r) {
        double l = 0.0;
        for (int64_t j = 0; j < Skv; ++j) {
            double e = exp(scores[r * Skv + j] - mx[r]);
            scores[r * Skv + j] = e;
            l += e;
        }
        sum[r] = l;
        /* finite inputs, but a score beyond FP64: the max is +Inf (or a sum
         * met +Inf and -Inf) and the row would be NaN, so say so instead.
         * A score of -Inf alone is exact: that key's weight is 0. */
        if (!isfinite(l) || !isfinite(mx[r])) atomic_store(&c->overflow, 1);
        for (int64_t d = 0; d < D; ++d) acc[r * D + d] = 0.0;
    }
    for (int64_t j = 0; j < Skv; ++j) {
        const float *v = vc_row(p->v, p->v_stride, b, h, j);
        double vd[128];
        for (int64_t d = 0; d < D; ++d) vd[d] = (double)v[d];
        for (int64_t r = 0; r < r1 - r0; ++r) {
            double e = scores[r * Skv + j];
            double *a = acc + r * D;
            for (int64_t d = 0; d < D; ++d) a[d] += e * vd[d];
        }
    }
    for (int64_t r = r0; r < r1; ++r) {
        float *o = p->o + b * p->o_stride[0] + h * p->o_stride[1] + r * p->o_stride[2];
        double inv = 1.0 / sum[r - r0];
        for (int64_t d = 0; d < D; ++d) o[d] = (float)(acc[(r - r0) * D + d] * inv);
        if (p->lse) {
            const float lse = (float)(mx[r - r0] + log(sum[r - r0]));
            /* the LSE is about the row's max score: beyond FP32 it cannot be stored */
            if (!isfinite(lse)) atomic_store(&c->overflow, 1);
            p->lse[(b * p->heads + h) * c->n_out + r] = lse;
        }
    }
}

static vcattn_status reference_run(const vcattn_attention_params *p, const int64_t *rows,
                                   int64_t n_out) {
    if (vc_has_non_finite(p->q, p->batch, p->heads, p->seq_q, p->head_dim, p->q_stride) ||
        vc_has_non_finite(p->k, p->batch, p->heads, p->seq_kv, p->head_dim, p->k_stride) ||
        vc_has_non_finite(p->v, p->batch, p->heads, p->seq_kv, p->head_dim, p->v_stride))
        return VCATTN_STATUS_NON_FINITE;
    ref_ctx c;
    atomic_init(&c.overflow, 0);
    c.p = p;
    c.scale = vc_softmax_scale(p);
    c.rows = rows;
    c.n_out = n_out;
    c.row_tiles = (n_out + REF_ROWS - 1) / REF_ROWS;
    int workers = vc_thread_count(p->num_threads);
    int64_t per_worker;
    if (!vc_mul_i64(REF_ROWS, p->seq_kv + p->head_dim, &per_worker) ||
        (uint64_t)per_worker > SIZE_MAX / sizeof(double) / (uint64_t)workers)
        return VCATTN_STATUS_SIZE_OVERFLOW;
    c.scratch = (double *)malloc((size_t)per_worker * (size_t)workers * sizeof(double));
    if (!c.scratch) return VCATTN_STATUS_OUT_OF_MEMORY;
    vc_parallel_for(p->batch * p->heads * c.row_tiles, workers, ref_task, &c);
    free(c.scratch);
    return atomic_load(&c.overflow) ? VCATTN_STATUS_SCORE_OVERFLOW : VCATTN_STATUS_SUCCESS;
}

static vcattn_status reference_batch(const vcattn_attention_params *sub, const int32_t *perm,
                                     const uint8_t *head_exact, void *ctx) {
    (void)perm, (void)head_exact, (void)ctx;
    return reference_run(sub, NULL, sub->seq_q);
}

vcattn_status vcattn_reference_attention(const vcattn_attention_params *p) {
    vcattn_status st = vcattn_attention_params_validate(p);
    if (st) return st;
    if (p->q_lens || p->kv_lens) return vc_lengths_run(p, NULL, NULL, reference_batch, NULL);
    return reference_run(p, NULL, p->seq_q);
}

vcattn_status vcattn_reference_attention_rows(const vcattn_attention_params *p,
                                              const int64_t *rows, int64_t n_rows) {
    vcattn_status st = vc_rows_params_validate(p, rows, n_rows);
    if (st) return st;
    return reference_run(p, rows, n_rows);
}
