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
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "npy_internal.h"
#include "numerics.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1u << 20) /* far above any real header; caps the malloc */
#define NPY_MAX_DIMS 64           /* NumPy's own limit */
#define NPY_CHUNK 65536           /* elements per read of 16-bit data */

typedef enum { NPY_F32, NPY_F16, NPY_BF16, NPY_F64 } npy_dtype;

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
    int structured;               /* descr is a list: a structured dtype */
    const char *why;              /* what is malformed, when parsing fails */
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

static int npy_bad(npy_header *h, const char *why) {
    h->why = why;
    return 0;
}

static int npy_parse_header(const char *text, size_t len, npy_header *h) {
    npy_cursor c = {text, text + len};
    memset(h, 0, sizeof *h);
    if (!npy_accept(&c, '{')) return npy_bad(h, "it does not start with '{'");
    for (;;) {
        if (npy_accept(&c, '}')) break;
        char key[32];
        int trunc;
        if (!npy_string(&c, key, sizeof key, &trunc)) return npy_bad(h, "a key is not a quoted string");
        if (!npy_accept(&c, ':')) return npy_bad(h, "a key is not followed by ':'");
        if (!trunc && strcmp(key, "descr") == 0) {
            if (h->have_descr) return npy_bad(h, "'descr' appears twice");
            npy_skip_ws(&c);
            if (c.p < c.end && *c.p == '[') { /* a list descr: a structured dtype */
                h->structured = 1;
                return npy_bad(h, "'descr' is a list (a structured dtype)");
            }
            if (!npy_string(&c, h->descr, sizeof h->descr, &trunc)) return npy_bad(h, "'descr' is not a string");
            if (trunc) return npy_bad(h, "'descr' is too long for a dtype");
            h->have_descr = 1;
        } else if (!trunc && strcmp(key, "fortran_order") == 0) {
            if (h->have_fortran) return npy_bad(h, "'fortran_order' appears twice");
            if (npy_accept_word(&c, "True")) h->fortran_order = 1;
            else if (npy_accept_word(&c, "False")) h->fortran_order = 0;
            else return npy_bad(h, "'fortran_order' is not True or False");
            h->have_fortran = 1;
        } else if (!trunc && strcmp(key, "shape") == 0) {
            if (h->have_shape) return npy_bad(h, "'shape' appears twice");
            if (!npy_tuple(&c, h)) return npy_bad(h, "'shape' is not a tuple of integers");
            h->have_shape = 1;
        } else if (!npy_skip_value(&c)) {
            return npy_bad(h, "a value is not a string, True/False/None, an integer or a tuple");
        }
        if (npy_accept(&c, '}')) break;
        if (!npy_accept(&c, ',')) return npy_bad(h, "entries are not separated by ','");
    }
    npy_skip_ws(&c);
    while (c.p < c.end && *c.p == '\0') ++c.p; /* tolerate NUL padding */
    if (c.p != c.end) return npy_bad(h, "text follows the closing '}'");
    if (!h->have_descr) return npy_bad(h, "the key 'descr' is missing");
    if (!h->have_fortran) return npy_bad(h, "the key 'fortran_order' is missing");
    if (!h->have_shape) return npy_bad(h, "the key 'shape' is missing");
    return 1;
}

/* 1: supported (little-endian); 0: unsupported; -1: a supported type in
 * big-endian byte order. */
static int npy_dtype_from_descr(const char *d, npy_dtype *t, int *itemsize) {
    if (strcmp(d, "<f4") == 0) { *t = NPY_F32; *itemsize = 4; return 1; }
    if (strcmp(d, "<f2") == 0) { *t = NPY_F16; *itemsize = 2; return 1; }
    if (strcmp(d, "<f8") == 0) { *t = NPY_F64; *itemsize = 8; return 1; }
    if (strcmp(d, "<u2") == 0 || strcmp(d, "<V2") == 0 || strcmp(d, "|V2") == 0) {
        *t = NPY_BF16;
        *itemsize = 2;
        return 1;
    }
    if (d[0] == '>' && (strcmp(d + 1, "f4") == 0 || strcmp(d + 1, "f2") == 0 ||
                        strcmp(d + 1, "f8") == 0 || strcmp(d + 1, "u2") == 0 ||
                        strcmp(d + 1, "V2") == 0))
        return -1;
    return 0; /* other types and sizes */
}

