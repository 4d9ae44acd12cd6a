/* fuzz_npy.c - libFuzzer harness of the .npy loader.
 *
 * The bytes are a whole .npy file.  They reach the loader twice: through
 * vc_npy_load_stream over fmemopen (the parser, reads, seeks and decoding the
 * file loader uses), and through the public vcattn_npy_load_ex over a memfd
 * path, and both answers must agree.  Invariants:
 *  - success: the shape is positive, its element count times the dtype's size
 *    fits in the bytes after the header, and every decoded float is the
 *    file's element (bit for bit for float32; the library's own FP16 / BF16
 *    decode; float64 rounded to nearest and finite where the input is);
 *  - failure: no data, a reason with its documented status, and a one-line
 *    message that names the file (the cause is never silent).
 * Any crash, leak or UB is caught by ASan + UBSan. */
#define _GNU_SOURCE /* memfd_create, fmemopen */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "npy_internal.h"
#include "numerics.h"
#include "vcattn.h"

#define REQUIRE(c)                                                                             \
    do {                                                                                       \
        if (!(c)) fuzz_fail(__LINE__, #c);                                                     \
    } while (0)

static void fuzz_fail(int line, const char *what) {
    fprintf(stderr, "fuzz_npy.c:%d: invariant broken: %s\n", line, what);
    abort();
}

/* The status each reason documents (vcattn.h, in brackets). */
static vcattn_status documented_status(vcattn_npy_reason r) {
    switch (r) {
    case VCATTN_NPY_OK: return VCATTN_STATUS_SUCCESS;
    case VCATTN_NPY_NULL_ARGUMENT: return VCATTN_STATUS_NULL_POINTER;
    case VCATTN_NPY_OPEN_FAILED:
    case VCATTN_NPY_READ_FAILED: return VCATTN_STATUS_IO_ERROR;
    case VCATTN_NPY_ZERO_DIMENSION: return VCATTN_STATUS_BAD_SHAPE;
    case VCATTN_NPY_TOO_LARGE: return VCATTN_STATUS_SIZE_OVERFLOW;
    case VCATTN_NPY_OUT_OF_MEMORY: return VCATTN_STATUS_OUT_OF_MEMORY;
    default: return VCATTN_STATUS_BAD_FILE_FORMAT;
    }
}

static int itemsize_of(const char *descr) {
    if (!strcmp(descr, "<f4")) return 4;
    if (!strcmp(descr, "<f8")) return 8;
    if (!strcmp(descr, "<f2") || !strcmp(descr, "<u2") || !strcmp(descr, "<V2") || !strcmp(descr, "|V2"))
        return 2;
    return 0;
}

typedef struct {
    vcattn_status st;
    vcattn_npy_error err;
    float *data;
    int64_t shape[4];
    char descr[16];
} load_result;

static void check_failure(const load_result *r, const char *name) {
    REQUIRE(r->data == NULL);
    REQUIRE(r->err.reason > VCATTN_NPY_OK && r->err.reason < VCATTN_NPY_REASON_COUNT);
    REQUIRE(r->st == documented_status(r->err.reason));
    REQUIRE(strcmp(vcattn_npy_reason_string(r->err.reason), "unknown reason") != 0);
    /* the message: non-empty, terminated inside the buffer, one line, about this file */
    REQUIRE(memchr(r->err.message, '\0', sizeof r->err.message) != NULL);
    REQUIRE(r->err.message[0] != '\0');
    REQUIRE(strchr(r->err.message, '\n') == NULL);
    REQUIRE(strncmp(r->err.message, name, strlen(name)) == 0);
}

static void check_success(const load_result *r, const uint8_t *bytes, size_t size) {
    REQUIRE(r->err.reason == VCATTN_NPY_OK && r->err.message[0] == '\0');
    REQUIRE(r->data != NULL);
    const int item = itemsize_of(r->descr);
    REQUIRE(item != 0);
    /* where the data starts, from the preamble itself */
    REQUIRE(size >= 10);
    size_t off = bytes[6] == 1 ? 10 + (size_t)(bytes[8] | bytes[9] << 8)
                               : 12 + (size_t)((uint32_t)bytes[8] | (uint32_t)bytes[9] << 8 |
                                               (uint32_t)bytes[10] << 16 | (uint32_t)bytes[11] << 24);
    REQUIRE(off <= size);
    uint64_t count = 1;
    for (int i = 0; i < 4; ++i) {
        REQUIRE(r->shape[i] >= 1);
        REQUIRE((uint64_t)r->shape[i] <= (size - off) / (uint64_t)item / count);
        count *= (uint64_t)r->shape[i];
    }
    const uint8_t *d = bytes + off;
    for (uint64_t i = 0; i < count; ++i, d += item) {
        uint32_t got = vc_f32_bits(r->data[i]), want;
        if (item == 4) {
            want = (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
        } else if (item == 2) {
            uint16_t u = (uint16_t)(d[0] | d[1] << 8);
            want = vc_f32_bits(!strcmp(r->descr, "<f2") ? vc_fp16_to_f32(u) : vc_bf16_to_f32(u));
        } else {
            uint64_t u = 0;
            for (int k = 7; k >= 0; --k) u = u << 8 | d[k];
            double x;
            memcpy(&x, &u, sizeof x);
            REQUIRE(!isfinite(x) || isfinite(r->data[i]));
            want = vc_f32_bits((float)x);
        }
        /* NaN payloads may differ through the conversions; NaN stays NaN */
        REQUIRE(got == want || (isnan(r->data[i]) && isnan(vc_f32_from_bits(want))));
    }
}

static void check(const load_result *r, const char *name, const uint8_t *bytes, size_t size) {
    if (r->st == VCATTN_STATUS_SUCCESS) check_success(r, bytes, size);
    else check_failure(r, name);
}

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t size) {
    static const char name[] = "fuzz.npy";
    load_result a;
    memset(&a, 0, sizeof a);
    a.data = (float *)&a; /* must come back NULL on failure */
    /* fmemopen of 0 bytes is refused by older C libraries: an empty file is /dev/null */
    FILE *f = size ? fmemopen((void *)bytes, size, "rb") : fopen("/dev/null", "rb");
    if (!f) return 0;
    a.st = vc_npy_load_stream(f, name, &a.data, a.shape, &a.err, a.descr);
    fclose(f);
    check(&a, name, bytes, size);

    /* the public path entry over the same bytes: the same answer */
    int fd = memfd_create("fuzz_npy", 0);
    if (fd >= 0) {
        size_t put = 0;
        while (put < size) {
            ssize_t w = write(fd, bytes + put, size - put);
            if (w <= 0) break;
            put += (size_t)w;
        }
        if (put == size) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
            load_result b;
            memset(&b, 0, sizeof b);
            b.st = vcattn_npy_load_ex(path, &b.data, b.shape, &b.err);
            if (b.st == VCATTN_STATUS_SUCCESS) memcpy(b.descr, a.descr, sizeof b.descr);
            check(&b, path, bytes, size);
            REQUIRE(a.st == b.st && a.err.reason == b.err.reason);
            if (a.st == VCATTN_STATUS_SUCCESS) {
                REQUIRE(memcmp(a.shape, b.shape, sizeof a.shape) == 0);
                size_t n = (size_t)(a.shape[0] * a.shape[1] * a.shape[2] * a.shape[3]);
                REQUIRE(memcmp(a.data, b.data, n * sizeof(float)) == 0);
            } else {
                /* the same message, but for the name (unless one was cut at the buffer's end) */
                if (strlen(a.err.message) + 1 < sizeof a.err.message && strlen(b.err.message) + 1 < sizeof b.err.message)
                    REQUIRE(strcmp(a.err.message + strlen(name), b.err.message + strlen(path)) == 0);
            }
            vcattn_free(b.data);
        }
        close(fd);
    }
    vcattn_free(a.data);
    return 0;
}
