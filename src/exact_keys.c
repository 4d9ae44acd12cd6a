/* exact_keys.c - the CPU side of the exact keys (src/exact_keys.h): which tokens of a head
 * skip quantization, and the permutation that carries them at its end.  The GPU builds the
 * same order (src/cuda/exact_keys.cu); gpu_check compares the two. */
#include <stdlib.h>
#include <string.h>

#include "exact_keys.h"
#include "internal.h"
#include "vcattn_research.h"

void vc_exact_keys_order(const float *v, int64_t v_row_stride, int64_t skv, int64_t D, const int32_t *perm,
                         int n, float *norm, int32_t *out) {
    for (int64_t t = 0; t < skv; ++t) {
        const float *row = v + t * v_row_stride;
        float acc = 0.0f;
        for (int64_t d = 0; d < D; ++d) acc = vc_exact_key_norm_step(acc, row[d]);
        norm[t] = vc_exact_key_rank_norm(acc);
    }
    /* n rounds of the largest remaining: the picked are marked below every norm */
    for (int r = 0; r < n; ++r) {
        int32_t best = 0;
        for (int32_t t = 1; t < (int32_t)skv; ++t)
            if (vc_exact_key_before(norm[t], t, norm[best], best)) best = t;
        norm[best] = VC_EXACT_KEY_PICKED;
    }
    /* a stable partition of the order: the quantized keys first, the exact keys last */
    int64_t head = 0, tail = skv - n;
    for (int64_t j = 0; j < skv; ++j) {
        const int32_t t = perm ? perm[j] : (int32_t)j;
        if (norm[t] == VC_EXACT_KEY_PICKED) out[tail++] = t;
        else out[head++] = t;
    }
}

vcattn_status vcattn_exact_keys_permutation(const vcattn_method_config *config, int64_t batch, int64_t heads,
                                            int64_t seq_kv, int64_t head_dim, const float *v, const int32_t *perm,
                                            int32_t *out, int *n_exact) {
    if (!config || !v || !out || !n_exact) return VCATTN_STATUS_NULL_POINTER;
    if (batch <= 0 || heads <= 0 || seq_kv <= 0 || head_dim <= 0) return VCATTN_STATUS_BAD_SHAPE;
    if (seq_kv > INT32_MAX) return VCATTN_STATUS_SIZE_OVERFLOW;
    if (config->exact_keys < 0 || config->exact_keys > VC_EXACT_KEYS_MAX) return VCATTN_STATUS_INVALID_ARGUMENT;
    const int n = vc_exact_keys_count(config->exact_keys, config->v_smooth, seq_kv);
    float *norm = (float *)malloc(sizeof(float) * (size_t)seq_kv);
    if (!norm) return VCATTN_STATUS_OUT_OF_MEMORY;
    for (int64_t bh = 0; perm && bh < batch * heads; ++bh) /* the norms' buffer as scratch */
        if (!vc_perm_is_valid(perm + bh * seq_kv, seq_kv, (unsigned char *)norm)) {
            free(norm);
            return VCATTN_STATUS_INVALID_ARGUMENT;
        }
    *n_exact = n;
    for (int64_t bh = 0; bh < batch * heads; ++bh)
        vc_exact_keys_order(v + bh * seq_kv * head_dim, head_dim, seq_kv, head_dim,
                            perm ? perm + bh * seq_kv : NULL, n, norm, out + bh * seq_kv);
    free(norm);
    return VCATTN_STATUS_SUCCESS;
}
