/* checks.c - input checks every CPU call shares: strides of a (B, H, S, D)
 * view, and NaN/Inf in it. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"
vcattn_status vc_check_strides(int64_t b, int64_t h, int64_t s, int64_t d, const int64_t stride[3]) {
    /* an empty view is a shape error, whatever its strides (a zero-size
     * array has strides of 0, and "fix the strides" would not help) */
    if (b <= 0 || h <= 0 || s <= 0 || d <= 0) return VCATTN_STATUS_BAD_SHAPE;
    if (!stride) return VCATTN_STATUS_NULL_POINTER;
    int64_t dims[3] = {b, h, s};
    int64_t max_off = d - 1;
    for (int i = 0; i < 3; ++i) {
        if (stride[i] < 0) return VCATTN_STATUS_BAD_STRIDE;
        int64_t t;
        if (!vc_mul_i64(dims[i] - 1, stride[i], &t) || max_off > INT64_MAX - t)
            return VCATTN_STATUS_SIZE_OVERFLOW;
        max_off += t;
    }
    /* Rows must not overlap: order the axes of size > 1 by stride; each
     * must step over the whole extent of the axes inside it (this accepts
     * (B,H,S,D), (B,S,H,D) and any other permutation of the outer axes). */
    int64_t sd[3][2];
    int m = 0;
    for (int i = 0; i < 3; ++i)
        if (dims[i] > 1) { sd[m][0] = stride[i]; sd[m][1] = dims[i]; ++m; }
    for (int i = 1; i < m; ++i)
        for (int j = i; j > 0 && sd[j][0] < sd[j - 1][0]; --j) {
            int64_t t0 = sd[j][0], t1 = sd[j][1];
            sd[j][0] = sd[j - 1][0]; sd[j][1] = sd[j - 1][1];
            sd[j - 1][0] = t0; sd[j - 1][1] = t1;
        }
    int64_t extent = d;
    for (int i = 0; i < m; ++i) {
        if (sd[i][0] < extent) return VCATTN_STATUS_BAD_STRIDE;
        extent = (sd[i][1] - 1) * sd[i][0] + extent;
    }
    return VCATTN_STATUS_SUCCESS;
}

int vc_has_non_finite(const float *x, int64_t b, int64_t h, int64_t s, int64_t d,
                      const int64_t stride[3]) {
    for (int64_t ib = 0; ib < b; ++ib)
        for (int64_t ih = 0; ih < h; ++ih)
            for (int64_t is = 0; is < s; ++is) {
                const float *row = vc_row(x, stride, ib, ih, is);
                float acc = 0.0f;
                for (int64_t j = 0; j < d; ++j) acc += row[j] * 0.0f; /* NaN/Inf poison the sum */
                if (acc != 0.0f) return 1;
            }
    return 0;
}
