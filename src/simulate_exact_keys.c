/* simulate_exact_keys.c - the simulation's side of the exact keys (src/exact_keys.h): one
 * row's FP32 attention over its head's exact keys, which the tile epilogue merges with the
 * quantized pass (simulate_tile.c); the GPU's is src/cuda/exact_keys.cu. */
#include <math.h>

#include "exact_keys.h"
#include "simulate_internal.h"

/* simulate_internal.h has the contract. */
int vc_sim_exact_keys_part(const sim_ctx *c, int64_t row, float *m2, float *l, float *u) {
    const vcattn_attention_params *p = c->p;
    const head_data *hd = &c->hd;
    const int64_t D = p->head_dim;
    const float *q = vc_row(p->q, p->q_stride, c->b, c->h, row);
    const float c0 = (float)c->sml2e;
    float s[VC_EXACT_KEYS_MAX], mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < hd->n_exact; ++j) {
        const float *k = vc_row(p->k, p->k_stride, c->b, c->h, hd->exact_tok[j]);
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot = fmaf(q[d], k[d], dot);
        s[j] = dot * c0;
        mx = fmaxf(mx, s[j]);
    }
    for (int64_t d = 0; d < D; ++d) u[d] = 0.0f;
    for (int j = 0; j < hd->n_exact; ++j) {
        const float pj = exp2f(s[j] - mx);
        const float *v = vc_row(p->v, p->v_stride, c->b, c->h, hd->exact_tok[j]);
        sum += pj;
        for (int64_t d = 0; d < D; ++d) u[d] = fmaf(pj, v[d], u[d]);
    }
    *m2 = mx;
    *l = sum;
    int finite = isfinite(mx) && isfinite(sum);
    for (int64_t d = 0; d < D; ++d) finite &= isfinite(u[d]);
    return finite;
}
