/* test_lengths.c - per-batch valid lengths (q_lens / kv_lens): each batch element is the
 * unpadded problem of its valid tokens bit for bit (reference and simulation, with a
 * permutation and exact-P heads), padded rows are zeros with LSE -inf, the padding's values
 * take no part (not even a NaN there), and lengths out of range are refused. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vcattn.h"

enum { LB = 4, LH = 2, LS = 300, LD = 64 };

typedef struct {
    float *q, *k, *v;
    int32_t *perm; /* (B, H, S): batch b's first kv_lens[b] entries permute 0..kv_lens[b]-1 */
} len_inputs;

static void len_make(len_inputs *in, const int64_t *kv_lens) {
    test_rng r = {test_seed()};
    const size_t n = (size_t)LB * LH * LS * LD;
    in->q = (float *)malloc(sizeof(float) * n);
    in->k = (float *)malloc(sizeof(float) * n);
    in->v = (float *)malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; ++i) {
        in->q[i] = (float)test_rng_normal(&r);
        in->k[i] = (float)(test_rng_normal(&r) + 0.5);
        in->v[i] = (float)(test_rng_normal(&r) * 2.0 + 1.0);
    }
    in->perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)(LB * LH * LS));
    for (int64_t bh = 0; bh < LB * LH; ++bh) {
        int32_t *p = in->perm + bh * LS;
        const int64_t n_valid = kv_lens[bh / LH];
        for (int64_t j = 0; j < LS; ++j) p[j] = (int32_t)j;
        for (int64_t j = n_valid - 1; j > 0; --j) { /* Fisher-Yates over the valid prefix */
            int64_t t = (int64_t)(test_rng_next(&r) % (uint64_t)(j + 1));
            int32_t x = p[j];
            p[j] = p[t];
            p[t] = x;
        }
    }
}

static void len_free(len_inputs *in) {
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->perm);
}

/* the call on batch b's valid tokens alone: (1, H, lq, lk) views of the padded tensors */
static void unpadded(vcattn_attention_params *u, const len_inputs *in, int64_t b, int64_t lq, int64_t lk, float *o,
                     float *lse) {
    const int64_t off = b * LH * LS * LD;
    vcattn_attention_params_init(u, 1, LH, lq, lk, LD, in->q + off, in->k + off, in->v + off, o);
    const int64_t st[3] = {LH * LS * LD, LS * LD, LD};
    memcpy(u->q_stride, st, sizeof st);
    memcpy(u->k_stride, st, sizeof st);
    memcpy(u->v_stride, st, sizeof st);
    u->lse = lse;
}

/* o (B, H, S, D) and lse (B, H, S) against each batch element's unpadded call: bit-identical
 * rows, zeros and -inf past the length. */
static void check_against_unpadded(const len_inputs *in, const int64_t *q_lens, const int64_t *kv_lens,
                                   const float *o, const float *lse, const vcattn_method_config *cfg,
                                   const uint8_t *exact) {
    float *ou = (float *)malloc(sizeof(float) * LH * LS * LD), *lu = (float *)malloc(sizeof(float) * LH * LS);
    int32_t *pu = (int32_t *)malloc(sizeof(int32_t) * LH * LS);
    for (int64_t b = 0; b < LB; ++b) {
        const int64_t lk = kv_lens[b], lq = lk == 0 ? 0 : q_lens[b];
        if (lq > 0) {
            vcattn_attention_params u;
            unpadded(&u, in, b, lq, lk, ou, lu);
            for (int64_t h = 0; h < LH; ++h)
                memcpy(pu + h * lk, in->perm + (b * LH + h) * LS, sizeof(int32_t) * (size_t)lk);
            if (cfg)
                CHECK_STATUS(vcattn_simulate_attention_heads(&u, cfg, pu, exact ? exact + b * LH : NULL, NULL, 0,
                                                             NULL),
                             VCATTN_STATUS_SUCCESS);
            else
                CHECK_STATUS(vcattn_reference_attention(&u), VCATTN_STATUS_SUCCESS);
        }
        for (int64_t h = 0; h < LH; ++h) {
            const float *ob = o + (b * LH + h) * LS * LD, *lb = lse + (b * LH + h) * LS;
            CHECK_MSG(lq == 0 || memcmp(ob, ou + h * lq * LD, sizeof(float) * (size_t)(lq * LD)) == 0,
                      "batch %lld head %lld: valid rows differ from the unpadded call", (long long)b, (long long)h);
            CHECK_MSG(lq == 0 || memcmp(lb, lu + h * lq, sizeof(float) * (size_t)lq) == 0,
                      "batch %lld head %lld: LSE differs from the unpadded call", (long long)b, (long long)h);
            int zero = 1, neg_inf = 1;
            for (int64_t i = lq * LD; i < LS * LD; ++i) zero &= ob[i] == 0.0f;
            for (int64_t i = lq; i < LS; ++i) neg_inf &= isinf(lb[i]) && lb[i] < 0;
            CHECK_MSG(zero && neg_inf, "batch %lld head %lld: rows past %lld not zero / -inf", (long long)b,
                      (long long)h, (long long)lq);
        }
    }
    free(ou);
    free(lu);
    free(pu);
}

