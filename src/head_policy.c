/* head_policy.c - the per-head recipes of a V-Smooth plan: measure every recipe of a
 * method on sampled query rows against the FP64 reference, and choose one per head.
 *
 * Why per head: the heads of one layer differ in what limits them (docs/fidelity-analysis.md,
 * "Heads that lose"): on sink heads the k-means order puts the sink tokens' keys into shared
 * INT8 quantization groups and the probability error grows, on peaked heads the split's
 * ExpCast keys are the error.  Measured on the rows, not predicted from a statistic: the
 * choice uses the same numerics the call will run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* recipe r beats recipe best (ties keep the lower, faster one) */
static int vc_better(const double *ps, int r, int best) { return best < 0 || ps[r] > ps[best]; }

static int vc_best_of(const double *ps, int lo, int hi) {
    int best = -1;
    for (int r = lo; r < hi; ++r)
        if (!isnan(ps[r]) && vc_better(ps, r, best)) best = r;
    return best;
}

void vcattn_head_policy_defaults(int64_t *rows, double *margin_db, double *stderrs) {
    if (rows) *rows = VCATTN_HEAD_POLICY_ROWS;
    if (margin_db) *margin_db = VCATTN_HEAD_POLICY_MARGIN_DB;
    if (stderrs) *stderrs = VCATTN_HEAD_POLICY_STDERRS;
}

/* Why a standard error and not a fixed margin: the rows' sampling error of a head's gain is
 * 0.03 dB on randn heads and 0.1-0.75 dB on video heads at 512 rows (a few rows of a sink
 * head carry most of its error), so one margin is 7 standard errors on the first and under
 * one on the second (docs/fidelity-analysis.md, "The measurement's error"). */
vcattn_status vcattn_head_gain_stderr(const double *host_err, const double *recipe_err, int64_t n,
                                      int64_t population, double *stderr_db) {
    if (!host_err || !recipe_err || !stderr_db) return VCATTN_STATUS_NULL_POINTER;
    if (n <= 0 || population < n) return VCATTN_STATUS_BAD_SHAPE;
    double sh = 0.0, sr = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        if (!(host_err[i] >= 0.0) || !(recipe_err[i] >= 0.0) || isinf(host_err[i]) || isinf(recipe_err[i]))
            return VCATTN_STATUS_INVALID_ARGUMENT;
        sh += host_err[i];
        sr += recipe_err[i];
    }
    if (n == population || sh == 0.0 || sr == 0.0) {
        *stderr_db = 0.0;
        return VCATTN_STATUS_SUCCESS;
    }
    if (n == 1) {
        *stderr_db = INFINITY;
        return VCATTN_STATUS_SUCCESS;
    }
    /* the ratio of sums R = sh / sr linearised: d_i = h_i - R r_i has mean 0, and
     * SE(R) / R = sqrt(var(d) n) / sh, times the finite population correction */
    const double ratio = sh / sr;
    double mean = 0.0, m2 = 0.0;
    for (int64_t i = 0; i < n; ++i) { /* Welford: the residuals are differences of near terms */
        const double d = host_err[i] - ratio * recipe_err[i], delta = d - mean;
        mean += delta / (double)(i + 1);
        m2 += delta * (d - mean);
    }
    const double var = m2 / (double)(n - 1), fpc = 1.0 - (double)n / (double)population;
    *stderr_db = 10.0 / log(10.0) * sqrt(var * (double)n * fpc) / sh;
    return VCATTN_STATUS_SUCCESS;
}

/* recipe c of a head reaches the FLOOR policy's floor: its gain over the host recipe clears the
 * margin and `stderrs` standard errors of itself */
static int vc_reaches_floor(const double *ps, const double *se, int c, double floor_db, double margin_db,
                            double stderrs) {
    const double doubt = (se && stderrs > 0.0) ? stderrs * se[c] : 0.0;
    return !isnan(ps[c]) && !isnan(doubt) && ps[c] >= floor_db + margin_db + doubt;
}

