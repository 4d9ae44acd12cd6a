/* test_npy.c - .npy load (float32 / float16 / bfloat16, versions 1-3) and
 * float32 save: round trips, hand-written files, and every rejection path. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, rmdir */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "numerics.h"
#include "test.h"
#include "vcattn.h"

/* ---- scratch files ------------------------------------------------------------ */

typedef struct {
    char dir[64];
    char path[128];
    int ok;
} npy_tmp;

static void tmp_open(npy_tmp *t) {
    const char *base = "/tmp/vcattn_npy_XXXXXX";
    memcpy(t->dir, base, strlen(base) + 1);
    t->ok = mkdtemp(t->dir) != NULL;
    CHECK_MSG(t->ok, "mkdtemp failed");
    snprintf(t->path, sizeof t->path, "%s/a.npy", t->dir);
}

static void tmp_close(npy_tmp *t) {
    if (!t->ok) return;
    remove(t->path);
    rmdir(t->dir);
}

static int write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = (unsigned char *)malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        unsigned char *nb = (unsigned char *)realloc(buf, cap *= 2);
        if (!nb) { free(buf); buf = NULL; }
        else buf = nb;
    }
    fclose(f);
    *n = len;
    return buf;
}

/* A .npy image: magic, version, header length (2 bytes for version 1, else
 * 4), the dict text padded with spaces + '\n' to a multiple of 64 (when
 * `pad`), then `data`. */
static unsigned char *build_npy(int major, const char *dict, int pad, const void *data,
                                size_t data_len, size_t *out_len) {
    size_t prefix = major == 1 ? 10 : 12;
    size_t hlen = strlen(dict) + 1;
    if (pad) hlen += (64 - (prefix + hlen) % 64) % 64;
    unsigned char *b = (unsigned char *)malloc(prefix + hlen + data_len + 1);
    if (!b) return NULL;
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    b[8] = (unsigned char)(hlen & 0xFF);
    b[9] = (unsigned char)((hlen >> 8) & 0xFF);
    if (major != 1) {
        b[10] = (unsigned char)((hlen >> 16) & 0xFF);
        b[11] = (unsigned char)((hlen >> 24) & 0xFF);
    }
    memset(b + prefix, ' ', hlen);
    memcpy(b + prefix, dict, strlen(dict));
    b[prefix + hlen - 1] = '\n';
    if (data_len) memcpy(b + prefix + hlen, data, data_len);
    *out_len = prefix + hlen + data_len;
    return b;
}

/* write a hand-built file and load it (vcattn_npy_load_ex when `err`, else
 * vcattn_npy_load); returns the status */
static vcattn_status load_built_ex(npy_tmp *t, int major, const char *dict, int pad, const void *data,
                                   size_t data_len, float **out, int64_t shape[4], vcattn_npy_error *err) {
    size_t n;
    unsigned char *img = build_npy(major, dict, pad, data, data_len, &n);
    if (!img || !write_bytes(t->path, img, n)) {
        free(img);
        CHECK_MSG(0, "could not write test file");
        return VCATTN_STATUS_IO_ERROR;
    }
    free(img);
    *out = (float *)(uintptr_t)1; /* must be reset by the loader */
    return err ? vcattn_npy_load_ex(t->path, out, shape, err) : vcattn_npy_load(t->path, out, shape);
}

static vcattn_status load_built(npy_tmp *t, int major, const char *dict, int pad, const void *data,
                                size_t data_len, float **out, int64_t shape[4]) {
    return load_built_ex(t, major, dict, pad, data, data_len, out, shape, NULL);
}

static void put_u16(unsigned char *p, uint16_t u) {
    p[0] = (unsigned char)(u & 0xFF);
    p[1] = (unsigned char)(u >> 8);
}

/* independent IEEE half decoder for the expected values */
static double half_ref(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double mag;
    if (e == 0x1F) mag = m ? NAN : INFINITY;
    else if (e == 0) mag = ldexp((double)m, -24);
    else mag = ldexp(1024.0 + m, e - 25);
    return s ? -mag : mag;
}

/* ---- tests ---------------------------------------------------------------------- */