/* ---- errors --------------------------------------------------------------------- */

static vcattn_status npy_status_of(vcattn_npy_reason r) {
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

const char *vcattn_npy_reason_string(vcattn_npy_reason reason) {
    switch (reason) {
    case VCATTN_NPY_OK: return "success";
    case VCATTN_NPY_NULL_ARGUMENT: return "a required pointer (path, data or shape) is NULL";
    case VCATTN_NPY_OPEN_FAILED: return "the file could not be opened (missing, unreadable, or a directory)";
    case VCATTN_NPY_READ_FAILED: return "reading the file failed";
    case VCATTN_NPY_NOT_NPY: return "not a .npy file (no \\x93NUMPY magic): write it with numpy.save";
    case VCATTN_NPY_UNSUPPORTED_VERSION: return "unsupported .npy format version (1.0, 2.0 and 3.0 are read)";
    case VCATTN_NPY_BAD_HEADER: return "malformed .npy header: write the file with numpy.save";
    case VCATTN_NPY_UNSUPPORTED_DTYPE:
        return "unsupported dtype: save float32, float16, bfloat16 or float64 (e.g. x.astype(np.float32))";
    case VCATTN_NPY_BIG_ENDIAN: return "big-endian data: save little-endian, e.g. x.astype('<f4')";
    case VCATTN_NPY_FORTRAN_ORDER:
        return "the array is in Fortran order: save a C-order copy, np.save(path, np.ascontiguousarray(x))";
    case VCATTN_NPY_WRONG_RANK: return "the array is not 4-D: reshape it to (B, H, S, D) before saving";
    case VCATTN_NPY_ZERO_DIMENSION: return "the array has a dimension of size 0";
    case VCATTN_NPY_TOO_LARGE: return "the array's element count overflows";
    case VCATTN_NPY_TRUNCATED: return "the file is shorter than its header says (truncated: an interrupted save?)";
    case VCATTN_NPY_FLOAT64_OUT_OF_RANGE:
        return "a finite float64 value is beyond float32's range (|x| > 3.4e38): rescale the data";
    case VCATTN_NPY_OUT_OF_MEMORY: return "out of memory";
    case VCATTN_NPY_REASON_COUNT: break;
    }
    return "unknown reason";
}

/* Records the reason (and a formatted message, when there is an error
 * struct) and returns the reason's status. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static vcattn_status npy_fail(vcattn_npy_error *e, vcattn_npy_reason r, const char *fmt, ...) {
    if (e) {
        e->reason = r;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof e->message, fmt, ap);
        va_end(ap);
    }
    return npy_status_of(r);
}

/* The dtype string as the messages show it: printable ASCII as is, any other
 * byte (a newline, an escape sequence, UTF-8) as \xNN, so that a message
 * stays one line of plain text whatever the file holds.  cap >= 4 * 16. */
static void npy_descr_text(const char *descr, char *buf, size_t cap) {
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)descr; *c && n + 5 <= cap; ++c) {
        if (*c >= 0x20 && *c < 0x7F) buf[n++] = (char)*c;
        else n += (size_t)snprintf(buf + n, cap - n, "\\x%02X", *c);
    }
    buf[n] = '\0';
}

/* "(2, 3, 4)" for the messages; at most the 8 dims the header kept */
static void npy_shape_text(const npy_header *h, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < h->ndim && i < 8 && n < cap; ++i)
        n += (size_t)snprintf(buf + n, cap - n, i + 1 < h->ndim ? "%lld, " : "%lld", (long long)h->shape[i]);
    if (n < cap && h->ndim > 8) n += (size_t)snprintf(buf + n, cap - n, "...");
    if (n < cap) snprintf(buf + n, cap - n, h->ndim == 1 ? ",)" : ")");
}

/* ---- load ------------------------------------------------------------------------ */

/* fread of exactly `bytes`; *got = bytes read.  Short: TRUNCATED; a read
 * error: READ_FAILED. */
static vcattn_npy_reason npy_read(FILE *f, void *dst, size_t bytes, size_t *got) {
    size_t n = bytes ? fread(dst, 1, bytes, f) : 0;
    if (got) *got = n;
    if (n == bytes) return VCATTN_NPY_OK;
    return ferror(f) ? VCATTN_NPY_READ_FAILED : VCATTN_NPY_TRUNCATED;
}

