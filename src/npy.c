/* npy.c - NumPy .npy input (float32 / float16 / bfloat16, 4-D) and float32 output.
 *
 * The format (numpy.lib.format): the magic "\x93NUMPY", a major and minor
 * version byte, the header length (uint16 LE in version 1.0, uint32 LE in
 * 2.0 and 3.0), then the header: a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 8192, 128), }
 * padded with spaces and ended by '\n'; the raw array data follows.
 *
 * bfloat16 has no NumPy dtype of its own: we read '<u2' as the top 16 bits of
 * a float32 (what `t.view(torch.int16).numpy().astype('<u2')` writes), and
 * '<V2' / '|V2', which is what np.save writes for ml_dtypes.bfloat16.
 *
 * Only standard C I/O is used.  Data is decoded as little-endian whatever the
 * host's byte order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "numerics.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1u << 20) /* far above any real header; caps the malloc */
#define NPY_MAX_DIMS 64           /* NumPy's own limit */
#define NPY_CHUNK 65536           /* elements per read of 16-bit data */

typedef enum { NPY_F32, NPY_F16, NPY_BF16 } npy_dtype;

static int npy_host_is_little(void) {
    const uint32_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ---- header parsing ----------------------------------------------------------
 * A small recursive-descent reader for the subset of Python literals that
 * .npy headers use: strings, True/False/None, integers (with Python 2's
 * optional 'L' suffix) and tuples of integers.  Keys may come in any order;
 * unknown keys with such values are skipped. */

typedef struct {
    const char *p, *end;
} npy_cursor;

typedef struct {
    char descr[16];
    int have_descr, have_fortran, have_shape;
    int fortran_order;
    int ndim;                     /* dims parsed; only the first 8 are kept */
    int64_t shape[8];
    int overflow;                 /* an integer did not fit int64 */
} npy_header;

static void npy_skip_ws(npy_cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        ++c->p;
}

static int npy_accept(npy_cursor *c, char ch) {
    npy_skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        ++c->p;
        return 1;
    }
    return 0;
}

static int npy_accept_word(npy_cursor *c, const char *word) {
    npy_skip_ws(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* 'text' or "text" without escapes into buf (truncated to cap-1, flagged). */
static int npy_string(npy_cursor *c, char *buf, size_t cap, int *truncated) {
    npy_skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char quote = *c->p++;
    size_t n = 0;
    *truncated = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\') return 0; /* numpy never escapes in these headers */
        if (n + 1 < cap) buf[n++] = *c->p;
        else *truncated = 1;
        ++c->p;
    }
    if (c->p >= c->end) return 0;
    ++c->p; /* closing quote */
    buf[n] = '\0';
    return 1;
}

static int npy_integer(npy_cursor *c, int64_t *value, int *overflow) {
    npy_skip_ws(c);
    int neg = 0;
    if (c->p < c->end && (*c->p == '-' || *c->p == '+')) neg = *c->p++ == '-';
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int digit = *c->p++ - '0';
        if (v > (INT64_MAX - digit) / 10) *overflow = 1;
        else v = v * 10 + digit;
    }
    if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) ++c->p;
    *value = neg ? -v : v;
    return 1;
}

/* (a, b, ...) with an optional trailing comma; () is a 0-d shape. */
static int npy_tuple(npy_cursor *c, npy_header *h) {
    if (!npy_accept(c, '(')) return 0;
    h->ndim = 0;
    if (npy_accept(c, ')')) return 1;
    for (;;) {
        int64_t v;
        if (!npy_integer(c, &v, &h->overflow)) return 0;
        if (h->ndim >= NPY_MAX_DIMS) return 0;
        if (h->ndim < 8) h->shape[h->ndim] = v;
        ++h->ndim;
        if (npy_accept(c, ')')) return 1;
        if (!npy_accept(c, ',')) return 0;
        if (npy_accept(c, ')')) return 1;
    }
}

static int npy_skip_value(npy_cursor *c) {
    char buf[8];
    int trunc, dummy = 0;
    int64_t v;
    npy_header scratch;
    npy_cursor save = *c;
    if (npy_string(c, buf, sizeof buf, &trunc)) return 1;
    *c = save;
    if (npy_accept_word(c, "True") || npy_accept_word(c, "False") || npy_accept_word(c, "None"))
        return 1;
    if (npy_integer(c, &v, &dummy)) return 1;
    *c = save;
    memset(&scratch, 0, sizeof scratch);
    return npy_tuple(c, &scratch);
}