TEST(npy_roundtrip_f32_bitwise) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    test_rng r = {test_seed()};
    for (int rep = 0; rep < 4; ++rep) {
        int64_t shape[4] = {1 + (int64_t)(test_rng_next(&r) % 3), 1 + (int64_t)(test_rng_next(&r) % 4),
                            1 + (int64_t)(test_rng_next(&r) % 300), 1 + (int64_t)(test_rng_next(&r) % 130)};
        int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
        float *x = (float *)malloc(sizeof(float) * (size_t)n);
        if (!x) { CHECK(0); break; }
        for (int64_t i = 0; i < n; ++i) x[i] = (float)(test_rng_normal(&r) * exp(4.0 * test_rng_normal(&r)));
        /* special values must survive bit for bit */
        const uint32_t specials[] = {0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC12345u,
                                     0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu};
        for (size_t i = 0; i < sizeof specials / sizeof specials[0] && (int64_t)i < n; ++i)
            x[(int64_t)(test_rng_next(&r) % (uint64_t)n)] = vc_f32_from_bits(specials[i]);
        CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 4, shape), VCATTN_STATUS_SUCCESS);

        /* header conventions: version 1.0, 64-byte aligned, newline-terminated */
        size_t len = 0;
        unsigned char *img = read_bytes(t.path, &len);
        if (img && len >= 10) {
            size_t hlen = (size_t)img[8] | ((size_t)img[9] << 8);
            CHECK(memcmp(img, "\x93NUMPY\x01\x00", 8) == 0);
            CHECK_EQ_INT((10 + hlen) % 64, 0);
            CHECK_EQ_INT(len, 10 + hlen + sizeof(float) * (size_t)n);
            if (10 + hlen <= len) {
                CHECK(img[10 + hlen - 1] == '\n');
                char expect[160];
                snprintf(expect, sizeof expect,
                         "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld, %lld, %lld), }",
                         (long long)shape[0], (long long)shape[1], (long long)shape[2],
                         (long long)shape[3]);
                CHECK(strlen(expect) <= hlen && memcmp(img + 10, expect, strlen(expect)) == 0);
            }
        } else {
            CHECK_MSG(0, "saved file unreadable");
        }
        free(img);

        float *y = NULL;
        int64_t got[4] = {0, 0, 0, 0};
        CHECK_STATUS(vcattn_npy_load(t.path, &y, got), VCATTN_STATUS_SUCCESS);
        if (y) {
            for (int i = 0; i < 4; ++i) CHECK_EQ_INT(got[i], shape[i]);
            CHECK(memcmp(x, y, sizeof(float) * (size_t)n) == 0);
            vcattn_free(y);
        }
        free(x);
    }
    tmp_close(&t);
}

TEST(npy_save_ranks) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    test_rng r = {test_seed()};
    float x[256];
    for (int i = 0; i < 256; ++i) x[i] = (float)test_rng_normal(&r);
    const int64_t shapes[8] = {2, 1, 2, 2, 1, 2, 2, 2};
    for (int ndim = 1; ndim <= 8; ++ndim) {
        int64_t n = 1;
        for (int i = 0; i < ndim; ++i) n *= shapes[i];
        CHECK_STATUS(vcattn_npy_save_f32(t.path, x, ndim, shapes), VCATTN_STATUS_SUCCESS);
        size_t len = 0;
        unsigned char *img = read_bytes(t.path, &len);
        if (!img || len < 10) { CHECK(0); free(img); continue; }
        size_t hlen = (size_t)img[8] | ((size_t)img[9] << 8);
        CHECK_EQ_INT((10 + hlen) % 64, 0);
        CHECK_EQ_INT(len, 10 + hlen + 4 * (size_t)n);
        /* Python tuple syntax: "(2,)" for one dimension */
        char tuple[64] = "(";
        for (int i = 0; i < ndim; ++i) {
            char part[16];
            snprintf(part, sizeof part, i + 1 < ndim ? "%lld, " : (ndim == 1 ? "%lld,)" : "%lld)"),
                     (long long)shapes[i]);
            strcat(tuple, part);
        }
        char *hdr = (char *)calloc(hlen + 1, 1);
        if (hdr && 10 + hlen <= len) {
            memcpy(hdr, img + 10, hlen);
            CHECK_MSG(strstr(hdr, tuple) != NULL, "ndim %d: %s not in %s", ndim, tuple, hdr);
        }
        free(hdr);
        if (len == 10 + hlen + 4 * (size_t)n) CHECK(memcmp(img + 10 + hlen, x, 4 * (size_t)n) == 0);
        free(img);
        float *y = NULL;
        int64_t got[4];
        CHECK_STATUS(vcattn_npy_load(t.path, &y, got),
                     ndim == 4 ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_BAD_FILE_FORMAT);
        if (ndim != 4) CHECK(y == NULL);
        vcattn_free(y);
    }
    tmp_close(&t);
}

