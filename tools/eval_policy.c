/* eval_policy.c - `vcattn eval --policy`: one head's per-head recipes (eval_policy.h). */
#include "eval_policy.h"

#include <string.h>

enum { CHUNK = 8 }; /* batch items measured at a time: the measurement's buffers stay small */

vcattn_status vc_eval_head_recipes(const vcattn_attention_params *p, vcattn_method method, const int32_t *perm,
                                   const int64_t *rows, int64_t n_rows, const int64_t *rows2, int64_t n_rows2,
                                   vcattn_head_policy policy, double margin_db, double stderrs, uint8_t *recipe,
                                   double *gain, double *stderr_db, uint8_t *rechecked) {
    vcattn_status st = VCATTN_STATUS_SUCCESS;
    for (int64_t b0 = 0; b0 < p->batch && !st; b0 += CHUNK) {
        const int64_t nb = p->batch - b0 < CHUNK ? p->batch - b0 : CHUNK;
        const int32_t *order = perm + b0 * p->seq_kv;
        vcattn_attention_params pb = *p;
        pb.batch = nb;
        pb.q = p->q + b0 * p->q_stride[0];
        pb.k = p->k + b0 * p->k_stride[0];
        pb.v = p->v + b0 * p->v_stride[0];
        double ps[CHUNK * VCATTN_RECIPE_COUNT], se[CHUNK * VCATTN_RECIPE_COUNT], fl[CHUNK];
        uint8_t *rec = recipe + b0, reached[CHUNK];
        memset(rechecked + b0, 0, (size_t)nb);
        st = vcattn_head_recipes_measure(&pb, method, order, rows, n_rows, ps, se, fl);
        if (!st) st = vcattn_head_recipes_choose(policy, nb, ps, se, fl, margin_db, stderrs, rec);
        int64_t again = 0;
        if (!st && n_rows2 && policy == VCATTN_HEAD_POLICY_FLOOR) {
            st = vcattn_head_recipes_reached(nb, 1, ps, se, fl, margin_db, stderrs, reached);
            for (int64_t b = 0; b < nb && !st; ++b) again += !reached[b];
        }
        if (!st && again) { /* the second measurement; those items take its choice */
            double ps2[CHUNK * VCATTN_RECIPE_COUNT], se2[CHUNK * VCATTN_RECIPE_COUNT], fl2[CHUNK];
            uint8_t rec2[CHUNK];
            st = vcattn_head_recipes_measure(&pb, method, order, rows2, n_rows2, ps2, se2, fl2);
            if (!st) st = vcattn_head_recipes_choose(policy, nb, ps2, se2, fl2, margin_db, stderrs, rec2);
            for (int64_t b = 0; b < nb && !st; ++b) {
                if (reached[b]) continue;
                rec[b] = rec2[b];
                rechecked[b0 + b] = 1;
                memcpy(ps + b * VCATTN_RECIPE_COUNT, ps2 + b * VCATTN_RECIPE_COUNT, sizeof(double) * VCATTN_RECIPE_COUNT);
                memcpy(se + b * VCATTN_RECIPE_COUNT, se2 + b * VCATTN_RECIPE_COUNT, sizeof(double) * VCATTN_RECIPE_COUNT);
                fl[b] = fl2[b];
            }
        }
        for (int64_t b = 0; b < nb && !st; ++b) {
            gain[b0 + b] = ps[b * VCATTN_RECIPE_COUNT + rec[b]] - fl[b];
            stderr_db[b0 + b] = se[b * VCATTN_RECIPE_COUNT + rec[b]];
        }
    }
    return st;
}