/* ragged batch: full, length 1, not a multiple of 128 (joint: rows and keys), fully padded */
static const int64_t k_q_lens[LB] = {LS, 1, 173, LS};
static const int64_t k_kv_lens[LB] = {LS, 1, 173, 0};

TEST(lengths_simulation_and_reference_are_the_unpadded_calls) {
    len_inputs in;
    len_make(&in, k_kv_lens);
    /* the padding holds NaN: it must take no part */
    for (int64_t b = 0; b < LB; ++b)
        for (int64_t h = 0; h < LH; ++h)
            for (int64_t j = k_kv_lens[b]; j < LS; ++j) {
                in.k[((b * LH + h) * LS + j) * LD] = NAN;
                in.v[((b * LH + h) * LS + j) * LD + 3] = NAN;
            }
    const size_t n = (size_t)LB * LH * LS * LD;
    float *o = (float *)malloc(sizeof(float) * n), *lse = (float *)malloc(sizeof(float) * LB * LH * LS);
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, LB, LH, LS, LS, LD, in.q, in.k, in.v, o);
    p.q_lens = k_q_lens;
    p.kv_lens = k_kv_lens;
    p.lse = lse;
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
    check_against_unpadded(&in, k_q_lens, k_kv_lens, o, lse, NULL, NULL);
    const vcattn_method methods[] = {VCATTN_METHOD_SAGE2_8BIT, VCATTN_METHOD_VSMOOTH_8BIT,
                                     VCATTN_METHOD_VSMOOTH_SPLIT_BLOCKMAX_8BIT};
    const uint8_t exact[LB * LH] = {0, 1, 1, 0, 0, 1, 1, 1};
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; ++m) {
        vcattn_method_config cfg;
        CHECK_STATUS(vcattn_method_config_get(methods[m], &cfg), VCATTN_STATUS_SUCCESS);
        const uint8_t *ex = methods[m] == VCATTN_METHOD_SAGE2_8BIT ? NULL : exact;
        memset(o, 0x7f, sizeof(float) * n); /* poison: every row must be written */
        CHECK_STATUS(vcattn_simulate_attention_heads(&p, &cfg, in.perm, ex, NULL, 0, NULL), VCATTN_STATUS_SUCCESS);
        check_against_unpadded(&in, k_q_lens, k_kv_lens, o, lse, &cfg, ex);
    }
    free(o);
    free(lse);
    len_free(&in);
}

TEST(lengths_key_padding_keeps_every_row) {
    const int64_t kv[LB] = {200, LS, 129, 7};
    const int64_t q_all[LB] = {LS, LS, LS, LS};
    len_inputs in;
    len_make(&in, kv);
    const size_t n = (size_t)LB * LH * LS * LD;
    float *o = (float *)malloc(sizeof(float) * n), *lse = (float *)malloc(sizeof(float) * LB * LH * LS);
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, LB, LH, LS, LS, LD, in.q, in.k, in.v, o);
    p.kv_lens = kv; /* q_lens NULL: every row attends over the valid keys */
    p.lse = lse;
    vcattn_method_config cfg;
    CHECK_STATUS(vcattn_method_config_get(VCATTN_METHOD_VSMOOTH_SPLIT_BLOCKMAX_8BIT, &cfg), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, in.perm, NULL), VCATTN_STATUS_SUCCESS);
    check_against_unpadded(&in, q_all, kv, o, lse, &cfg, NULL);
    free(o);
    free(lse);
    len_free(&in);
}

TEST(lengths_refused_where_they_do_not_apply) {
    len_inputs in;
    len_make(&in, k_kv_lens);
    float *o = (float *)malloc(sizeof(float) * (size_t)LB * LH * LS * LD);
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, LB, LH, LS, LS, LD, in.q, in.k, in.v, o);
    vcattn_method_config cfg;
    CHECK_STATUS(vcattn_method_config_get(VCATTN_METHOD_VSMOOTH_8BIT, &cfg), VCATTN_STATUS_SUCCESS);
    const int64_t too_long[LB] = {LS, LS + 1, 3, 3}, negative[LB] = {LS, -1, 3, 3};
    p.kv_lens = too_long;
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_INVALID_ARGUMENT);
    p.kv_lens = NULL;
    p.q_lens = negative;
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, in.perm, NULL), VCATTN_STATUS_INVALID_ARGUMENT);
    p.q_lens = k_q_lens;
    p.kv_lens = k_kv_lens;
    int64_t rows[3];
    CHECK_STATUS(vcattn_strided_rows(LS, 3, rows), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_reference_attention_rows(&p, rows, 3), VCATTN_STATUS_INVALID_ARGUMENT);
    vcattn_sim_outputs extra;
    memset(&extra, 0, sizeof extra);
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, in.perm, &extra), VCATTN_STATUS_INVALID_ARGUMENT);
    /* a permutation whose valid prefix is not a permutation of 0..kv_len-1 */
    in.perm[2 * LH * LS + 5] = LS - 1; /* batch 2 (173 valid keys): points into the padding */
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, in.perm, NULL), VCATTN_STATUS_INVALID_ARGUMENT);
    free(o);
    len_free(&in);
}
