/* metrics.c - fidelity against the reference, and the error budget of eq. (2). */
#include <math.h>

#include "vcattn.h"
#include "vcattn_research.h"

vcattn_status vcattn_fidelity_compare(const float *ref, const float *out, int64_t n,
                                      vcattn_fidelity *f) {
    if (!ref || !out || !f) return VCATTN_STATUS_NULL_POINTER;
    if (n <= 0) return VCATTN_STATUS_BAD_SHAPE;
    double err2 = 0.0, ref2 = 0.0, out2 = 0.0, dot = 0.0, peak = 0.0, max_err = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double r = ref[i], o = out[i], e = o - r;
        if (!isfinite(r) || !isfinite(o)) return VCATTN_STATUS_NON_FINITE;
        err2 += e * e;
        ref2 += r * r;
        out2 += o * o;
        dot += r * o;
        if (fabs(r) > peak) peak = fabs(r);
        if (fabs(e) > max_err) max_err = fabs(e);
    }
    f->rel_l2 = ref2 > 0.0 ? sqrt(err2 / ref2) : (err2 > 0.0 ? INFINITY : 0.0);
    f->cosine = ref2 > 0.0 && out2 > 0.0 ? dot / sqrt(ref2 * out2) : (ref2 == out2 ? 1.0 : 0.0);
    double rmse = sqrt(err2 / (double)n);
    f->psnr_db = rmse > 0.0 ? 20.0 * log10(peak / rmse) : INFINITY;
    f->max_abs_error = max_err;
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_error_budget_compute(const float *ref, const float *out, const float *pq_v,
                                          int64_t n, vcattn_error_budget *b) {
    if (!ref || !out || !pq_v || !b) return VCATTN_STATUS_NULL_POINTER;
    if (n <= 0) return VCATTN_STATUS_BAD_SHAPE;
    double ref2 = 0.0, val2 = 0.0, prob2 = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double r = ref[i], o = out[i], e = pq_v[i];
        if (!isfinite(r) || !isfinite(o) || !isfinite(e)) return VCATTN_STATUS_NON_FINITE;
        ref2 += r * r;
        val2 += (e - o) * (e - o);   /* P_q (V - V_q) */
        prob2 += (r - e) * (r - e);  /* (P - P_q) V */
    }
    double denom = ref2 > 0.0 ? sqrt(ref2) : 1.0;
    b->value_rel_l2 = sqrt(val2) / denom;
    b->probability_rel_l2 = sqrt(prob2) / denom;
    b->value_share = val2 + prob2 > 0.0 ? val2 / (val2 + prob2) : 0.0;
    return VCATTN_STATUS_SUCCESS;
}
