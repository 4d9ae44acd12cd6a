/* params.c - the attention parameters every CPU call takes: validation,
 * contiguous initialisation, the softmax scale, and the query-row lists of the
 * sampled (*_rows) calls. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lengths.h"

/* The most threads a call takes (num_threads above it is INVALID_ARGUMENT
 * before anything is allocated: each worker has its own scratch, and
 * num_threads = 100000 used to end in OUT_OF_MEMORY).  tools/cli_parse.h's
 * VC_EVAL_MAX_THREADS is the same number. */
#define VC_MAX_THREADS 1024

vcattn_status vcattn_attention_params_validate(const vcattn_attention_params *p) {
    if (!p) return VCATTN_STATUS_NULL_POINTER;
    /* a size of 0 first: an empty tensor's data pointer may well be NULL (torch)
     * and its strides 0, and neither is the cause */
    if (p->batch <= 0 || p->heads <= 0 || p->seq_q <= 0 || p->seq_kv <= 0 || p->head_dim <= 0)
        return VCATTN_STATUS_BAD_SHAPE;
    if (!p->q || !p->k || !p->v || !p->o) return VCATTN_STATUS_NULL_POINTER;
    if (p->num_threads < 0 || p->num_threads > VC_MAX_THREADS) return VCATTN_STATUS_INVALID_ARGUMENT;
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
    return vc_lengths_validate(p->batch, p->seq_q, p->seq_kv, p->q_lens, p->kv_lens);
}

static void set_contiguous(int64_t stride[3], int64_t heads, int64_t seq, int64_t dim) {
    vc_contiguous_strides(heads, seq, dim, stride); /* no overflow for any sizes */
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
    p->q_lens = p->kv_lens = NULL;
}

double vc_softmax_scale(const vcattn_attention_params *p) {
    return p->softmax_scale > 0.0 ? p->softmax_scale : 1.0 / sqrt((double)p->head_dim);
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
    if (p->q_lens || p->kv_lens) return VCATTN_STATUS_INVALID_ARGUMENT; /* rows index the full axis */
    if (n_rows < 1 || n_rows > p->seq_q) return VCATTN_STATUS_INVALID_ARGUMENT;
    for (int64_t i = 0; i < n_rows; ++i)
        if (rows[i] < 0 || rows[i] >= p->seq_q || (i > 0 && rows[i] <= rows[i - 1]))
            return VCATTN_STATUS_INVALID_ARGUMENT;
    return vc_check_strides(p->batch, p->heads, n_rows, p->head_dim, p->o_stride);
}

vcattn_status vcattn_strided_rows(int64_t seq_q, int64_t n_rows, int64_t *rows) {
    if (!rows) return VCATTN_STATUS_NULL_POINTER;
    if (seq_q < 1 || n_rows < 1 || n_rows > seq_q) return VCATTN_STATUS_INVALID_ARGUMENT;
    /* the attention calls refuse seq_q > INT32_MAX, so i * seq_q < 2^62 fits */
    if (seq_q > INT32_MAX) return VCATTN_STATUS_SIZE_OVERFLOW;
    for (int64_t i = 0; i < n_rows; ++i) rows[i] = i * seq_q / n_rows;
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_stratified_rows(int64_t seq_q, int64_t n_rows, int64_t *rows) {
    if (!rows) return VCATTN_STATUS_NULL_POINTER;
    if (seq_q < 1 || n_rows < 1 || n_rows > seq_q) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (seq_q > INT32_MAX) return VCATTN_STATUS_SIZE_OVERFLOW;
    for (int64_t i = 0; i < n_rows; ++i) {
        const int64_t lo = i * seq_q / n_rows, len = (i + 1) * seq_q / n_rows - lo; /* len >= 1 */
        /* the offset's modulo bias is below len / 2^64: nothing a sample of rows could see */
        rows[i] = lo + (int64_t)(vc_mix64((uint64_t)i + 0x9E3779B97F4A7C15ull) % (uint64_t)len);
    }
    return VCATTN_STATUS_SUCCESS;
}