static int npy_parse_header(const char *text, size_t len, npy_header *h) {
    npy_cursor c = {text, text + len};
    memset(h, 0, sizeof *h);
    if (!npy_accept(&c, '{')) return 0;
    for (;;) {
        if (npy_accept(&c, '}')) break;
        char key[32];
        int trunc;
        if (!npy_string(&c, key, sizeof key, &trunc)) return 0;
        if (!npy_accept(&c, ':')) return 0;
        if (!trunc && strcmp(key, "descr") == 0) {
            if (h->have_descr) return 0;
            /* a list descr (structured dtype) fails here, as it should */
            if (!npy_string(&c, h->descr, sizeof h->descr, &trunc) || trunc) return 0;
            h->have_descr = 1;
        } else if (!trunc && strcmp(key, "fortran_order") == 0) {
            if (h->have_fortran) return 0;
            if (npy_accept_word(&c, "True")) h->fortran_order = 1;
            else if (npy_accept_word(&c, "False")) h->fortran_order = 0;
            else return 0;
            h->have_fortran = 1;
        } else if (!trunc && strcmp(key, "shape") == 0) {
            if (h->have_shape) return 0;
            if (!npy_tuple(&c, h)) return 0;
            h->have_shape = 1;
        } else if (!npy_skip_value(&c)) {
            return 0;
        }
        if (npy_accept(&c, '}')) break;
        if (!npy_accept(&c, ',')) return 0;
    }
    npy_skip_ws(&c);
    while (c.p < c.end && *c.p == '\0') ++c.p; /* tolerate NUL padding */
    return c.p == c.end && h->have_descr && h->have_fortran && h->have_shape;
}

static int npy_dtype_from_descr(const char *d, npy_dtype *t, int *itemsize) {
    if (strcmp(d, "<f4") == 0) { *t = NPY_F32; *itemsize = 4; return 1; }
    if (strcmp(d, "<f2") == 0) { *t = NPY_F16; *itemsize = 2; return 1; }
    if (strcmp(d, "<u2") == 0 || strcmp(d, "<V2") == 0 || strcmp(d, "|V2") == 0) {
        *t = NPY_BF16;
        *itemsize = 2;
        return 1;
    }
    return 0; /* big-endian ('>'), other types and sizes */
}

/* ---- load ------------------------------------------------------------------------ */

/* fread that tells a short file (BAD_FILE_FORMAT) from a read error (IO_ERROR). */
static vcattn_status npy_read(FILE *f, void *dst, size_t bytes) {
    if (bytes == 0) return VCATTN_STATUS_SUCCESS;
    if (fread(dst, 1, bytes, f) == bytes) return VCATTN_STATUS_SUCCESS;
    return ferror(f) ? VCATTN_STATUS_IO_ERROR : VCATTN_STATUS_BAD_FILE_FORMAT;
}

