/* reference.c - exact attention on the CPU: FP64 scores, softmax and output.
 * The truth every method is measured against. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

vcattn_status vcattn_attention_params_validate(const vcattn_attention_params *p) {
    if (!p) return VCATTN_STATUS_NULL_POINTER;
    if (!p->q || !p->k || !p->v || !p->o) return VCATTN_STATUS_NULL_POINTER;
    if (p->batch <= 0 || p->heads <= 0 || p->seq_q <= 0 || p->seq_kv <= 0 || p->head_dim <= 0)
        return VCATTN_STATUS_BAD_SHAPE;
    if (p->head_dim != 64 && p->head_dim != 128) return VCATTN_STATUS_UNSUPPORTED_HEAD_DIM;
    if (p->seq_kv > INT32_MAX || p->seq_q > INT32_MAX) return VCATTN_STATUS_SIZE_OVERFLOW;
    int64_t n;
    vcattn_status st = vc_count4(p->batch, p->heads, p->seq_q, p->head_dim, sizeof(double), &n);
    if (st) return st;
    st = vc_count4(p->batch, p->heads, p->seq_kv, p->head_dim, sizeof(double), &n);
    if (st) return st;
    const int64_t *strides[4] = {p->q_stride, p->k_stride, p->v_stride, p->o_stride};
    const int64_t seqs[4] = {p->seq_q, p->seq_kv, p->seq_kv, p->seq_q};
    for (int i = 0; i < 4; ++i) {
        st = vc_check_strides(p->batch, p->heads, seqs[i], p->head_dim, strides[i]);
        if (st) return st;
    }
    if (!(p->softmax_scale <= 0.0 || isfinite(p->softmax_scale))) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->num_threads < 0) return VCATTN_STATUS_INVALID_ARGUMENT;
    return VCATTN_STATUS_SUCCESS;
}

static void set_contiguous(int64_t stride[3], int64_t heads, int64_t seq, int64_t dim) {
    stride[2] = dim;
    stride[1] = seq * dim;
    stride[0] = heads * seq * dim;
}

void vcattn_attention_params_init(vcattn_attention_params *p, int64_t batch, int64_t heads,
                                  int64_t seq_q, int64_t seq_kv, int64_t head_dim,
                                  const float *q, const float *k, const float *v, float *o) {
    if (!p) return;
    p->batch = batch;
    p->heads = heads;
    p->seq_q = seq_q;
    p->seq_kv = seq_kv;
    p->head_dim = head_dim;
    p->q = q;
    p->k = k;
    p->v = v;
    p->o = o;
    set_contiguous(p->q_stride, heads, seq_q, head_dim);
    set_contiguous(p->k_stride, heads, seq_kv, head_dim);
    set_contiguous(p->v_stride, heads, seq_kv, head_dim);
    set_contiguous(p->o_stride, heads, seq_q, head_dim);
    p->lse = NULL;
    p->softmax_scale = 0.0;
    p->num_threads = 0;
}

double vc_softmax_scale(const vcattn_attention_params *p) {
    return p->softmax_scale > 0.0 ? p->softmax_scale : 1.0 / sqrt((double)p->head_dim);
}

/* Work item: 32 query rows of one (batch, head). */
#define REF_ROWS 32

typedef struct {
    const vcattn_attention_params *p;
    double scale;
    const int64_t *rows; /* query rows to compute (NULL: all); output row i is rows[i] */
    int64_t n_out;       /* output rows per (batch, head): n_rows, or seq_q */
    int64_t row_tiles;
    double *scratch; /* per worker: REF_ROWS * Skv scores + REF_ROWS * D output */
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
        if (p->lse) p->lse[(b * p->heads + h) * c->n_out + r] = (float)(mx[r - r0] + log(sum[r - r0]));
    }
}

static vcattn_status reference_run(const vcattn_attention_params *p, const int64_t *rows,
                                   int64_t n_out) {
    if (vc_has_non_finite(p->q, p->batch, p->heads, p->seq_q, p->head_dim, p->q_stride) ||
        vc_has_non_finite(p->k, p->batch, p->heads, p->seq_kv, p->head_dim, p->k_stride) ||
        vc_has_non_finite(p->v, p->batch, p->heads, p->seq_kv, p->head_dim, p->v_stride))
        return VCATTN_STATUS_NON_FINITE;
    ref_ctx c;
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
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_reference_attention(const vcattn_attention_params *p) {
    vcattn_status st = vcattn_attention_params_validate(p);
    if (st) return st;
    return reference_run(p, NULL, p->seq_q);
}

vcattn_status vc_rows_params_validate(const vcattn_attention_params *p, const int64_t *rows,
                                      int64_t n_rows) {
    if (!p) return VCATTN_STATUS_NULL_POINTER;
    /* o holds n_rows rows per (batch, head), not seq_q: everything else is
     * checked as for the full call, o's strides against n_rows below */
    vcattn_attention_params full = *p;
    set_contiguous(full.o_stride, p->heads, p->seq_q, p->head_dim);
    vcattn_status st = vcattn_attention_params_validate(&full);
    if (st) return st;
    if (!rows) return VCATTN_STATUS_NULL_POINTER;
    if (n_rows < 1 || n_rows > p->seq_q) return VCATTN_STATUS_INVALID_ARGUMENT;
    for (int64_t i = 0; i < n_rows; ++i)
        if (rows[i] < 0 || rows[i] >= p->seq_q || (i > 0 && rows[i] <= rows[i - 1]))
            return VCATTN_STATUS_INVALID_ARGUMENT;
    return vc_check_strides(p->batch, p->heads, n_rows, p->head_dim, p->o_stride);
}

vcattn_status vcattn_reference_attention_rows(const vcattn_attention_params *p,
                                              const int64_t *rows, int64_t n_rows) {
    vcattn_status st = vc_rows_params_validate(p, rows, n_rows);
    if (st) return st;
    return reference_run(p, rows, n_rows);
}

vcattn_status vcattn_strided_rows(int64_t seq_q, int64_t n_rows, int64_t *rows) {
    if (!rows) return VCATTN_STATUS_NULL_POINTER;
    if (seq_q < 1 || n_rows < 1 || n_rows > seq_q) return VCATTN_STATUS_INVALID_ARGUMENT;
    /* the attention calls refuse seq_q > INT32_MAX, so i * seq_q < 2^62 fits */
    if (seq_q > INT32_MAX) return VCATTN_STATUS_SIZE_OVERFLOW;
    for (int64_t i = 0; i < n_rows; ++i) rows[i] = i * seq_q / n_rows;
    return VCATTN_STATUS_SUCCESS;
}