static vcattn_status npy_load_file(FILE *f, const char *path, float **data, int64_t shape[4],
                                   vcattn_npy_error *e, char descr[16]) {
    uint8_t pre[12];
    size_t got = 0;
    vcattn_npy_reason r = npy_read(f, pre, 10, &got);
    if (r == VCATTN_NPY_READ_FAILED) return npy_fail(e, r, "%s: read error in the preamble", path);
    /* a short file that is not even a prefix of the magic is not .npy at all */
    if (memcmp(pre, NPY_MAGIC, got < NPY_MAGIC_LEN ? got : NPY_MAGIC_LEN) != 0 || got == 0)
        return got == 0 ? npy_fail(e, VCATTN_NPY_NOT_NPY, "%s: the file is empty, not a .npy file", path)
                        : npy_fail(e, VCATTN_NPY_NOT_NPY,
                                   "%s: not a .npy file (it does not start with \\x93NUMPY); write it with numpy.save",
                                   path);
    if (r != VCATTN_NPY_OK)
        return npy_fail(e, r, "%s: truncated: the file ends after %zu bytes, inside the 10-byte preamble", path, got);
    uint32_t hlen;
    if (pre[6] == 1) {
        hlen = (uint32_t)pre[8] | ((uint32_t)pre[9] << 8);
    } else if (pre[6] == 2 || pre[6] == 3) { /* 3.0: same layout, UTF-8 header */
        r = npy_read(f, pre + 10, 2, NULL);
        if (r != VCATTN_NPY_OK)
            return npy_fail(e, r, "%s: %s in the 12-byte preamble of format version %d", path,
                            r == VCATTN_NPY_TRUNCATED ? "the file ends" : "read error", pre[6]);
        hlen = (uint32_t)pre[8] | ((uint32_t)pre[9] << 8) | ((uint32_t)pre[10] << 16) |
               ((uint32_t)pre[11] << 24);
    } else {
        return npy_fail(e, VCATTN_NPY_UNSUPPORTED_VERSION,
                        "%s: .npy format version %d.%d is not supported (1.0, 2.0 and 3.0 are read)", path,
                        pre[6], pre[7]);
    }
    if (hlen == 0 || hlen > NPY_MAX_HEADER)
        return npy_fail(e, VCATTN_NPY_BAD_HEADER, "%s: malformed header: its length %lu is %s", path,
                        (unsigned long)hlen, hlen == 0 ? "zero" : "beyond 1 MiB");

    char *text = (char *)malloc(hlen);
    if (!text) return npy_fail(e, VCATTN_NPY_OUT_OF_MEMORY, "%s: out of memory for the header", path);
    r = npy_read(f, text, hlen, &got);
    npy_header h;
    int parsed = r == VCATTN_NPY_OK && npy_parse_header(text, hlen, &h);
    free(text);
    if (r == VCATTN_NPY_TRUNCATED)
        return npy_fail(e, r, "%s: truncated: the file ends %zu bytes into a %lu-byte header", path, got,
                        (unsigned long)hlen);
    if (r != VCATTN_NPY_OK) return npy_fail(e, r, "%s: read error in the header", path);
    if (!parsed && h.structured)
        return npy_fail(e, VCATTN_NPY_UNSUPPORTED_DTYPE,
                        "%s: a structured dtype is not supported; save a plain float32 array", path);
    if (!parsed)
        return npy_fail(e, VCATTN_NPY_BAD_HEADER, "%s: malformed header: %s; write the file with numpy.save",
                        path, h.why ? h.why : "it cannot be parsed");

    npy_dtype dtype;
    int itemsize;
    char dims[200];
    npy_shape_text(&h, dims, sizeof dims);
    char shown[4 * sizeof h.descr + 1];
    npy_descr_text(h.descr, shown, sizeof shown);
    int known = npy_dtype_from_descr(h.descr, &dtype, &itemsize);
    if (known < 0)
        return npy_fail(e, VCATTN_NPY_BIG_ENDIAN,
                        "%s: dtype '%s' is big-endian; save little-endian data, e.g. x.astype('<%s')", path,
                        h.descr, h.descr + 1);
    if (known == 0)
        return npy_fail(e, VCATTN_NPY_UNSUPPORTED_DTYPE,
                        "%s: dtype '%s' is not supported; save float32, float16, bfloat16 or float64, "
                        "e.g. x.astype(np.float32)", path, shown);
    if (h.ndim != 4)
        return npy_fail(e, VCATTN_NPY_WRONG_RANK,
                        "%s: shape %s has %d dimension%s; a 4-D (batch, heads, seq, head_dim) array is needed: "
                        "reshape it before saving (e.g. x[None] adds a batch axis)", path, dims, h.ndim,
                        h.ndim == 1 ? "" : "s");
    if (h.fortran_order)
        return npy_fail(e, VCATTN_NPY_FORTRAN_ORDER,
                        "%s: the array is stored in Fortran order (fortran_order: True); save a C-order copy: "
                        "np.save(path, np.ascontiguousarray(x))", path);
    if (h.overflow)
        return npy_fail(e, VCATTN_NPY_TOO_LARGE, "%s: a dimension of shape %s does not fit in 64 bits", path,
                        dims);
    for (int i = 0; i < 4; ++i)
        if (h.shape[i] < 0)
            return npy_fail(e, VCATTN_NPY_BAD_HEADER, "%s: malformed header: shape %s has a negative dimension",
                            path, dims);
    int64_t count;
    vcattn_status st = vc_count4(h.shape[0], h.shape[1], h.shape[2], h.shape[3], sizeof(float), &count);
    if (st == VCATTN_STATUS_BAD_SHAPE)
        return npy_fail(e, VCATTN_NPY_ZERO_DIMENSION, "%s: shape %s has a dimension of size 0", path, dims);
    if (st != VCATTN_STATUS_SUCCESS || (uint64_t)count > (uint64_t)INT64_MAX / (uint64_t)itemsize)
        return npy_fail(e, VCATTN_NPY_TOO_LARGE, "%s: shape %s has too many elements to index", path, dims);
    const uint64_t need = (uint64_t)count * (uint64_t)itemsize;

    /* A short file is found before allocating, so a header that claims
     * terabytes costs nothing (when the stream can seek; else fread finds it). */
    long here = ftell(f);
    if (here >= 0 && fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        if (fseek(f, here, SEEK_SET) != 0) return npy_fail(e, VCATTN_NPY_READ_FAILED, "%s: seek failed", path);
        if (end >= here && (uint64_t)(end - here) < need)
            return npy_fail(e, VCATTN_NPY_TRUNCATED,
                            "%s: truncated: dtype '%s' and shape %s need %llu data bytes, the file holds %llu "
                            "(an interrupted save?)", path, h.descr, dims, (unsigned long long)need,
                            (unsigned long long)(end - here));
    }

    float *out = (float *)malloc(sizeof(float) * (size_t)count);
    if (!out) return npy_fail(e, VCATTN_NPY_OUT_OF_MEMORY, "%s: out of memory for %lld floats", path, (long long)count);
    int64_t done = 0; /* elements decoded */
    r = VCATTN_NPY_OK;
    if (dtype == NPY_F32) {
        r = npy_read(f, out, sizeof(float) * (size_t)count, &got);
        done = (int64_t)(got / sizeof(float));
        if (r == VCATTN_NPY_OK && !npy_host_is_little()) {
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
        uint8_t *chunk = (uint8_t *)malloc((size_t)itemsize * NPY_CHUNK);
        if (!chunk) r = VCATTN_NPY_OUT_OF_MEMORY;
        for (int64_t i = 0; r == VCATTN_NPY_OK && i < count; i += NPY_CHUNK) {
            int64_t n = count - i < NPY_CHUNK ? count - i : NPY_CHUNK;
            r = npy_read(f, chunk, (size_t)itemsize * (size_t)n, &got);
            if (r != VCATTN_NPY_OK) {
                done = i + (int64_t)(got / (size_t)itemsize);
                break;
            }
            for (int64_t j = 0; j < n; ++j) {
                const uint8_t *b = chunk + (size_t)itemsize * (size_t)j;
                if (dtype == NPY_F64) {
                    uint64_t u = 0;
                    for (int k = 7; k >= 0; --k) u = (u << 8) | b[k];
                    double x;
                    memcpy(&x, &u, sizeof x);
                    float y = (float)x; /* round to nearest; NaN and Inf stay */
                    if (isfinite(x) && !isfinite(y)) {
                        free(chunk);
                        free(out);
                        return npy_fail(e, VCATTN_NPY_FLOAT64_OUT_OF_RANGE,
                                        "%s: float64 element %lld is %g, beyond float32's range (|x| <= 3.4e38): "
                                        "rescale the data", path, (long long)(i + j), x);
                    }
                    out[i + j] = y;
                } else {
                    uint16_t u = (uint16_t)(b[0] | (b[1] << 8));
                    out[i + j] = dtype == NPY_F16 ? vc_fp16_to_f32(u) : vc_bf16_to_f32(u);
                }
            }
        }
        free(chunk);
    }
    if (r != VCATTN_NPY_OK) {
        free(out);
        if (r == VCATTN_NPY_TRUNCATED)
            return npy_fail(e, r, "%s: truncated: the data ends after %lld of %lld elements (an interrupted save?)",
                            path, (long long)done, (long long)count);
        if (r == VCATTN_NPY_OUT_OF_MEMORY) return npy_fail(e, r, "%s: out of memory", path);
        return npy_fail(e, r, "%s: read error in the data", path);
    }
    /* Bytes after the data are ignored, as np.load does. */
    *data = out;
    for (int i = 0; i < 4; ++i) shape[i] = h.shape[i];
    if (descr) memcpy(descr, h.descr, sizeof h.descr);
    return npy_fail(e, VCATTN_NPY_OK, "%s", "");
}

/* The state every return leaves behind: no data, an empty message. */
static void npy_reset(float **data, vcattn_npy_error *error, char descr[16]) {
    if (error) {
        error->reason = VCATTN_NPY_OK;
        error->message[0] = '\0';
    }
    if (data) *data = NULL;
    if (descr) descr[0] = '\0';
}

vcattn_status vc_npy_load_stream(FILE *f, const char *name, float **data, int64_t shape[4],
                                 vcattn_npy_error *error, char descr[16]) {
    npy_reset(data, error, descr);
    if (!f || !name || !data || !shape)
        return npy_fail(error, VCATTN_NPY_NULL_ARGUMENT, "vc_npy_load_stream: %s is NULL",
                        !f ? "the stream" : !name ? "name" : !data ? "data" : "shape");
    return npy_load_file(f, name, data, shape, error, descr);
}

vcattn_status vcattn_npy_load_ex(const char *path, float **data, int64_t shape[4],
                                 vcattn_npy_error *error) {
    npy_reset(data, error, NULL);
    if (!path || !data || !shape)
        return npy_fail(error, VCATTN_NPY_NULL_ARGUMENT, "vcattn_npy_load: %s is NULL",
                        !path ? "path" : !data ? "data" : "shape");
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        /* name the cause: the usual ones are a wrong path and a missing permission */
        int err = errno;
        if (err == ENOENT)
            return npy_fail(error, VCATTN_NPY_OPEN_FAILED,
                            "%s: no such file (missing: check the path and the working directory)", path);
        if (err == EACCES)
            return npy_fail(error, VCATTN_NPY_OPEN_FAILED, "%s: permission denied (make the file readable)", path);
        if (err == EISDIR || err == ENOTDIR)
            return npy_fail(error, VCATTN_NPY_OPEN_FAILED, "%s: %s", path,
                            err == EISDIR ? "is a directory, not a .npy file: give the path of the file inside it"
                                          : "a part of the path is not a directory");
        return npy_fail(error, VCATTN_NPY_OPEN_FAILED, "%s: cannot open the file (errno %d)", path, err);
    }
    /* A directory opens for reading on Linux and fails only at the first read
     * (EISDIR): say so instead of "read error in the preamble". */
    errno = 0;
    int c = fgetc(f);
    if (c == EOF && ferror(f) && errno == EISDIR) {
        fclose(f);
        return npy_fail(error, VCATTN_NPY_OPEN_FAILED,
                        "%s: is a directory, not a .npy file: give the path of the file inside it", path);
    }
    if (c != EOF && ungetc(c, f) == EOF) {
        fclose(f);
        return npy_fail(error, VCATTN_NPY_READ_FAILED, "%s: read error at the first byte", path);
    }
    clearerr(f);
    vcattn_status st = vc_npy_load_stream(f, path, data, shape, error, NULL);
    fclose(f);
    return st;
}

vcattn_status vcattn_npy_load(const char *path, float **data, int64_t shape[4]) {
    return vcattn_npy_load_ex(path, data, shape, NULL);
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