vcattn_status vcattn_head_recipes_reached(int64_t n_heads, int n_recipes, const double *psnr,
                                          const double *stderr_db, const double *floor_db, double margin_db,
                                          double stderrs, uint8_t *reached) {
    if (!psnr || !floor_db || !reached) return VCATTN_STATUS_NULL_POINTER;
    if (n_heads <= 0) return VCATTN_STATUS_BAD_SHAPE;
    if (n_recipes < 1 || n_recipes > VCATTN_RECIPE_COUNT || !isfinite(margin_db) || !isfinite(stderrs) ||
        stderrs < 0.0)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    for (int64_t h = 0; h < n_heads; ++h) {
        const double *ps = psnr + h * VCATTN_RECIPE_COUNT;
        const double *se = stderr_db ? stderr_db + h * VCATTN_RECIPE_COUNT : NULL;
        int any = 0;
        for (int c = 0; c < n_recipes && !any; ++c) any = vc_reaches_floor(ps, se, c, floor_db[h], margin_db, stderrs);
        reached[h] = (uint8_t)any;
    }
    return VCATTN_STATUS_SUCCESS;
}

/* Why 4x: the standard error of a gain falls as 1/sqrt(rows), so 4x rows halve it; the false
 * rejections seen (a refused split 1-2 dB better than sage2-8bit, standard errors 0.8-0.9 dB at
 * 512 rows: docs/fidelity-analysis.md) clear two halved standard errors.  The second measurement
 * covers only the heads that need it, so its cost is that of a few heads. */
int64_t vcattn_head_policy_recheck_rows(int64_t rows, int64_t seq_q) {
    if (rows < 1 || seq_q < 1 || rows >= seq_q) return 0;
    return rows > seq_q / 4 ? seq_q : 4 * rows;
}

vcattn_status vcattn_head_recipes_choose(vcattn_head_policy policy, int64_t n_heads, const double *psnr,
                                         const double *stderr_db, const double *floor_db, double margin_db,
                                         double stderrs, uint8_t *recipe) {
    if (!psnr || !recipe) return VCATTN_STATUS_NULL_POINTER;
    if (n_heads <= 0) return VCATTN_STATUS_BAD_SHAPE;
    if ((unsigned)policy >= VCATTN_HEAD_POLICY_COUNT || !isfinite(margin_db) || !isfinite(stderrs) || stderrs < 0.0)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (policy == VCATTN_HEAD_POLICY_FLOOR && !floor_db) return VCATTN_STATUS_NULL_POINTER;
    for (int64_t h = 0; h < n_heads; ++h) {
        const double *ps = psnr + h * VCATTN_RECIPE_COUNT;
        const double *se = stderr_db ? stderr_db + h * VCATTN_RECIPE_COUNT : NULL;
        /* the method's P (recipes 0, 1) is the fast kernel; the exact P (2, 3) the slower */
        const int fast = vc_best_of(ps, 0, VCATTN_RECIPE_EXACT_P);
        const int any = vc_best_of(ps, 0, VCATTN_RECIPE_COUNT);
        int r = any;
        if (policy == VCATTN_HEAD_POLICY_FASTEST) {
            r = fast;
        } else if (policy == VCATTN_HEAD_POLICY_FLOOR) {
            /* the first recipe in speed order that reaches the floor: the method as designed
             * (k-means, its P) whenever it does - a better-measured sequence order on a few
             * rows is not worth giving up the grouping for */
            for (int c = 0; c < VCATTN_RECIPE_COUNT; ++c) {
                if (vc_reaches_floor(ps, se, c, floor_db[h], margin_db, stderrs)) {
                    r = c;
                    break;
                }
            }
        }
        recipe[h] = (uint8_t)(r < 0 ? 0 : r); /* nothing measured: the method as it is */
    }
    return VCATTN_STATUS_SUCCESS;
}

/* PSNR per (batch, head) of out against ref, both (BH, n, D) contiguous (metrics.c's), and
 * each row's squared error (BH, n) */
