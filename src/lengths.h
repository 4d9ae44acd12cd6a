/* lengths.h - per-batch valid lengths (q_lens / kv_lens, include/vcattn.h "Valid lengths"):
 * their check, shared by the CPU calls and the GPU entry points (C linkage for api.cu). */
#ifndef VCATTN_LENGTHS_H
#define VCATTN_LENGTHS_H

#include <stdint.h>

#include "vcattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* INVALID_ARGUMENT unless every q_lens[b] is in [0, seq_q] and kv_lens[b] in [0, seq_kv]
 * (either array may be NULL: the whole axis). */
vcattn_status vc_lengths_validate(int64_t batch, int64_t seq_q, int64_t seq_kv, const int64_t *q_lens,
                                  const int64_t *kv_lens);

/* Batch element b's valid rows (0 when it has no valid key: no row attends to anything)
 * and keys. */
static inline int64_t vc_kv_len(const int64_t *kv_lens, int64_t seq_kv, int64_t b) {
    return kv_lens ? kv_lens[b] : seq_kv;
}
static inline int64_t vc_q_len(const int64_t *q_lens, const int64_t *kv_lens, int64_t seq_q, int64_t seq_kv,
                               int64_t b) {
    return vc_kv_len(kv_lens, seq_kv, b) == 0 ? 0 : q_lens ? q_lens[b] : seq_q;
}

#ifdef __cplusplus
}
#endif

#endif
