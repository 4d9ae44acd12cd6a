/* codecs.c - the shared numerics exported element-wise, for bindings and tests. */
#include <stdlib.h>

#include "numerics.h"
#include "vcattn.h"
#include "vcattn_research.h"

#define CHECK_ARRAYS(a, b, n)                                                          \
    do {                                                                               \
        if ((n) < 0) return VCATTN_STATUS_BAD_SHAPE;                                   \
        if ((n) > 0 && (!(a) || !(b))) return VCATTN_STATUS_NULL_POINTER;              \
    } while (0)

vcattn_status vcattn_encode_e4m3(const float *x, uint8_t *codes, int64_t n) {
    CHECK_ARRAYS(x, codes, n);
    for (int64_t i = 0; i < n; ++i) codes[i] = vc_e4m3_encode(x[i]);
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_decode_e4m3(const uint8_t *codes, float *x, int64_t n) {
    CHECK_ARRAYS(codes, x, n);
    for (int64_t i = 0; i < n; ++i) x[i] = vc_e4m3_decode(codes[i]);
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_encode_e2m1(const float *x, uint8_t *codes, int64_t n) {
    CHECK_ARRAYS(x, codes, n);
    for (int64_t i = 0; i < n; ++i) codes[i] = vc_e2m1_encode(x[i]);
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_decode_e2m1(const uint8_t *codes, float *x, int64_t n) {
    CHECK_ARRAYS(codes, x, n);
    for (int64_t i = 0; i < n; ++i) x[i] = vc_e2m1_decode(codes[i]);
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_round_bf16(const float *x, float *y, int64_t n) {
    CHECK_ARRAYS(x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = vc_bf16_round(x[i]);
    return VCATTN_STATUS_SUCCESS;
}

void vcattn_free(void *ptr) { free(ptr); }