static vcattn_status npy_load_file(FILE *f, float **data, int64_t shape[4]) {
    uint8_t pre[12];
    vcattn_status st = npy_read(f, pre, 10);
    if (st != VCATTN_STATUS_SUCCESS) return st;
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) return VCATTN_STATUS_BAD_FILE_FORMAT;
    uint32_t hlen;
    if (pre[6] == 1) {
        hlen = (uint32_t)pre[8] | ((uint32_t)pre[9] << 8);
    } else if (pre[6] == 2 || pre[6] == 3) { /* 3.0: same layout, UTF-8 header */
        st = npy_read(f, pre + 10, 2);
        if (st != VCATTN_STATUS_SUCCESS) return st;
        hlen = (uint32_t)pre[8] | ((uint32_t)pre[9] << 8) | ((uint32_t)pre[10] << 16) |
               ((uint32_t)pre[11] << 24);
    } else {
        return VCATTN_STATUS_BAD_FILE_FORMAT;
    }
    if (hlen == 0 || hlen > NPY_MAX_HEADER) return VCATTN_STATUS_BAD_FILE_FORMAT;

    char *text = (char *)malloc(hlen);
    if (!text) return VCATTN_STATUS_OUT_OF_MEMORY;
    st = npy_read(f, text, hlen);
    npy_header h;
    int parsed = st == VCATTN_STATUS_SUCCESS && npy_parse_header(text, hlen, &h);
    free(text);
    if (st != VCATTN_STATUS_SUCCESS) return st;
    if (!parsed) return VCATTN_STATUS_BAD_FILE_FORMAT;

    npy_dtype dtype;
    int itemsize;
    if (!npy_dtype_from_descr(h.descr, &dtype, &itemsize)) return VCATTN_STATUS_BAD_FILE_FORMAT;
    if (h.fortran_order || h.ndim != 4) return VCATTN_STATUS_BAD_FILE_FORMAT;
    if (h.overflow) return VCATTN_STATUS_SIZE_OVERFLOW;
    for (int i = 0; i < 4; ++i)
        if (h.shape[i] < 0) return VCATTN_STATUS_BAD_FILE_FORMAT;
    int64_t count;
    st = vc_count4(h.shape[0], h.shape[1], h.shape[2], h.shape[3], sizeof(float), &count);
    if (st != VCATTN_STATUS_SUCCESS) return st; /* a zero dim: BAD_SHAPE */

    /* A short file is found before allocating, so a header that claims
     * terabytes costs nothing (when the stream can seek; else fread finds it). */
    long here = ftell(f);
    if (here >= 0 && fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        if (fseek(f, here, SEEK_SET) != 0) return VCATTN_STATUS_IO_ERROR;
        if (end >= here && (uint64_t)(end - here) / (uint64_t)itemsize < (uint64_t)count)
            return VCATTN_STATUS_BAD_FILE_FORMAT;
    }

    float *out = (float *)malloc(sizeof(float) * (size_t)count);
    if (!out) return VCATTN_STATUS_OUT_OF_MEMORY;
    if (dtype == NPY_F32) {
        st = npy_read(f, out, sizeof(float) * (size_t)count);
        if (st == VCATTN_STATUS_SUCCESS && !npy_host_is_little()) {
            uint8_t *b = (uint8_t *)out;
            for (int64_t i = 0; i < count; ++i, b += 4) {
                uint8_t t0 = b[0], t1 = b[1];
                b[0] = b[3];
                b[1] = b[2];
                b[2] = t1;
                b[3] = t0;
            }
        }
    } else {
        uint8_t *chunk = (uint8_t *)malloc(2 * NPY_CHUNK);
        if (!chunk) st = VCATTN_STATUS_OUT_OF_MEMORY;
        for (int64_t i = 0; st == VCATTN_STATUS_SUCCESS && i < count; i += NPY_CHUNK) {
            int64_t n = count - i < NPY_CHUNK ? count - i : NPY_CHUNK;
            st = npy_read(f, chunk, 2 * (size_t)n);
            for (int64_t j = 0; st == VCATTN_STATUS_SUCCESS && j < n; ++j) {
                uint16_t u = (uint16_t)(chunk[2 * j] | (chunk[2 * j + 1] << 8));
                out[i + j] = dtype == NPY_F16 ? vc_fp16_to_f32(u) : vc_bf16_to_f32(u);
            }
        }
        free(chunk);
    }
    if (st != VCATTN_STATUS_SUCCESS) {
        free(out);
        return st;
    }
    /* Bytes after the data are ignored, as np.load does. */
    *data = out;
    for (int i = 0; i < 4; ++i) shape[i] = h.shape[i];
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_npy_load(const char *path, float **data, int64_t shape[4]) {
    if (!path || !data || !shape) return VCATTN_STATUS_NULL_POINTER;
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return VCATTN_STATUS_IO_ERROR;
    vcattn_status st = npy_load_file(f, data, shape);
    fclose(f);
    return st;
}

/* ---- save -------------------------------------------------------------------------- */

vcattn_status vcattn_npy_save_f32(const char *path, const float *data, int ndim,
                                  const int64_t *shape) {
    if (!path || !data || !shape) return VCATTN_STATUS_NULL_POINTER;
    if (ndim < 1 || ndim > 8) return VCATTN_STATUS_INVALID_ARGUMENT;
    int64_t count = 1;
    for (int i = 0; i < ndim; ++i) {
        if (shape[i] <= 0) return VCATTN_STATUS_BAD_SHAPE;
        if (!vc_mul_i64(count, shape[i], &count)) return VCATTN_STATUS_SIZE_OVERFLOW;
    }
    if ((uint64_t)count > SIZE_MAX / sizeof(float) ||
        (uint64_t)count > (uint64_t)INT64_MAX / sizeof(float))
        return VCATTN_STATUS_SIZE_OVERFLOW;

    /* 8 dims of at most 19 digits fit easily in 512 bytes */
    char header[512];
    int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < ndim; ++i)
        len += snprintf(header + len, sizeof header - (size_t)len, i + 1 < ndim ? "%lld, " : "%lld",
                        (long long)shape[i]);
    len += snprintf(header + len, sizeof header - (size_t)len, ndim == 1 ? ",), }" : "), }");
    /* pad with spaces so that magic + version + length + header + '\n' is a
     * multiple of 64 bytes (what NumPy writes; keeps the data aligned) */
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    memset(header + len, ' ', (size_t)pad);
    len += pad;
    header[len++] = '\n';

    FILE *f = fopen(path, "wb");
    if (!f) return VCATTN_STATUS_IO_ERROR;
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(len & 0xFF),
                       (uint8_t)(len >> 8)};
    int ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre &&
             fwrite(header, 1, (size_t)len, f) == (size_t)len;
    if (ok && npy_host_is_little()) {
        ok = fwrite(data, sizeof(float), (size_t)count, f) == (size_t)count;
    } else if (ok) { /* big-endian host: write little-endian bytes */
        for (int64_t i = 0; ok && i < count; ++i) {
            uint32_t u = vc_f32_bits(data[i]);
            uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
            ok = fwrite(b, 1, 4, f) == 4;
        }
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        remove(path); /* do not leave a truncated file behind */
        return VCATTN_STATUS_IO_ERROR;
    }
    return VCATTN_STATUS_SUCCESS;
}