TEST(npy_load_float16) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    test_rng r = {test_seed()};
    enum { N = 2 * 3 * 5 * 16 };
    unsigned char data[2 * N];
    uint16_t bits[N];
    for (int i = 0; i < N; ++i) {
        bits[i] = (uint16_t)test_rng_next(&r);
        if (i < 6) bits[i] = (uint16_t[]){0x0000, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0xFC00}[i];
        put_u16(data + 2 * i, bits[i]);
    }
    /* keys in another order, double quotes, no trailing comma, odd spacing,
     * and header versions 1.0, 2.0 and 3.0 */
    const char *dicts[3] = {
        "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3, 5, 16), }",
        "{\"shape\":(2,3,5,16),\"fortran_order\":False,\"descr\":\"<f2\"}",
        "{ 'fortran_order' : False ,  'descr' : '<f2' , 'shape' : ( 2 , 3 , 5 , 16 , ) , }"};
    for (int major = 1; major <= 3; ++major) {
        float *y = NULL;
        int64_t shape[4];
        CHECK_STATUS(load_built(&t, major, dicts[major - 1], major != 2, data, sizeof data, &y, shape),
                     VCATTN_STATUS_SUCCESS);
        if (!y) continue;
        CHECK(shape[0] == 2 && shape[1] == 3 && shape[2] == 5 && shape[3] == 16);
        int64_t wrong = 0;
        for (int i = 0; i < N; ++i) {
            double e = half_ref(bits[i]);
            if (isnan(e) ? !isnan(y[i]) : (double)y[i] != e) ++wrong;
        }
        CHECK_EQ_INT(wrong, 0);
        vcattn_free(y);
    }
    tmp_close(&t);
}

TEST(npy_load_bfloat16) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    test_rng r = {test_seed()};
    enum { N = 1 * 2 * 7 * 64 };
    unsigned char data[2 * N];
    float expect[N];
    for (int i = 0; i < N; ++i) {
        float x = (float)(test_rng_normal(&r) * exp(3.0 * test_rng_normal(&r)));
        uint16_t top = (uint16_t)(vc_f32_bits(x) >> 16);
        expect[i] = vc_f32_from_bits((uint32_t)top << 16);
        put_u16(data + 2 * i, top);
    }
    /* '<u2' (torch .view(int16) -> astype('<u2')), and what np.save writes
     * for ml_dtypes.bfloat16 ('<V2'; '|V2' accepted too) */
    const char *descr[3] = {"<u2", "<V2", "|V2"};
    for (int i = 0; i < 3; ++i) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (1, 2, 7, 64), }",
                 descr[i]);
        float *y = NULL;
        int64_t shape[4];
        CHECK_STATUS(load_built(&t, 1, dict, 1, data, sizeof data, &y, shape), VCATTN_STATUS_SUCCESS);
        if (!y) continue;
        CHECK(shape[0] == 1 && shape[1] == 2 && shape[2] == 7 && shape[3] == 64);
        CHECK_MSG(memcmp(y, expect, sizeof expect) == 0, "descr %s decodes wrongly", descr[i]);
        vcattn_free(y);
    }
    tmp_close(&t);
}

TEST(npy_header_variants) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    test_rng r = {test_seed()};
    float x[2 * 3];
    for (int i = 0; i < 6; ++i) x[i] = (float)test_rng_normal(&r);
    const char *ok[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1L, 1L, 2L, 3L), }", /* Python 2 */
        "{'descr':'<f4','fortran_order':False,'shape':(1,1,2,3)}",
        "{'shape': (1, 1, 2, 3), 'descr': '<f4', 'fortran_order': False, 'extra': 'x', }",
        "{'descr': '<f4',\n 'fortran_order': False,\n 'shape': (1, 1, 2, 3)}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; ++i) {
        float *y = NULL;
        int64_t shape[4];
        CHECK_STATUS(load_built(&t, 1, ok[i], (int)(i % 2), x, sizeof x, &y, shape),
                     VCATTN_STATUS_SUCCESS);
        if (!y) continue;
        CHECK(shape[0] == 1 && shape[1] == 1 && shape[2] == 2 && shape[3] == 3);
        CHECK(memcmp(x, y, sizeof x) == 0);
        vcattn_free(y);
    }
    /* bytes after the data are ignored, as np.load does */
    float padded[8];
    memcpy(padded, x, sizeof x);
    padded[6] = padded[7] = 1.0f;
    float *y = NULL;
    int64_t shape[4];
    CHECK_STATUS(load_built(&t, 1, ok[0], 1, padded, sizeof padded, &y, shape),
                 VCATTN_STATUS_SUCCESS);
    if (y) CHECK(memcmp(x, y, sizeof x) == 0);
    vcattn_free(y);
    tmp_close(&t);
}

