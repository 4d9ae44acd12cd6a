/* lengths.c - per-batch valid lengths on the CPU: every batch element runs as the unpadded
 * problem of its valid rows and keys (a batch-1 view of the caller's tensors), so its rows are
 * those of that problem bit for bit; the rows past its length become zeros with LSE -inf. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lengths.h"

vcattn_status vc_lengths_validate(int64_t batch, int64_t seq_q, int64_t seq_kv, const int64_t *q_lens,
                                  const int64_t *kv_lens) {
    if (!q_lens && !kv_lens) return VCATTN_STATUS_SUCCESS; /* nothing to read (batch may be huge) */
    for (int64_t b = 0; b < batch; ++b) {
        if (q_lens && (q_lens[b] < 0 || q_lens[b] > seq_q)) return VCATTN_STATUS_INVALID_ARGUMENT;
        if (kv_lens && (kv_lens[b] < 0 || kv_lens[b] > seq_kv)) return VCATTN_STATUS_INVALID_ARGUMENT;
    }
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vc_lengths_run(const vcattn_attention_params *p, const int32_t *perm, const uint8_t *head_exact,
                             vc_batch_run run, void *ctx) {
    const int64_t H = p->heads, Sq = p->seq_q, Skv = p->seq_kv, D = p->head_dim;
    /* the largest batch element's contiguous LSE and permutation (the sub-call writes and
     * reads them as (1, H, S) contiguous; the caller's are (B, H, S)) */
    float *lse = NULL;
    int32_t *sub_perm = NULL;
    if (p->lse && !(lse = (float *)malloc(sizeof(float) * (size_t)(H * Sq)))) return VCATTN_STATUS_OUT_OF_MEMORY;
    if (perm && !(sub_perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)(H * Skv)))) {
        free(lse);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    vcattn_status st = VCATTN_STATUS_SUCCESS;
    for (int64_t b = 0; b < p->batch && st == VCATTN_STATUS_SUCCESS; ++b) {
        const int64_t lk = vc_kv_len(p->kv_lens, Skv, b), lq = vc_q_len(p->q_lens, p->kv_lens, Sq, Skv, b);
        if (lq > 0) {
            vcattn_attention_params sub = *p;
            sub.batch = 1;
            sub.seq_q = lq;
            sub.seq_kv = lk;
            sub.q = p->q + b * p->q_stride[0];
            sub.k = p->k + b * p->k_stride[0];
            sub.v = p->v + b * p->v_stride[0];
            sub.o = p->o + b * p->o_stride[0];
            sub.lse = lse;
            sub.q_lens = sub.kv_lens = NULL;
            if (perm)
                for (int64_t h = 0; h < H; ++h)
                    memcpy(sub_perm + h * lk, perm + (b * H + h) * Skv, sizeof(int32_t) * (size_t)lk);
            st = run(&sub, perm ? sub_perm : NULL, head_exact ? head_exact + b * H : NULL, ctx);
            if (st) break;
            if (p->lse)
                for (int64_t h = 0; h < H; ++h)
                    memcpy(p->lse + (b * H + h) * Sq, lse + h * lq, sizeof(float) * (size_t)lq);
        }
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = lq; i < Sq; ++i) {
                memset(p->o + b * p->o_stride[0] + h * p->o_stride[1] + i * p->o_stride[2], 0,
                       sizeof(float) * (size_t)D);
                if (p->lse) p->lse[(b * H + h) * Sq + i] = -INFINITY;
            }
    }
    free(lse);
    free(sub_perm);
    return st;
}
