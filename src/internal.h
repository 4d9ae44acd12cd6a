/* internal.h - helpers shared by the library's C sources (not public). */
#ifndef VCATTN_INTERNAL_H
#define VCATTN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tiling.h"
#include "vcattn.h"


/* a * b into *out; 0 on int64 overflow (or a negative operand). */
static inline int vc_mul_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* splitmix64's finaliser: a bijective 64-bit mix, the library's one hash (the k-means streams,
 * the policy's row offsets). */
static inline uint64_t vc_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The strides of a contiguous (B, H, S, D) layout, {H*S*D, S*D, D}, for the
 * *_params_init calls: a product that overflows int64 (or has a negative
 * size in it) becomes INT64_MAX instead of undefined behaviour.  Validation
 * then refuses the call (BAD_SHAPE for the size, or SIZE_OVERFLOW), so such
 * a stride is never used. */
static inline void vc_contiguous_strides(int64_t heads, int64_t seq, int64_t dim, int64_t stride[3]) {
    int64_t sd, hsd;
    if (!vc_mul_i64(seq, dim, &sd)) sd = INT64_MAX;
    if (!vc_mul_i64(heads, sd, &hsd)) hsd = INT64_MAX;
    stride[0] = hsd;
    stride[1] = sd;
    stride[2] = dim;
}

/* Element count of a (B, H, S, D) tensor, with overflow checks, also against
 * the byte count of `elem_size`-byte elements. */
static inline vcattn_status vc_count4(int64_t b, int64_t h, int64_t s, int64_t d, size_t elem_size,
                                      int64_t *count) {
    if (b <= 0 || h <= 0 || s <= 0 || d <= 0) return VCATTN_STATUS_BAD_SHAPE;
    int64_t n;
    if (!vc_mul_i64(b, h, &n) || !vc_mul_i64(n, s, &n) || !vc_mul_i64(n, d, &n))
        return VCATTN_STATUS_SIZE_OVERFLOW;
    if ((uint64_t)n > SIZE_MAX / elem_size || (uint64_t)n > (uint64_t)INT64_MAX / elem_size)
        return VCATTN_STATUS_SIZE_OVERFLOW;
    *count = n;
    return VCATTN_STATUS_SUCCESS;
}

/* Validates (batch, head, seq) strides of a (B,H,S,D) view with contiguous
 * D: non-negative, rows of D elements do not overlap, and the largest offset
 * fits in int64. */
vcattn_status vc_check_strides(int64_t b, int64_t h, int64_t s, int64_t d, const int64_t stride[3]);

/* Runs fn(ctx, i) for i in [0, n) on up to `threads` threads (0: all cores),
 * handing out indices dynamically.  Returns 0 on success, -1 if threads
 * could not be created (then nothing ran on them and the caller may retry). */
typedef void (*vc_task_fn)(void *ctx, int64_t index, int worker);
int vc_parallel_for(int64_t n, int threads, vc_task_fn fn, void *ctx);
/* Workers vc_parallel_for will use for `threads` (resolves 0). */
int vc_thread_count(int threads);

/* Any NaN/Inf in a strided (B,H,S,D) view? */
int vc_has_non_finite(const float *x, int64_t b, int64_t h, int64_t s, int64_t d,
                      const int64_t stride[3]);

static inline const float *vc_row(const float *base, const int64_t stride[3], int64_t b, int64_t h,
                                  int64_t s) {
    return base + b * stride[0] + h * stride[1] + s * stride[2];
}

/* Hot CPU loops get an AVX2+FMA clone chosen at run time on x86-64 (the
 * baseline build stays portable); elsewhere this is empty. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define VC_HOT_LOOPS __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VC_HOT_LOOPS
#endif

/* With per-batch valid lengths (p->q_lens / p->kv_lens): run(sub, perm, head_exact, ctx) on
 * each batch element's unpadded problem (batch 1, its valid rows and keys, no lengths, a
 * contiguous LSE; perm cut to its valid keys, head_exact to its heads), then zeros and LSE
 * -inf for the rows past its length (lengths.c). */
typedef vcattn_status (*vc_batch_run)(const vcattn_attention_params *sub, const int32_t *perm,
                                      const uint8_t *head_exact, void *ctx);
vcattn_status vc_lengths_run(const vcattn_attention_params *p, const int32_t *perm, const uint8_t *head_exact,
                             vc_batch_run run, void *ctx);

/* 1/sqrt(head_dim) unless the caller set a positive scale. */
double vc_softmax_scale(const vcattn_attention_params *p);

/* The per-head Q multiplier g_h the workload generator uses for slice (b, h)
 * (1 when head_scale_min/max are 0); for tools that describe a workload. */
double vc_workload_head_scale(const vcattn_workload_params *p, int64_t b, int64_t h);
/* workload_sinks.c: slice (b, h)'s sink tokens and, in a sink head, their score (before RoPE);
 * g the head's Q scale, q_scale the Q std it multiplies */
#define VC_WORKLOAD_SINK_MAX_EXTRA 64 /* sink_extra_tokens bound */
void vc_workload_head_sinks(const vcattn_workload_params *p, int64_t b, int64_t h, int64_t seq, double g,
                            double q_scale, float *q, float *k, float *v);
/* The checks of the *_rows calls: p as vcattn_attention_params_validate, except
 * that o's strides describe (B, H, n_rows, D); rows strictly ascending in
 * [0, seq_q). */
/* Whether perm[0..n) is a permutation of 0..n-1; seen: n bytes of scratch. */
static inline int vc_perm_is_valid(const int32_t *perm, int64_t n, unsigned char *seen) {
    memset(seen, 0, (size_t)n);
    for (int64_t j = 0; j < n; ++j) {
        if (perm[j] < 0 || perm[j] >= n || seen[perm[j]]) return 0;
        seen[perm[j]] = 1;
    }
    return 1;
}

/* exact_keys.c: one head's order with its n exact keys (largest V norm) at the end, the rest
 * in the order of perm (NULL: sequence order); v: the head's first row, rows v_row_stride
 * apart; norm: skv floats of scratch; out: skv entries. */
void vc_exact_keys_order(const float *v, int64_t v_row_stride, int64_t skv, int64_t D, const int32_t *perm,
                         int n, float *norm, int32_t *out);

vcattn_status vc_rows_params_validate(const vcattn_attention_params *p, const int64_t *rows,
                                      int64_t n_rows);

#endif