static vcattn_status vc_psnr_heads(const float *ref, const float *out, int64_t bh, int64_t n, int64_t d, double *ps,
                                   int64_t stride, double *row_err) {
    for (int64_t i = 0; i < bh; ++i) {
        vcattn_fidelity f;
        vcattn_status st = vcattn_fidelity_compare(ref + i * n * d, out + i * n * d, n * d, &f);
        if (st) return st;
        ps[i * stride] = f.psnr_db;
        for (int64_t r = 0; r < n; ++r) {
            const float *a = ref + (i * n + r) * d, *b = out + (i * n + r) * d;
            double e = 0.0;
            for (int64_t j = 0; j < d; ++j) e += ((double)b[j] - a[j]) * ((double)b[j] - a[j]);
            row_err[i * n + r] = e;
        }
    }
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_head_recipes_measure(const vcattn_attention_params *p, vcattn_method method,
                                          const int32_t *perm, const int64_t *rows, int64_t n_rows,
                                          double *psnr, double *stderr_db, double *floor_db) {
    if (!p || !perm || !rows || !psnr || !floor_db) return VCATTN_STATUS_NULL_POINTER;
    vcattn_status st = vc_rows_params_validate(p, rows, n_rows);
    if (st) return st;
    vcattn_method_config cfg, exact, host;
    if ((st = vcattn_method_config_get(method, &cfg))) return st;
    if ((st = vcattn_method_exact_p(&cfg, &exact))) return st;
    if ((st = vcattn_method_config_get(VCATTN_METHOD_SAGE2_8BIT, &host))) return st;
    const int64_t bh = p->batch * p->heads, S = p->seq_kv, D = p->head_dim;
    int64_t n_out, n_perm, n_err;
    if (!vc_mul_i64(bh, n_rows * D, &n_out) || !vc_mul_i64(bh, S, &n_perm) || !vc_mul_i64(bh, n_rows, &n_err) ||
        (uint64_t)n_out > SIZE_MAX / sizeof(float) || (uint64_t)n_perm > SIZE_MAX / sizeof(int32_t) ||
        (uint64_t)n_err > SIZE_MAX / (2 * sizeof(double)))
        return VCATTN_STATUS_SIZE_OVERFLOW;
    float *ref = (float *)malloc(sizeof(float) * (size_t)n_out), *out = (float *)malloc(sizeof(float) * (size_t)n_out);
    int32_t *ident = (int32_t *)malloc(sizeof(int32_t) * (size_t)n_perm);
    uint8_t *all_exact = (uint8_t *)malloc((size_t)bh);
    double *host_err = (double *)malloc(sizeof(double) * 2 * (size_t)n_err), *rec_err = host_err + n_err;
    if (!ref || !out || !ident || !all_exact || !host_err) {
        free(ref);
        free(out);
        free(ident);
        free(all_exact);
        free(host_err);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < bh; ++i)
        for (int64_t s = 0; s < S; ++s) ident[i * S + s] = (int32_t)s;
    memset(all_exact, 1, (size_t)bh);
    /* outputs go to compact (BH, n_rows, D) buffers of our own */
    vcattn_attention_params q = *p;
    q.o_stride[0] = p->heads * n_rows * D;
    q.o_stride[1] = n_rows * D;
    q.o_stride[2] = D;
    q.lse = NULL;
    q.o = ref;
    st = vcattn_reference_attention_rows(&q, rows, n_rows);
    q.o = out;
    if (!st) st = vcattn_simulate_attention_rows(&q, &host, NULL, rows, n_rows, NULL);
    if (!st) st = vc_psnr_heads(ref, out, bh, n_rows, D, floor_db, 1, host_err);
    const int64_t population = p->seq_q > n_rows ? p->seq_q : n_rows; /* rows may repeat */
    for (int r = 0; r < VCATTN_RECIPE_COUNT && !st; ++r) {
        st = vcattn_simulate_attention_heads(&q, &cfg, (r & VCATTN_RECIPE_SEQUENCE) ? ident : perm,
                                             (r & VCATTN_RECIPE_EXACT_P) ? all_exact : NULL, rows, n_rows, NULL);
        if (!st) st = vc_psnr_heads(ref, out, bh, n_rows, D, psnr + r, VCATTN_RECIPE_COUNT, rec_err);
        for (int64_t i = 0; i < bh && !st && stderr_db; ++i)
            st = vcattn_head_gain_stderr(host_err + i * n_rows, rec_err + i * n_rows, n_rows, population,
                                         stderr_db + i * VCATTN_RECIPE_COUNT + r);
    }
    free(ref);
    free(out);
    free(ident);
    free(all_exact);
    free(host_err);
    return st;
}