TEST(npy_rejects_bad_files) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    test_rng r = {test_seed()};
    float x[24];
    for (int i = 0; i < 24; ++i) x[i] = (float)test_rng_normal(&r);
    const vcattn_status BAD = VCATTN_STATUS_BAD_FILE_FORMAT;
    /* each case: its status, its reason, and a piece of the message that
     * names this file's own detail */
    const struct {
        const char *dict;
        size_t data_len;
        vcattn_status expect;
        vcattn_npy_reason reason;
        const char *needle;
    } cases[] = {
        /* truncated data: one byte short */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 95, BAD, VCATTN_NPY_TRUNCATED, "need 96 data bytes, the file holds 95"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 47, BAD, VCATTN_NPY_TRUNCATED, "need 48 data bytes, the file holds 47"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 0, BAD, VCATTN_NPY_TRUNCATED, "the file holds 0"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_TRUNCATED, "need 192 data bytes"},
        /* wrong rank */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", 96, BAD, VCATTN_NPY_WRONG_RANK, "shape (2, 3, 4) has 3 dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_WRONG_RANK, "(1, 1, 2, 3, 4) has 5 dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (24,), }", 96, BAD, VCATTN_NPY_WRONG_RANK, "shape (24,) has 1 dimension;"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 96, BAD, VCATTN_NPY_WRONG_RANK, "has 0 dimensions"},
        /* Fortran order */
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_FORTRAN_ORDER, "np.ascontiguousarray"},
        /* big-endian and unsupported dtypes */
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_BIG_ENDIAN, "dtype '>f4' is big-endian; save little-endian data, e.g. x.astype('<f4')"},
        {"{'descr': '>f2', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_BIG_ENDIAN, "x.astype('<f2')"},
        {"{'descr': '>u2', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_BIG_ENDIAN, "'>u2'"},
        {"{'descr': '>f8', 'fortran_order': False, 'shape': (1, 1, 3, 4), }", 96, BAD, VCATTN_NPY_BIG_ENDIAN, "'>f8'"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_UNSUPPORTED_DTYPE, "dtype '<i2' is not supported"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_UNSUPPORTED_DTYPE, "dtype '|u1'"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (1, 1, 3, 4), }", 96, BAD, VCATTN_NPY_UNSUPPORTED_DTYPE, "x.astype(np.float32)"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 96, BAD, VCATTN_NPY_UNSUPPORTED_DTYPE, "structured dtype"},
        /* garbage headers */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4", 96, BAD, VCATTN_NPY_BAD_HEADER, "'shape' is not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False}", 96, BAD, VCATTN_NPY_BAD_HEADER, "'shape' is missing"},
        {"{'fortran_order': False, 'shape': (1, 2, 3, 4)}", 96, BAD, VCATTN_NPY_BAD_HEADER, "'descr' is missing"},
        {"{'descr': '<f4', 'shape': (1, 2, 3, 4)}", 96, BAD, VCATTN_NPY_BAD_HEADER, "'fortran_order' is missing"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4)}", 96, BAD, VCATTN_NPY_BAD_HEADER, "'descr' appears twice"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [1, 2, 3, 4]}", 96, BAD, VCATTN_NPY_BAD_HEADER, "'shape' is not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2.5, 3, 4)}", 96, BAD, VCATTN_NPY_BAD_HEADER, "'shape' is not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, -2, 3, 4)}", 96, BAD, VCATTN_NPY_BAD_HEADER, "(1, -2, 3, 4) has a negative dimension"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (1, 2, 3, 4)}", 96, BAD, VCATTN_NPY_BAD_HEADER, "not True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4)} trailing", 96, BAD, VCATTN_NPY_BAD_HEADER, "text follows"},
        {"'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4)", 96, BAD, VCATTN_NPY_BAD_HEADER, "does not start with '{'"},
        {"", 96, BAD, VCATTN_NPY_BAD_HEADER, "does not start with '{'"},
        {"\x01\xff garbage \x7f", 96, BAD, VCATTN_NPY_BAD_HEADER, "malformed header"},
        /* sizes */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 0, 3, 4), }", 0, VCATTN_STATUS_BAD_SHAPE, VCATTN_NPY_ZERO_DIMENSION, "(1, 0, 3, 4) has a dimension of size 0"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776, 1024, 1), }", 96, VCATTN_STATUS_SIZE_OVERFLOW, VCATTN_NPY_TOO_LARGE, "too many elements"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 99999999999999999999, 4), }", 96, VCATTN_STATUS_SIZE_OVERFLOW, VCATTN_NPY_TOO_LARGE, "does not fit in 64 bits"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        for (int ex = 0; ex < 2; ++ex) { /* the plain call and the _ex call agree */
            float *y = NULL;
            int64_t shape[4];
            vcattn_npy_error err;
            memset(&err, 0x55, sizeof err);
            vcattn_status st = load_built_ex(&t, 1, cases[i].dict, 1, x, cases[i].data_len, &y, shape,
                                             ex ? &err : NULL);
            CHECK_MSG(st == cases[i].expect, "case %zu (%s): %s, expected %s", i, cases[i].dict,
                      vcattn_status_string(st), vcattn_status_string(cases[i].expect));
            CHECK_MSG(y == NULL, "case %zu: *data not NULL after failure", i);
            if (st == VCATTN_STATUS_SUCCESS) vcattn_free(y);
            if (!ex) continue;
            CHECK_MSG(err.reason == cases[i].reason, "case %zu (%s): reason %d (%s), expected %d", i,
                      cases[i].dict, (int)err.reason, vcattn_npy_reason_string(err.reason), (int)cases[i].reason);
            CHECK_MSG(memchr(err.message, '\0', sizeof err.message) && strstr(err.message, cases[i].needle) &&
                          strstr(err.message, t.path) == err.message,
                      "case %zu: message \"%.320s\" lacks \"%s\" or the path", i, err.message, cases[i].needle);
        }
    }

    /* damaged preambles */
    size_t n;
    unsigned char *good = build_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4), }",
                                    1, x, sizeof(float) * 24, &n);
    if (good) {
        unsigned char *img = (unsigned char *)malloc(n);
        const size_t cuts[] = {0, 3, 6, 9, 10, 40}; /* empty, in the magic, in the header */
        const vcattn_npy_reason cut_reason[] = {VCATTN_NPY_NOT_NPY, VCATTN_NPY_TRUNCATED, VCATTN_NPY_TRUNCATED,
                                                VCATTN_NPY_TRUNCATED, VCATTN_NPY_TRUNCATED, VCATTN_NPY_TRUNCATED};
        for (size_t i = 0; img && i < sizeof cuts / sizeof cuts[0]; ++i) {
            float *y = NULL;
            int64_t shape[4];
            vcattn_npy_error err;
            CHECK(write_bytes(t.path, good, cuts[i]));
            CHECK_STATUS(vcattn_npy_load_ex(t.path, &y, shape, &err), VCATTN_STATUS_BAD_FILE_FORMAT);
            CHECK_MSG(err.reason == cut_reason[i], "cut at %zu: reason %d: %s", cuts[i], (int)err.reason, err.message);
            CHECK(y == NULL);
        }
        /* a short file that is not a prefix of the magic is not .npy at all */
        {
            float *y = NULL;
            int64_t shape[4];
            vcattn_npy_error err;
            CHECK(write_bytes(t.path, "PK\x03", 3));
            CHECK_STATUS(vcattn_npy_load_ex(t.path, &y, shape, &err), VCATTN_STATUS_BAD_FILE_FORMAT);
            CHECK_EQ_INT(err.reason, VCATTN_NPY_NOT_NPY);
        }
        const struct { size_t at; unsigned char byte; vcattn_npy_reason reason; const char *needle; } edits[] = {
            /* magic, versions 0, 4, 255 */
            {0, 0x92, VCATTN_NPY_NOT_NPY, "\\x93NUMPY"}, {3, 'm', VCATTN_NPY_NOT_NPY, "numpy.save"},
            {6, 0, VCATTN_NPY_UNSUPPORTED_VERSION, "version 0.0"}, {6, 4, VCATTN_NPY_UNSUPPORTED_VERSION, "version 4.0"},
            {6, 0xFF, VCATTN_NPY_UNSUPPORTED_VERSION, "version 255.0"},
            /* header length 0 / short / long / past the end of the file */
            {8, 0, VCATTN_NPY_BAD_HEADER, "length 0 is zero"}, {8, 30, VCATTN_NPY_BAD_HEADER, "a key is not a quoted string"},
            {8, 0xFF, VCATTN_NPY_TRUNCATED, "ends 214 bytes into a 255-byte header"},
            {9, 0xFF, VCATTN_NPY_TRUNCATED, "into a 65398-byte header"}};
        for (size_t i = 0; img && i < sizeof edits / sizeof edits[0]; ++i) {
            memcpy(img, good, n);
            img[edits[i].at] = edits[i].byte;
            if (edits[i].at == 8 && edits[i].byte == 0) img[9] = 0; /* length exactly 0 */
            float *y = NULL;
            int64_t shape[4];
            CHECK(write_bytes(t.path, img, n));
            vcattn_npy_error err;
            vcattn_status st = vcattn_npy_load_ex(t.path, &y, shape, &err);
            CHECK_MSG(st == VCATTN_STATUS_BAD_FILE_FORMAT, "edit %zu: %s", i, vcattn_status_string(st));
            CHECK_MSG(err.reason == edits[i].reason && strstr(err.message, edits[i].needle),
                      "edit %zu: reason %d, message \"%s\", expected %d with \"%s\"", i, (int)err.reason, err.message,
                      (int)edits[i].reason, edits[i].needle);
            CHECK(y == NULL);
        }
        free(img);
        free(good);
    }
    /* version 2.0 with a 4 GiB header length */
    unsigned char huge[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xFF, 0xFF, 0xFF, 0xFF};
    CHECK(write_bytes(t.path, huge, sizeof huge));
    float *y = NULL;
    int64_t shape[4];
    vcattn_npy_error err;
    CHECK_STATUS(vcattn_npy_load_ex(t.path, &y, shape, &err), VCATTN_STATUS_BAD_FILE_FORMAT);
    CHECK_MSG(err.reason == VCATTN_NPY_BAD_HEADER && strstr(err.message, "4294967295 is beyond 1 MiB"), "%s",
              err.message);
    tmp_close(&t);
}

