/* test_errors.c - errors that name the cause (issue 29): the status a bad call
 * gets is the one whose sentence leads to the fix. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"
#include "vcattn.h"

/* num_threads far beyond any machine: INVALID_ARGUMENT up front, not
 * OUT_OF_MEMORY from the per-worker scratch (nothing is allocated). */
TEST(errors_num_threads_range) {
    enum { S = 128, D = 64 };
    float *q = (float *)calloc(S * D, sizeof(float)), *o = (float *)calloc(S * D, sizeof(float));
    if (!q || !o) {
        free(q);
        free(o);
        CHECK_MSG(0, "out of memory");
        return;
    }
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, 1, 1, S, S, D, q, q, q, o);
    vcattn_method_config cfg;
    CHECK_STATUS(vcattn_method_config_get(VCATTN_METHOD_SAGE2_8BIT, &cfg), VCATTN_STATUS_SUCCESS);
    const int bad[] = {100000, 1025, -1, 2147483647};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        p.num_threads = bad[i];
        CHECK_STATUS(vcattn_attention_params_validate(&p), VCATTN_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_INVALID_ARGUMENT);
        int64_t rows[2] = {0, 7};
        CHECK_STATUS(vcattn_reference_attention_rows(&p, rows, 2), VCATTN_STATUS_INVALID_ARGUMENT);
    }
    const int good[] = {0, 1, 1024};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; ++i) {
        p.num_threads = good[i];
        CHECK_STATUS(vcattn_attention_params_validate(&p), VCATTN_STATUS_SUCCESS);
    }
    p.num_threads = 1024; /* the largest: runs (the pool caps the workers at the tasks) */
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
    CHECK(strstr(vcattn_status_string(VCATTN_STATUS_INVALID_ARGUMENT), "num_threads") != NULL);
    free(q);
    free(o);
}

/* A zero-size tensor (S = 0, B = 0, ...) is a shape error: BAD_SHAPE before its
 * strides (all 0 for an empty array) or its data pointer (NULL for an empty
 * torch tensor) are looked at. */
TEST(errors_zero_size_is_bad_shape) {
    float x[64];
    const int64_t zero_strides[3] = {0, 0, 0};
    for (int axis = 0; axis < 5; ++axis) {
        int64_t sz[5] = {1, 1, 16, 16, 64};
        sz[axis] = 0;
        vcattn_attention_params p;
        vcattn_attention_params_init(&p, sz[0], sz[1], sz[2], sz[3], sz[4], x, x, x, x);
        memcpy(p.q_stride, zero_strides, sizeof zero_strides);
        memcpy(p.k_stride, zero_strides, sizeof zero_strides);
        memcpy(p.v_stride, zero_strides, sizeof zero_strides);
        memcpy(p.o_stride, zero_strides, sizeof zero_strides);
        CHECK_STATUS(vcattn_attention_params_validate(&p), VCATTN_STATUS_BAD_SHAPE);
        CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_BAD_SHAPE);
        p.q = p.k = p.v = NULL; /* torch.empty(0).data_ptr() == 0 */
        p.o = NULL;
        CHECK_STATUS(vcattn_attention_params_validate(&p), VCATTN_STATUS_BAD_SHAPE);
    }
    /* the shared stride check: an empty view is BAD_SHAPE, whatever the strides */
    CHECK_STATUS(vc_check_strides(0, 1, 16, 64, zero_strides), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vc_check_strides(1, 1, 0, 64, zero_strides), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vc_check_strides(1, 0, 16, 64, NULL), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vc_check_strides(1, 1, 16, 0, zero_strides), VCATTN_STATUS_BAD_SHAPE);
    /* a non-empty view keeps its stride verdicts */
    CHECK_STATUS(vc_check_strides(1, 1, 16, 64, zero_strides), VCATTN_STATUS_BAD_STRIDE);
    const int64_t ok_strides[3] = {1024, 1024, 64};
    CHECK_STATUS(vc_check_strides(1, 1, 16, 64, ok_strides), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vc_check_strides(1, 1, 16, 64, NULL), VCATTN_STATUS_NULL_POINTER);
    CHECK(strstr(vcattn_status_string(VCATTN_STATUS_BAD_SHAPE), "empty") != NULL);
}

/* NaN/Inf: the sentence says which inputs must be finite. */
TEST(errors_non_finite_sentence_names_the_inputs) {
    CHECK(strstr(vcattn_status_string(VCATTN_STATUS_NON_FINITE), "Q, K or V") != NULL);
}

/* A directory or a missing file as a .npy path: the message says which, not
 * "read error in the preamble". */
TEST(errors_npy_directory_and_missing_file) {
    char dir[64] = "/tmp/vcattn_err_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    float *y = NULL;
    int64_t shape[4];
    vcattn_npy_error err;
    CHECK_STATUS(vcattn_npy_load_ex(dir, &y, shape, &err), VCATTN_STATUS_IO_ERROR);
    CHECK(y == NULL);
    CHECK_MSG(err.reason == VCATTN_NPY_OPEN_FAILED && strstr(err.message, dir) == err.message &&
                  strstr(err.message, "is a directory") && !strstr(err.message, "preamble"),
              "directory: reason %d, \"%s\"", (int)err.reason, err.message);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing.npy", dir);
    CHECK_STATUS(vcattn_npy_load_ex(missing, &y, shape, &err), VCATTN_STATUS_IO_ERROR);
    CHECK_MSG(err.reason == VCATTN_NPY_OPEN_FAILED && strstr(err.message, missing) == err.message &&
                  strstr(err.message, "no such file"),
              "missing: reason %d, \"%s\"", (int)err.reason, err.message);
    /* a path through a regular file: a part of it is not a directory */
    char file[128], through[160];
    snprintf(file, sizeof file, "%s/f", dir);
    FILE *f = fopen(file, "wb");
    if (f) fclose(f);
    snprintf(through, sizeof through, "%s/x.npy", file);
    CHECK_STATUS(vcattn_npy_load_ex(through, &y, shape, &err), VCATTN_STATUS_IO_ERROR);
    CHECK_MSG(err.reason == VCATTN_NPY_OPEN_FAILED && strstr(err.message, "not a directory"), "\"%s\"",
              err.message);
    /* an empty regular file still reads as empty */
    CHECK_STATUS(vcattn_npy_load_ex(file, &y, shape, &err), VCATTN_STATUS_BAD_FILE_FORMAT);
    CHECK_MSG(err.reason == VCATTN_NPY_NOT_NPY && strstr(err.message, "empty"), "\"%s\"", err.message);
    remove(file);
    rmdir(dir);
}