TEST(npy_io_and_null_errors) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    float *y = (float *)(uintptr_t)1;
    int64_t shape[4];
    char missing[160];
    snprintf(missing, sizeof missing, "%s/does_not_exist.npy", t.dir);
    CHECK_STATUS(vcattn_npy_load(missing, &y, shape), VCATTN_STATUS_IO_ERROR);
    CHECK(y == NULL);
    CHECK_STATUS(vcattn_npy_load(t.dir, &y, shape), VCATTN_STATUS_IO_ERROR); /* a directory */
    CHECK_STATUS(vcattn_npy_load(NULL, &y, shape), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_npy_load(t.path, NULL, shape), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_npy_load(t.path, &y, NULL), VCATTN_STATUS_NULL_POINTER);

    test_rng r = {test_seed()};
    float x[8];
    for (int i = 0; i < 8; ++i) x[i] = (float)test_rng_normal(&r);
    int64_t s4[4] = {1, 2, 2, 2};
    CHECK_STATUS(vcattn_npy_save_f32(missing, x, 4, s4), VCATTN_STATUS_SUCCESS);
    remove(missing);
    char bad_dir[200];
    snprintf(bad_dir, sizeof bad_dir, "%s/no/such/dir/x.npy", t.dir);
    CHECK_STATUS(vcattn_npy_save_f32(bad_dir, x, 4, s4), VCATTN_STATUS_IO_ERROR);
    CHECK_STATUS(vcattn_npy_save_f32(t.dir, x, 4, s4), VCATTN_STATUS_IO_ERROR);
    CHECK_STATUS(vcattn_npy_save_f32(NULL, x, 4, s4), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_npy_save_f32(t.path, NULL, 4, s4), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 4, NULL), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 0, s4), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 9, s4), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, -1, s4), VCATTN_STATUS_INVALID_ARGUMENT);
    int64_t zero[4] = {1, 0, 2, 2}, neg[4] = {1, 2, -2, 2};
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 4, zero), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 4, neg), VCATTN_STATUS_BAD_SHAPE);
    int64_t big[3] = {INT64_MAX / 2, 3, 1}, big_bytes[2] = {INT64_MAX / 4, 2};
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 3, big), VCATTN_STATUS_SIZE_OVERFLOW);
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 2, big_bytes), VCATTN_STATUS_SIZE_OVERFLOW);
    tmp_close(&t);
}

/* Random damage to a valid file must give a status, never a crash or leak
 * (run under ASan to see it); successes must be self-consistent. */
TEST(npy_fuzz_no_crash) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    test_rng r = {test_seed()};
    unsigned char data[2 * 64];
    for (int i = 0; i < 64; ++i) put_u16(data + 2 * i, (uint16_t)test_rng_next(&r));
    size_t n;
    unsigned char *good = build_npy(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 4, 8), }",
                                    1, data, sizeof data, &n);
    unsigned char *img = good ? (unsigned char *)malloc(n) : NULL;
    int successes = 0;
    for (int it = 0; img && it < 400; ++it) {
        memcpy(img, good, n);
        size_t len = n;
        int edits = 1 + (int)(test_rng_next(&r) % 4);
        for (int e = 0; e < edits; ++e) {
            /* mostly inside the 64-byte header, sometimes anywhere */
            size_t at = (size_t)(test_rng_next(&r) % (it % 3 ? 64 : n));
            img[at] = (unsigned char)test_rng_next(&r);
        }
        if (it % 5 == 0) len = (size_t)(test_rng_next(&r) % n);
        if (!write_bytes(t.path, img, len)) { CHECK(0); break; }
        float *y = NULL;
        int64_t shape[4] = {0, 0, 0, 0};
        vcattn_npy_error err;
        vcattn_status st = vcattn_npy_load_ex(t.path, &y, shape, &err);
        CHECK(st >= 0 && st < VCATTN_STATUS_COUNT);
        /* every failure names a reason, of the status it returned, and says why */
        CHECK((st == VCATTN_STATUS_SUCCESS) == (err.reason == VCATTN_NPY_OK));
        CHECK(err.reason >= 0 && err.reason < VCATTN_NPY_REASON_COUNT);
        CHECK((err.message[0] == '\0') == (st == VCATTN_STATUS_SUCCESS));
        if (err.reason == VCATTN_NPY_ZERO_DIMENSION) CHECK(st == VCATTN_STATUS_BAD_SHAPE);
        else if (err.reason == VCATTN_NPY_TOO_LARGE) CHECK(st == VCATTN_STATUS_SIZE_OVERFLOW);
        else if (st != VCATTN_STATUS_SUCCESS) CHECK(st == VCATTN_STATUS_BAD_FILE_FORMAT);
        if (st == VCATTN_STATUS_SUCCESS) {
            ++successes;
            CHECK(y != NULL && shape[0] > 0 && shape[1] > 0 && shape[2] > 0 && shape[3] > 0);
            vcattn_free(y);
        } else {
            CHECK(y == NULL);
        }
    }
    CHECK(successes < 400);
    free(img);
    free(good);
    tmp_close(&t);
}

/* float64 (numpy's default dtype) is read and rounded to float32 (RNE, as a
 * C cast); NaN and Inf pass through like a float32 file's would; a finite
 * value that float32 cannot hold is refused, naming the element. */
TEST(npy_load_float64_converts_to_float32) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    test_rng r = {test_seed()};
    enum { N = 2 * 3 * 5 * 8 };
    double x[N];
    unsigned char data[8 * N];
    for (int i = 0; i < N; ++i) x[i] = test_rng_normal(&r) * exp(6.0 * test_rng_normal(&r));
    const double specials[] = {0.0, -0.0, NAN, INFINITY, -INFINITY, 1e-50, -1e-40, 3.4028234663852886e38,
                               -3.4028234663852886e38, 1.0 + 0x1.0p-24 /* a tie: to even, 1.0 */,
                               1.0 + 0x1.8p-23 /* a tie: up to 1 + 2^-22 */};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) x[3 * i + 1] = specials[i];
    for (int i = 0; i < N; ++i) {
        uint64_t u;
        memcpy(&u, &x[i], 8);
        for (int b = 0; b < 8; ++b) data[8 * i + b] = (unsigned char)(u >> (8 * b));
    }
    const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 5, 8), }";
    float *y = NULL;
    int64_t shape[4];
    vcattn_npy_error err;
    for (int major = 1; major <= 2; ++major) {
        CHECK_STATUS(load_built_ex(&t, major, dict, 1, data, sizeof data, &y, shape, &err), VCATTN_STATUS_SUCCESS);
        CHECK(err.reason == VCATTN_NPY_OK && err.message[0] == '\0');
        if (!y) continue;
        CHECK(shape[0] == 2 && shape[1] == 3 && shape[2] == 5 && shape[3] == 8);
        int64_t wrong = 0, far = 0;
        for (int i = 0; i < N; ++i) {
            float want = (float)x[i];
            if (isnan(x[i]) ? !isnan(y[i]) : memcmp(&want, &y[i], 4) != 0) ++wrong;
            /* and independently of the cast: within half a float32 ulp */
            if (isfinite(x[i]) && fabs(x[i]) >= 0x1.0p-126 &&
                fabs((double)y[i] - x[i]) > fabs(x[i]) * 0x1.0p-24)
                ++far;
        }
        CHECK_EQ_INT(wrong, 0);
        CHECK_EQ_INT(far, 0);
        CHECK(y[3 * 9 + 1] == 1.0f && y[3 * 10 + 1] == 1.0f + 0x1.0p-22f && y[3 * 5 + 1] == 0.0f);
        vcattn_free(y);
    }
    /* beyond float32: refused, with the element's index */
    const double big[2] = {1e39, -1e300};
    for (int k = 0; k < 2; ++k) {
        double keep = x[17];
        x[17] = big[k];
        uint64_t u;
        memcpy(&u, &x[17], 8);
        for (int b = 0; b < 8; ++b) data[8 * 17 + b] = (unsigned char)(u >> (8 * b));
        CHECK_STATUS(load_built_ex(&t, 1, dict, 1, data, sizeof data, &y, shape, &err),
                     VCATTN_STATUS_BAD_FILE_FORMAT);
        CHECK(y == NULL);
        CHECK_MSG(err.reason == VCATTN_NPY_FLOAT64_OUT_OF_RANGE && strstr(err.message, "float64 element 17 is"),
                  "%s", err.message);
        x[17] = keep;
        memcpy(&u, &x[17], 8);
        for (int b = 0; b < 8; ++b) data[8 * 17 + b] = (unsigned char)(u >> (8 * b));
    }
    tmp_close(&t);
}

TEST(npy_reasons_of_io_and_null_errors) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    float *y = (float *)(uintptr_t)1;
    int64_t shape[4];
    vcattn_npy_error err;
    char missing[160];
    snprintf(missing, sizeof missing, "%s/does_not_exist.npy", t.dir);
    CHECK_STATUS(vcattn_npy_load_ex(missing, &y, shape, &err), VCATTN_STATUS_IO_ERROR);
    CHECK(y == NULL);
    CHECK(err.reason == VCATTN_NPY_OPEN_FAILED && strstr(err.message, missing) == err.message);
    /* a directory opens on Linux and fails on the first read */
    CHECK_STATUS(vcattn_npy_load_ex(t.dir, &y, shape, &err), VCATTN_STATUS_IO_ERROR);
    CHECK(err.reason == VCATTN_NPY_OPEN_FAILED || err.reason == VCATTN_NPY_READ_FAILED);
    CHECK_STATUS(vcattn_npy_load_ex(NULL, &y, shape, &err), VCATTN_STATUS_NULL_POINTER);
    CHECK(err.reason == VCATTN_NPY_NULL_ARGUMENT && strstr(err.message, "path is NULL"));
    CHECK_STATUS(vcattn_npy_load_ex(t.path, NULL, shape, &err), VCATTN_STATUS_NULL_POINTER);
    CHECK(err.reason == VCATTN_NPY_NULL_ARGUMENT && strstr(err.message, "data is NULL"));
    CHECK_STATUS(vcattn_npy_load_ex(t.path, &y, NULL, &err), VCATTN_STATUS_NULL_POINTER);
    CHECK(err.reason == VCATTN_NPY_NULL_ARGUMENT && strstr(err.message, "shape is NULL"));

    /* success: reason OK, empty message, and the data */
    test_rng r = {test_seed()};
    float x[16];
    for (int i = 0; i < 16; ++i) x[i] = (float)test_rng_normal(&r);
    const int64_t s4[4] = {1, 2, 2, 4};
    CHECK_STATUS(vcattn_npy_save_f32(t.path, x, 4, s4), VCATTN_STATUS_SUCCESS);
    err.reason = VCATTN_NPY_TRUNCATED;
    err.message[0] = 'x';
    CHECK_STATUS(vcattn_npy_load_ex(t.path, &y, shape, &err), VCATTN_STATUS_SUCCESS);
    CHECK(err.reason == VCATTN_NPY_OK && err.message[0] == '\0');
    if (y) CHECK(memcmp(x, y, sizeof x) == 0);
    vcattn_free(y);

    /* every reason has its own sentence */
    for (int a = 0; a < VCATTN_NPY_REASON_COUNT; ++a) {
        const char *sa = vcattn_npy_reason_string((vcattn_npy_reason)a);
        CHECK(sa && *sa && strcmp(sa, "unknown reason") != 0);
        for (int b = 0; b < a; ++b) CHECK(strcmp(sa, vcattn_npy_reason_string((vcattn_npy_reason)b)) != 0);
    }
    CHECK(strcmp(vcattn_npy_reason_string(VCATTN_NPY_REASON_COUNT), "unknown reason") == 0);
    CHECK(strstr(vcattn_npy_reason_string(VCATTN_NPY_FORTRAN_ORDER), "ascontiguousarray") != NULL);
    remove(t.path);
    tmp_close(&t);
}

/* Found by fuzz/fuzz_npy.c: the dtype string of an unsupported file went into
 * the message as it was, so a header with '<f\n\x1b[31m' made a two-line
 * message with a terminal escape sequence in it.  Now any byte that is not
 * printable ASCII is shown as \xNN: one line, plain text. */
TEST(npy_message_escapes_the_files_dtype_text) {
    npy_tmp t;
    tmp_open(&t);
    if (!t.ok) return;
    float *y = NULL;
    int64_t shape[4];
    vcattn_npy_error err;
    const float x[1] = {1.0f};
    CHECK_STATUS(load_built_ex(&t, 1, "{'descr': '<f\n\x1b[31m', 'fortran_order': False, 'shape': (1, 1, 1, 1), }",
                               1, x, sizeof x, &y, shape, &err),
                 VCATTN_STATUS_BAD_FILE_FORMAT);
    CHECK(y == NULL && err.reason == VCATTN_NPY_UNSUPPORTED_DTYPE);
    CHECK_MSG(strchr(err.message, '\n') == NULL && strchr(err.message, '\x1b') == NULL, "message: %s", err.message);
    CHECK_MSG(strstr(err.message, "dtype '<f\\x0A\\x1B[31m' is not supported") != NULL, "message: %s", err.message);
    /* an ordinary unsupported dtype reads as before */
    CHECK_STATUS(load_built_ex(&t, 1, "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 1, 1, 1), }", 1, x,
                               sizeof x, &y, shape, &err),
                 VCATTN_STATUS_BAD_FILE_FORMAT);
    CHECK_MSG(strstr(err.message, "dtype '<i2' is not supported") != NULL, "message: %s", err.message);
    remove(t.path);
    tmp_close(&t);
}
