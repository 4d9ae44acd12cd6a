/* fuzz_params.c - libFuzzer harness of the parameter checks of every public
 * CPU call (include/vcattn.h), and of what the calls do with what they accept.
 *
 * The first byte picks a call family; the rest is decoded into its
 * arguments: sizes (mostly small, sometimes an edge such as 0, -1, 128,
 * INT32_MAX + 1 or INT64_MAX), strides (contiguous, (B,S,H,D), padded,
 * zero, negative, overlapping, huge), methods and raw method flags (also out
 * of range), softmax scales (0, negative, 1e-30 .. 1e300, NaN, Inf), thread
 * counts, query-row lists, permutations (valid, broken), k-means settings,
 * schedules, workload fields, and data with NaN / Inf / subnormal / huge
 * values poked in.
 *
 * When the decoded arguments describe views that fit in small buffers (and
 * cheap work), the buffers are allocated at exactly the size the views span
 * (so ASan sees any read or write past them), the outputs pre-filled with a
 * NaN sentinel, and the call runs; otherwise only the checks run, with 1-float
 * buffers, and they must refuse (a call that accepted would read past them).
 * Invariants, beyond "no crash, no leak, no UB" (ASan + UBSan, nothing
 * recovers):
 *  - every status is one the call documents, and its string is not "unknown";
 *  - a full call agrees with vcattn_attention_params_validate;
 *  - NaN/Inf inside an input view: NON_FINITE; finite inputs and valid
 *    arguments: SUCCESS (or SCORE_OVERFLOW, only for scores near FP32's
 *    range), and then every output in the view is finite and nothing outside
 *    the output view was written;
 *  - the *_rows calls are bit-identical to those rows of the full call;
 *  - the planner gives a stable argsort of its labels, independent of the
 *    thread count, and vcattn_vsmooth_plan_heads the whole tensor's plan;
 *  - block-energy shares lie in [0, 1]; schedules, cube orders, codecs,
 *    metrics, presets and the .npy writer keep their documented contracts. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vcattn.h"
#include "vcattn_research.h"

#define REQUIRE(c)                                                                             \
    do {                                                                                       \
        if (!(c)) fuzz_fail(__LINE__, #c);                                                     \
    } while (0)

/* What the current call was given, printed with a broken invariant. */
static char g_case[512];

static void fuzz_fail(int line, const char *what) {
    fprintf(stderr, "fuzz_params.c:%d: invariant broken: %s\n  case: %s\n", line, what, g_case);
    abort();
}

/* Caps that keep a valid call cheap: floats per buffer, multiply-adds per call. */
#define BUF_CAP (1 << 18)
#define WORK_CAP (1 << 21)

/* ---- decoding the bytes ------------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t n;
} rd;

/* k little-endian bytes (zeros once the input is used up) */
static uint64_t rd_bytes(rd *r, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; ++i) {
        uint64_t b = 0;
        if (r->n) {
            b = *r->p++;
            --r->n;
        }
        v |= b << (8 * i);
    }
    return v;
}

static unsigned rd_u8(rd *r) { return (unsigned)rd_bytes(r, 1); }

static const int64_t k_edge[] = {0, -1, 1, 2, 3, 127, 128, 129, 255, 256, 257, INT32_MAX,
                                 (int64_t)INT32_MAX + 1, INT64_MAX, INT64_MIN, (int64_t)1 << 32,
                                 (int64_t)1 << 62, -(int64_t)128, (int64_t)1 << 20, 65};
#define N_EDGE (sizeof k_edge / sizeof k_edge[0])

/* a size: mostly 1..small, sometimes an edge value, rarely 8 raw bytes */
static int64_t rd_size(rd *r, int64_t small) {
    unsigned b = rd_u8(r);
    if (b < 216) return 1 + (int64_t)(b % (unsigned)small);
    if (b < 252) return k_edge[(b - 216) % N_EDGE];
    return (int64_t)rd_bytes(r, 8);
}

/* a sequence length: short, around the 128-row tile, or an edge */
static int64_t rd_seq(rd *r) {
    static const int64_t tile[] = {64, 100, 127, 128, 129, 130, 200, 255, 256, 257};
    unsigned b = rd_u8(r);
    if (b < 150) return 1 + b % 40;
    if (b < 220) return tile[b % 10];
    return rd_size(r, 8);
}

static int64_t rd_head_dim(rd *r) {
    static const int64_t other[] = {0, -1, 1, 16, 32, 63, 65, 96, 127, 129, 256, INT64_MAX};
    unsigned b = rd_u8(r);
    if (b < 200) return b & 1 ? 128 : 64;
    return other[b % 12];
}

/* any positive dimension (the planner and the metrics take any D) */
static int64_t rd_any_dim(rd *r) {
    unsigned b = rd_u8(r);
    if (b < 160) return 1 + b % 20;
    if (b < 230) return b & 1 ? 128 : 64;
    return rd_size(r, 4);
}

static double rd_scale(rd *r) {
    static const double t[] = {0.0, 0.0, 0.0, -1.0, 1e-30, 0.125, 1.0, 7.0, 1e6, 1e30, 1e300, DBL_MAX,
                               5e-324, NAN, INFINITY, -INFINITY};
    return t[rd_u8(r) % 16];
}

static int rd_threads(rd *r) {
    static const int t[] = {1, 1, 2, 0, 3, -1, INT_MIN, 1};
    return t[rd_u8(r) % 8];
}

/* splitmix64 */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* roughly N(0, 1): the sum of four uniforms, centred and scaled */
static double normalish(uint64_t *s) {
    double a = 0.0;
    for (int i = 0; i < 4; ++i) a += (double)(mix(s) >> 11) * 0x1.0p-53;
    return (a - 2.0) * 1.7320508075688772;
}

static const float k_special[] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, -0.0f,
                                  0.0f, 1e30f, -1e30f, 1e-30f, 65504.0f, 448.0f, 1e20f, 3.0e38f};

/* Fills x[0..n): a scaled, offset normal field, then up to three special
 * values (NaN, Inf, FLT_MAX, subnormals, -0 ...) at decoded positions. */
static void rd_fill(rd *r, float *x, int64_t n) {
    static const double scales[] = {1.0, 1.0, 1.0, 1e-40, 1e-30, 1e-10, 1e-3, 1e3, 1e6, 1e20, 1e30, 1e37, 0.0, 2.0, 0.5, 1e10};
    static const double offsets[] = {0.0, 0.0, 0.0, 0.0, 1e4, -1e4, 1.0, 0.5};
    unsigned m = rd_u8(r);
    double scale = scales[m % 16], offset = offsets[(m >> 4) % 8];
    uint64_t s = rd_bytes(r, 2);
    for (int64_t i = 0; i < n; ++i) x[i] = (float)(normalish(&s) * scale + offset);
    unsigned pokes = rd_u8(r) % 4;
    for (unsigned i = 0; i < pokes && n > 0; ++i) {
        uint64_t pos = rd_bytes(r, 3) % (uint64_t)n;
        x[pos] = k_special[rd_u8(r) % 16];
    }
}

/* int64 arithmetic that says when it overflows (the harness itself must be UB-free) */
static int mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static int add_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

static void contiguous(int64_t H, int64_t S, int64_t D, int64_t st[3]) {
    int64_t sd = 0, hsd = 0;
    if (!mul_ok(S, D, &sd)) sd = INT64_MAX;
    if (!mul_ok(H, sd, &hsd)) hsd = INT64_MAX;
    st[0] = hsd;
    st[1] = sd;
    st[2] = D;
}

/* strides of a (B, H, S, D) view */
static void rd_strides(rd *r, int64_t H, int64_t S, int64_t D, int64_t st[3]) {
    unsigned m = rd_u8(r);
    contiguous(H, S, D, st);
    switch (m % 8) {
    case 0: case 1: case 2: break;
    case 3: { /* (B, S, H, D) */
        int64_t hd = 0, shd = 0;
        if (!mul_ok(H, D, &hd)) hd = INT64_MAX;
        if (!mul_ok(S, hd, &shd)) shd = INT64_MAX;
        st[0] = shd;
        st[1] = D;
        st[2] = hd;
        break;
    }
    case 4: { /* padded rows */
        int64_t pad = 1 + (m >> 3) % 8, row = 0;
        if (!add_ok(D, pad, &row)) row = INT64_MAX;
        contiguous(H, S, row, st);
        break;
    }
    case 5: st[(m >> 3) % 3] = 0; break; /* valid only where that axis has size 1 */
    case 6: st[(m >> 3) % 3] = k_edge[rd_u8(r) % N_EDGE]; break;
    default:
        for (int i = 0; i < 3; ++i) st[i] = rd_u8(r) < 128 ? (int64_t)(rd_u8(r) % 300) - 20 : k_edge[rd_u8(r) % N_EDGE];
    }
}

/* The elements a view spans, max offset + 1; 0 when the harness cannot
 * tell (a size <= 0, a negative stride, an overflow): no buffer then. */
static int64_t view_extent(int64_t B, int64_t H, int64_t S, int64_t D, const int64_t st[3]) {
    if (B <= 0 || H <= 0 || S <= 0 || D <= 0) return 0;
    const int64_t dims[3] = {B, H, S};
    int64_t ext = D;
    for (int i = 0; i < 3; ++i) {
        int64_t t;
        if (st[i] < 0 || !mul_ok(dims[i] - 1, st[i], &t) || !add_ok(ext, t, &ext)) return 0;
    }
    return ext;
}

static const float *view_row(const float *x, const int64_t st[3], int64_t b, int64_t h, int64_t s) {
    return x + b * st[0] + h * st[1] + s * st[2];
}

static int view_finite(const float *x, int64_t B, int64_t H, int64_t S, int64_t D, const int64_t st[3]) {
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s) {
                const float *row = view_row(x, st, b, h, s);
                for (int64_t d = 0; d < D; ++d)
                    if (!isfinite(row[d])) return 0;
            }
    return 1;
}

static double view_amax(const float *x, int64_t B, int64_t H, int64_t S, int64_t D, const int64_t st[3]) {
    double m = 0.0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s) {
                const float *row = view_row(x, st, b, h, s);
                for (int64_t d = 0; d < D; ++d) m = fmax(m, fabs((double)row[d]));
            }
    return m;
}

static int all_finite_f(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static int all_finite_d(const double *x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static void fill_nan(float *x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = NAN;
}

/* An output buffer: n floats, exactly (ASan sees any write past it), NaN
 * sentinels everywhere (an element of the view left unwritten stays NaN). */
static float *out_buffer(int64_t n) {
    float *x = (float *)malloc(sizeof(float) * (size_t)n);
    REQUIRE(x != NULL);
    fill_nan(x, n);
    return x;
}

/* Outside the view, o must still hold the NaN sentinel; inside it, finite values. */
static void check_output_view(const float *o, int64_t ext, int64_t B, int64_t H, int64_t S, int64_t D,
                              const int64_t st[3]) {
    unsigned char *in = (unsigned char *)calloc((size_t)ext, 1);
    REQUIRE(in != NULL);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s) {
                const int64_t off = b * st[0] + h * st[1] + s * st[2];
                for (int64_t d = 0; d < D; ++d) {
                    REQUIRE(isfinite(o[off + d])); /* written, and not NaN/Inf */
                    in[off + d] = 1;
                }
            }
    for (int64_t i = 0; i < ext; ++i)
        if (!in[i]) REQUIRE(isnan(o[i])); /* nothing written outside the view */
    free(in);
}

static void check_status_string(vcattn_status st) {
    const char *s = vcattn_status_string(st);
    REQUIRE(s != NULL && s[0] != '\0' && strcmp(s, "unknown status") != 0);
}

/* ---- attention: validate, reference, simulation, the *_rows calls --------------------- */

static int config_documented(const vcattn_method_config *c) {
    return (unsigned)c->qk_format <= VCATTN_QK_FORMAT_NVFP4 &&
           (unsigned)c->qk_granularity <= VCATTN_QK_GRANULARITY_THREAD &&
           (unsigned)c->v_format <= VCATTN_V_FORMAT_NVFP4 && (unsigned)c->p_format <= VCATTN_P_FORMAT_SPLIT &&
           (unsigned)c->p_scale <= VCATTN_P_SCALE_BLOCK_MAX && c->exact_keys >= 0 && c->exact_keys <= 16 &&
           /* the block-max scale's FP16 bound holds for P <= 448 only (vcattn.h) */
           (c->p_scale != VCATTN_P_SCALE_BLOCK_MAX || c->p_format == VCATTN_P_FORMAT_E4M3 ||
            c->p_format == VCATTN_P_FORMAT_EXPCAST || c->p_format == VCATTN_P_FORMAT_SPLIT);
}

static void rd_config(rd *r, vcattn_method_config *c) {
    unsigned m = rd_u8(r);
    if (m < 200) {
        REQUIRE(vcattn_method_config_get((vcattn_method)(m % VCATTN_METHOD_COUNT), c) == VCATTN_STATUS_SUCCESS);
        if (m >= 150) c->v_smooth = !c->v_smooth; /* a named method with one flag flipped */
        return;
    }
    static const int flag[] = {0, 1, 1, 0, 2, -1};
    c->qk_format = (vcattn_qk_format)((int)(rd_u8(r) % 6) - 1);
    c->qk_granularity = (vcattn_qk_granularity)((int)(rd_u8(r) % 4) - 1);
    c->smooth_k = flag[rd_u8(r) % 6];
    c->smooth_q = flag[rd_u8(r) % 6];
    c->v_format = (vcattn_v_format)((int)(rd_u8(r) % 6) - 1);
    c->v_smooth = flag[rd_u8(r) % 6];
    c->p_format = (vcattn_p_format)((int)(rd_u8(r) % 8) - 1); /* -1 .. SPLIT + 1 */
    c->rowsum_from_quantized_p = flag[rd_u8(r) % 6];
    c->p_scale = (vcattn_p_scale)((int)(rd_u8(r) % 4) - 1);
    static const int keys[] = {0, 16, 1, 3, -1, 17};
    c->exact_keys = keys[rd_u8(r) % 6];
}

/* perm (B, H, Skv): mode 0 identity, 1 shuffled, 2 shuffled then broken */
static int32_t *make_perm(rd *r, int64_t n_bh, int64_t S, int *valid) {
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_bh * S));
    REQUIRE(perm != NULL);
    unsigned mode = rd_u8(r) % 3;
    uint64_t s = rd_bytes(r, 2);
    for (int64_t bh = 0; bh < n_bh; ++bh) {
        int32_t *p = perm + bh * S;
        for (int64_t j = 0; j < S; ++j) p[j] = (int32_t)j;
        if (mode >= 1)
            for (int64_t j = S - 1; j > 0; --j) {
                int64_t i = (int64_t)(mix(&s) % (uint64_t)(j + 1));
                int32_t t = p[i];
                p[i] = p[j];
                p[j] = t;
            }
    }
    *valid = 1;
    if (mode == 2) { /* one entry out of range, or a duplicate */
        static const int32_t bad[] = {-1, INT32_MIN, INT32_MAX, 0};
        const int64_t bh = (int64_t)(rd_bytes(r, 1) % (uint64_t)n_bh), j = (int64_t)(rd_bytes(r, 2) % (uint64_t)S);
        int32_t *p = perm + bh * S;
        int32_t v = bad[rd_u8(r) % 4];
        if (v == 0) v = S > 1 ? p[(j + 1) % S] : -1;
        if (v == INT32_MAX && S == INT32_MAX) v = -1;
        p[j] = v;
        *valid = 0;
    }
    return perm;
}

typedef struct {
    vcattn_attention_params p;
    int64_t ext[4]; /* q, k, v, o */
    int compute;
} att_case;

static const vcattn_status k_attention_statuses[] = {
    VCATTN_STATUS_SUCCESS,         VCATTN_STATUS_NULL_POINTER, VCATTN_STATUS_BAD_SHAPE,
    VCATTN_STATUS_BAD_STRIDE,      VCATTN_STATUS_UNSUPPORTED_HEAD_DIM, VCATTN_STATUS_SIZE_OVERFLOW,
    VCATTN_STATUS_NON_FINITE,      VCATTN_STATUS_INVALID_ARGUMENT, VCATTN_STATUS_OUT_OF_MEMORY,
    VCATTN_STATUS_SCORE_OVERFLOW};

static void check_attention_status(vcattn_status st) {
    int known = 0;
    for (size_t i = 0; i < sizeof k_attention_statuses / sizeof k_attention_statuses[0]; ++i)
        known |= st == k_attention_statuses[i];
    REQUIRE(known);
    check_status_string(st);
}

static void op_attention(rd *r) {
    att_case c;
    memset(&c, 0, sizeof c);
    vcattn_attention_params *p = &c.p;
    p->batch = rd_size(r, 2);
    p->heads = rd_size(r, 2);
    p->seq_q = rd_seq(r);
    p->seq_kv = rd_seq(r);
    p->head_dim = rd_head_dim(r);
    const int64_t B = p->batch, H = p->heads, Sq = p->seq_q, Skv = p->seq_kv, D = p->head_dim;
    if (rd_u8(r) < 64) {
        /* the contiguous strides of vcattn_attention_params_init, for any sizes */
        vcattn_attention_params_init(p, B, H, Sq, Skv, D, NULL, NULL, NULL, NULL);
        REQUIRE(p->lse == NULL && p->softmax_scale == 0.0 && p->num_threads == 0);
    } else {
        rd_strides(r, H, Sq, D, p->q_stride);
        rd_strides(r, H, Skv, D, p->k_stride);
        rd_strides(r, H, Skv, D, p->v_stride);
        rd_strides(r, H, Sq, D, p->o_stride);
    }
    p->softmax_scale = rd_scale(r);
    p->num_threads = rd_threads(r);
    const unsigned flags = rd_u8(r);
    vcattn_method_config cfg;
    rd_config(r, &cfg);

    c.ext[0] = view_extent(B, H, Sq, D, p->q_stride);
    c.ext[1] = view_extent(B, H, Skv, D, p->k_stride);
    c.ext[2] = view_extent(B, H, Skv, D, p->v_stride);
    c.ext[3] = view_extent(B, H, Sq, D, p->o_stride);
    int64_t work = 0, n_bh = 0, bhs = 0;
    c.compute = 1;
    for (int i = 0; i < 4; ++i) c.compute &= c.ext[i] > 0 && c.ext[i] <= BUF_CAP;
    c.compute = c.compute && mul_ok(B, H, &n_bh) && mul_ok(n_bh, Sq, &work) && mul_ok(work, Skv, &work) &&
                mul_ok(work, D, &work) && work <= WORK_CAP && mul_ok(n_bh, Sq > Skv ? Sq : Skv, &bhs) &&
                bhs <= BUF_CAP;

    float *buf[4];
    for (int i = 0; i < 4; ++i) {
        buf[i] = (float *)malloc(sizeof(float) * (size_t)(c.compute ? c.ext[i] : 1));
        REQUIRE(buf[i] != NULL);
        if (i < 3) rd_fill(r, buf[i], c.compute ? c.ext[i] : 1);
        else fill_nan(buf[i], c.compute ? c.ext[i] : 1);
    }
    p->q = buf[0];
    p->k = buf[1];
    p->v = buf[2];
    p->o = buf[3];
    if ((flags & 7) == 7) { /* one pointer NULL */
        const unsigned w = (flags >> 3) % 4;
        if (w == 0) p->q = NULL;
        if (w == 1) p->k = NULL;
        if (w == 2) p->v = NULL;
        if (w == 3) p->o = NULL;
    }
    float *lse = NULL;
    if (c.compute && (flags & 8)) {
        lse = out_buffer(B * H * Sq);
        p->lse = lse;
    }

    snprintf(g_case, sizeof g_case,
             "attention B=%lld H=%lld Sq=%lld Skv=%lld D=%lld q_stride={%lld,%lld,%lld} k={%lld,%lld,%lld} "
             "v={%lld,%lld,%lld} o={%lld,%lld,%lld} sm=%g threads=%d flags=0x%x cfg={%d,%d,%d,%d,%d,%d,%d,%d,%d}",
             (long long)B, (long long)H, (long long)Sq, (long long)Skv, (long long)D, (long long)p->q_stride[0],
             (long long)p->q_stride[1], (long long)p->q_stride[2], (long long)p->k_stride[0], (long long)p->k_stride[1],
             (long long)p->k_stride[2], (long long)p->v_stride[0], (long long)p->v_stride[1], (long long)p->v_stride[2],
             (long long)p->o_stride[0], (long long)p->o_stride[1], (long long)p->o_stride[2], p->softmax_scale,
             p->num_threads, flags, (int)cfg.qk_format, (int)cfg.qk_granularity, cfg.smooth_k, cfg.smooth_q,
             (int)cfg.v_format, cfg.v_smooth, (int)cfg.p_format, cfg.rowsum_from_quantized_p, (int)cfg.p_scale);
    const vcattn_status st0 = vcattn_attention_params_validate(p);
    check_attention_status(st0);
    REQUIRE(vcattn_attention_params_validate(NULL) == VCATTN_STATUS_NULL_POINTER);
    /* documented preconditions the harness can see directly */
    /* a size of 0 (or less) first: an empty tensor's data pointer may well be NULL (params.c) */
    if (B <= 0 || H <= 0 || Sq <= 0 || Skv <= 0 || D <= 0) REQUIRE(st0 == VCATTN_STATUS_BAD_SHAPE);
    else if (!p->q || !p->k || !p->v || !p->o) REQUIRE(st0 == VCATTN_STATUS_NULL_POINTER);
    /* then the thread count (0..1024, params.c's VC_MAX_THREADS), then head_dim */
    else if (p->num_threads < 0 || p->num_threads > 1024) REQUIRE(st0 == VCATTN_STATUS_INVALID_ARGUMENT);
    else if (D != 64 && D != 128) REQUIRE(st0 == VCATTN_STATUS_UNSUPPORTED_HEAD_DIM);
    if (p->num_threads < 0 || isnan(p->softmax_scale) || p->softmax_scale == INFINITY) REQUIRE(st0 != VCATTN_STATUS_SUCCESS);
    for (int t = 0; t < 3; ++t)
        if (p->q_stride[t] < 0 || p->k_stride[t] < 0 || p->v_stride[t] < 0 || p->o_stride[t] < 0)
            REQUIRE(st0 != VCATTN_STATUS_SUCCESS);

    if (!c.compute) {
        /* the calls must refuse exactly like the checks (1-float buffers: an
         * acceptance would read past them) */
        if (st0 != VCATTN_STATUS_SUCCESS) {
            REQUIRE(vcattn_reference_attention(p) == st0);
            REQUIRE(vcattn_simulate_attention(p, &cfg, NULL, NULL) == st0);
        }
        goto done;
    }
    if (st0 != VCATTN_STATUS_SUCCESS) {
        REQUIRE(vcattn_reference_attention(p) == st0);
        REQUIRE(vcattn_simulate_attention(p, &cfg, NULL, NULL) == st0);
        goto done;
    }

    /* ---- valid parameters over real buffers ---- */
    const int finite = view_finite(p->q, B, H, Sq, D, p->q_stride) && view_finite(p->k, B, H, Skv, D, p->k_stride) &&
                       view_finite(p->v, B, H, Skv, D, p->v_stride);
    const double sm = p->softmax_scale > 0.0 ? p->softmax_scale : 1.0 / sqrt((double)D);
    /* a bound of |score|: where FP32 scores may legitimately overflow */
    const double q_amax = finite ? view_amax(p->q, B, H, Sq, D, p->q_stride) : INFINITY;
    const double k_amax = finite ? view_amax(p->k, B, H, Skv, D, p->k_stride) : INFINITY;
    const double score_bound = finite ? q_amax * k_amax * (double)D * sm : INFINITY;
    const double v_amax = finite ? view_amax(p->v, B, H, Skv, D, p->v_stride) : INFINITY;
    const int64_t nq = B * H * Sq * D;

    /* the reference */
    strncat(g_case, " [reference]", sizeof g_case - strlen(g_case) - 1);
    vcattn_status st = vcattn_reference_attention(p);
    check_attention_status(st);
    if (!finite) {
        REQUIRE(st == VCATTN_STATUS_NON_FINITE);
    } else {
        /* FP64 scores (or the scaled query q * sm, formed first) overflow only near 1e308; an LSE
         * (with lse set) beyond FP32 only if scores reach ~3e38 */
        REQUIRE(st == VCATTN_STATUS_SUCCESS ||
                (st == VCATTN_STATUS_SCORE_OVERFLOW &&
                 (score_bound > 1e300 || q_amax * sm > 1e300 || (lse && score_bound > 1e38))));
    }
    float *ref = NULL, *ref_lse = NULL;
    if (st == VCATTN_STATUS_SUCCESS) {
        check_output_view(p->o, c.ext[3], B, H, Sq, D, p->o_stride);
        if (lse && score_bound < 1e37) REQUIRE(all_finite_f(lse, B * H * Sq));
        ref = (float *)malloc(sizeof(float) * (size_t)c.ext[3]);
        REQUIRE(ref != NULL);
        memcpy(ref, p->o, sizeof(float) * (size_t)c.ext[3]);
        if (lse) {
            ref_lse = (float *)malloc(sizeof(float) * (size_t)(B * H * Sq));
            REQUIRE(ref_lse != NULL);
            memcpy(ref_lse, lse, sizeof(float) * (size_t)(B * H * Sq));
        }
    }

    /* the simulation, with the optional extra outputs */
    int perm_valid = 1;
    int32_t *perm = (flags & 16) ? make_perm(r, B * H, Skv, &perm_valid) : NULL;
    static const int64_t tv_strides[] = {1, 2, 16, 0, -1, INT64_MAX, 3, 1};
    const int64_t tv_stride = tv_strides[rd_u8(r) % 8];
    vcattn_sim_outputs extra;
    memset(&extra, 0, sizeof extra);
    const int want_extra = (flags & 32) != 0;
    int64_t ntv = 0;
    if (want_extra) {
        extra.o_pq_v = out_buffer(nq);
        extra.tv_row_stride = tv_stride;
        ntv = tv_stride >= 1 ? (Sq - 1) / tv_stride + 1 : 1;
        extra.row_tv = (double *)malloc(sizeof(double) * (size_t)(B * H * ntv));
        extra.o_f64 = (double *)malloc(sizeof(double) * (size_t)nq);
        REQUIRE(extra.row_tv && extra.o_f64);
        for (int64_t i = 0; i < B * H * ntv; ++i) extra.row_tv[i] = NAN;
        for (int64_t i = 0; i < nq; ++i) extra.o_f64[i] = NAN;
    }
    fill_nan(p->o, c.ext[3]);
    if (lse) fill_nan(lse, B * H * Sq);
    snprintf(g_case + strlen(g_case), sizeof g_case - strlen(g_case), " amax q %g k %g v %g, score bound %g",
             q_amax, k_amax, v_amax, score_bound);
    strncat(g_case, " [simulation]", sizeof g_case - strlen(g_case) - 1);
    st = vcattn_simulate_attention(p, &cfg, perm, want_extra ? &extra : NULL);
    check_attention_status(st);
    const int cfg_ok = config_documented(&cfg);
    const int args_ok = cfg_ok && (!cfg.v_smooth || perm_valid) && (!want_extra || tv_stride >= 1);
    if (!cfg_ok) REQUIRE(st == VCATTN_STATUS_INVALID_ARGUMENT);
    if (cfg_ok && !finite) REQUIRE(st == VCATTN_STATUS_NON_FINITE || st == VCATTN_STATUS_INVALID_ARGUMENT);
    if (args_ok && finite) {
        /* NVFP4 Q/K takes block scales only (the one undocumented refusal) */
        const int nvfp4_thread = cfg.qk_format == VCATTN_QK_FORMAT_NVFP4 && cfg.qk_granularity != VCATTN_QK_GRANULARITY_BLOCK;
        /* SCORE_OVERFLOW: scores FP32 cannot resolve (beyond 2^24 x 64 an FP32 score's rounding
         * exceeds an octave of P; with Q smoothing a score is two FP32 terms, and at ~1e26 a row
         * can lose every key, l = 0: fuzzed), sm * log2(e) beyond FP32, or Q, K or V within a
         * small factor of FLT_MAX (their smoothed values, or P V with quantized P summing to a bit
         * more than 1, past it) */
        REQUIRE(st == VCATTN_STATUS_SUCCESS ||
                (st == VCATTN_STATUS_SCORE_OVERFLOW &&
                 (score_bound > 1e9 || sm > 1e37 || fmax(fmax(q_amax, k_amax), v_amax) > FLT_MAX / 4)) ||
                (st == VCATTN_STATUS_INVALID_ARGUMENT && nvfp4_thread));
    }
    if (st == VCATTN_STATUS_SUCCESS) {
        REQUIRE(args_ok && finite);
        check_output_view(p->o, c.ext[3], B, H, Sq, D, p->o_stride);
        if (lse) REQUIRE(all_finite_f(lse, B * H * Sq));
        if (want_extra) {
            for (int64_t i = 0; i < nq; ++i)
                if (!isfinite(extra.o_pq_v[i]) || !isfinite(extra.o_f64[i])) {
                    snprintf(g_case + strlen(g_case), sizeof g_case - strlen(g_case), " element %lld: o_pq_v %g o_f64 %g",
                             (long long)i, (double)extra.o_pq_v[i], extra.o_f64[i]);
                    REQUIRE(isfinite(extra.o_pq_v[i]) && isfinite(extra.o_f64[i]));
                }
            /* half the L1 distance of the effective weights P_q / l to the exact
             * probabilities: <= 1 when they sum to 1 (row sum of the quantized P);
             * with the FP32 row sum they sum to at most the P format's largest
             * rounding ratio (NVFP4 P: 1.2 x 1.0625), so <= 0.5 (1 + 1.275) */
            const size_t at = strlen(g_case);
            for (int64_t i = 0; i < B * H * ntv; ++i) {
                snprintf(g_case + at, sizeof g_case - at, " row_tv[%lld] = %g", (long long)i, extra.row_tv[i]);
                REQUIRE(extra.row_tv[i] >= 0.0 && extra.row_tv[i] <= (cfg.rowsum_from_quantized_p ? 1.0 + 1e-6 : 1.1375));
            }
            g_case[at] = '\0';
        }
    }

    /* the *_rows calls: bit-identical to the listed rows of the full calls */
    if (flags & 64) {
        const int64_t n_rows = (int64_t)(rd_u8(r) % (Sq < 40 ? (unsigned)Sq + 2 : 42u)); /* 0 .. Sq+1 */
        int64_t *rows = (int64_t *)calloc((size_t)(n_rows > 0 ? n_rows : 1), sizeof(int64_t));
        REQUIRE(rows != NULL);
        /* bit 7: the policy's stratified rows instead of strided ones (the same contract) */
        const vcattn_status srows = (flags & 128) ? vcattn_stratified_rows(Sq, n_rows, rows)
                                                  : vcattn_strided_rows(Sq, n_rows, rows);
        REQUIRE(srows == (n_rows >= 1 && n_rows <= Sq ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_INVALID_ARGUMENT));
        int rows_ok = srows == VCATTN_STATUS_SUCCESS;
        if (rows_ok) {
            for (int64_t i = 0; i < n_rows; ++i) REQUIRE(rows[i] >= 0 && rows[i] < Sq && (i == 0 || rows[i] > rows[i - 1]));
            if (rd_u8(r) < 64 && n_rows > 1) { /* break the order */
                rows[1] = rows[0];
                rows_ok = 0;
            }
        } else {
            rows[0] = 0;
        }
        const int64_t ext_r = view_extent(B, H, n_rows > 0 ? n_rows : 1, D, p->o_stride);
        float *o_rows = out_buffer(ext_r > 0 ? ext_r : 1);
        float *lse_rows = lse ? out_buffer(B * H * (n_rows > 0 ? n_rows : 1)) : NULL;
        vcattn_attention_params pr = *p;
        pr.o = o_rows;
        pr.lse = lse_rows;
        strncat(g_case, " [rows]", sizeof g_case - strlen(g_case) - 1);
        for (int pass = 0; pass < 2; ++pass) {
            /* pass 0: the reference against `ref`; pass 1: the simulation against p->o */
            const float *full = pass == 0 ? ref : p->o;
            const float *full_lse = pass == 0 ? ref_lse : lse;
            const int full_ok = pass == 0 ? ref != NULL : st == VCATTN_STATUS_SUCCESS;
            fill_nan(o_rows, ext_r > 0 ? ext_r : 1);
            const vcattn_status s2 = pass == 0 ? vcattn_reference_attention_rows(&pr, rows, n_rows)
                                               : vcattn_simulate_attention_rows(&pr, &cfg, perm, rows, n_rows, NULL);
            check_attention_status(s2);
            if (!rows_ok) REQUIRE(s2 == VCATTN_STATUS_INVALID_ARGUMENT);
            if (rows_ok && full_ok) REQUIRE(s2 == VCATTN_STATUS_SUCCESS);
            if (s2 != VCATTN_STATUS_SUCCESS || !full_ok) continue;
            check_output_view(o_rows, ext_r, B, H, n_rows, D, p->o_stride);
            for (int64_t b = 0; b < B; ++b)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t i = 0; i < n_rows; ++i) {
                        const float *x = view_row(o_rows, p->o_stride, b, h, i);
                        const float *y = view_row(full, p->o_stride, b, h, rows[i]);
                        REQUIRE(memcmp(x, y, sizeof(float) * (size_t)D) == 0);
                        if (lse_rows && full_lse)
                            REQUIRE(memcmp(&lse_rows[(b * H + h) * n_rows + i], &full_lse[(b * H + h) * Sq + rows[i]],
                                           sizeof(float)) == 0);
                    }
        }
        free(rows);
        free(o_rows);
        free(lse_rows);
    }
    free(perm);
    free(extra.o_pq_v);
    free(extra.row_tv);
    free(extra.o_f64);
    free(ref);
    free(ref_lse);
done:
    for (int i = 0; i < 4; ++i) free(buf[i]);
    free(lse);
}

/* ---- the V-Smooth planner and the block-energy share ----------------------------------- */

static void check_plan_outputs(const int32_t *perm, const int32_t *labels, const float *cent, int64_t n_bh,
                               int64_t S, int64_t k, int64_t D) {
    unsigned char *seen = (unsigned char *)malloc((size_t)S);
    REQUIRE(seen != NULL);
    for (int64_t bh = 0; bh < n_bh; ++bh) {
        const int32_t *p = perm + bh * S;
        memset(seen, 0, (size_t)S);
        for (int64_t j = 0; j < S; ++j) {
            REQUIRE(p[j] >= 0 && p[j] < S && !seen[p[j]]);
            seen[p[j]] = 1;
        }
        if (labels) {
            const int32_t *l = labels + bh * S;
            for (int64_t j = 0; j < S; ++j) REQUIRE(l[j] >= 0 && l[j] < k);
            /* the stable argsort of the labels */
            for (int64_t j = 1; j < S; ++j)
                REQUIRE(l[p[j - 1]] < l[p[j]] || (l[p[j - 1]] == l[p[j]] && p[j - 1] < p[j]));
        }
    }
    if (cent) REQUIRE(all_finite_f(cent, n_bh * k * D));
    free(seen);
}

static void op_plan(rd *r) {
    const int64_t B = rd_size(r, 2), H = rd_size(r, 3), S = rd_seq(r), D = rd_any_dim(r);
    int64_t st[3];
    rd_strides(r, H, S, D, st);
    vcattn_kmeans_params km;
    vcattn_kmeans_params_init(&km);
    REQUIRE(km.clusters == 64 && km.iterations == 8 && km.init_centroids == NULL);
    static const int ks[] = {1, 2, 3, 4, 7, 16, 64, 65, 0, -1, INT_MIN, 1 << 20, 128, 200, 5, 8};
    static const int its[] = {1, 1, 2, 3, 0, -1, 1, 2};
    km.clusters = ks[rd_u8(r) % 16];
    km.iterations = its[rd_u8(r) % 8];
    km.seed = rd_bytes(r, 8);
    km.num_threads = rd_threads(r);
    const unsigned flags = rd_u8(r);
    const int64_t ext = view_extent(B, H, S, D, st);
    const int64_t k = km.clusters;
    const int warm = (flags & 1) != 0, want_labels = (flags & 2) != 0, want_cent = (flags & 4) != 0;
    int64_t n_bh = 0, work = 0, ncent = 0, nperm = 0;
    const int64_t ka = warm ? k : (k < S ? k : S);
    int compute = ext > 0 && ext <= BUF_CAP && mul_ok(B, H, &n_bh) && mul_ok(n_bh, S, &nperm) && nperm <= BUF_CAP &&
                  k >= 1 && km.iterations >= 1 && km.num_threads >= 0 && mul_ok(nperm, ka > 0 ? ka : 1, &work) &&
                  mul_ok(work, D, &work) && mul_ok(work, km.iterations, &work) && work <= WORK_CAP;
    if (compute && (warm || want_cent)) compute = mul_ok(n_bh, k, &ncent) && mul_ok(ncent, D, &ncent) && ncent <= BUF_CAP;
    if (!compute) {
        /* only what must be refused: a bad size, k, iteration or thread count, or stride */
        int must_refuse = B <= 0 || H <= 0 || S <= 0 || D <= 0 || k < 1 || km.iterations < 1 || km.num_threads < 0 ||
                          st[0] < 0 || st[1] < 0 || st[2] < 0;
        if (must_refuse) {
            float v1 = 0.0f;
            int32_t p1 = 0;
            vcattn_status s = vcattn_vsmooth_plan(&v1, B, H, S, D, st, &km, &p1, NULL, NULL);
            REQUIRE(s != VCATTN_STATUS_SUCCESS);
            check_status_string(s);
        }
        return;
    }
    float *v = (float *)malloc(sizeof(float) * (size_t)ext);
    REQUIRE(v != NULL);
    rd_fill(r, v, ext);
    float *init = NULL;
    if (warm) {
        init = (float *)malloc(sizeof(float) * (size_t)ncent);
        REQUIRE(init != NULL);
        rd_fill(r, init, ncent);
        km.init_centroids = init;
    }
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)nperm);
    int32_t *labels = want_labels ? (int32_t *)malloc(sizeof(int32_t) * (size_t)nperm) : NULL;
    float *cent = want_cent ? out_buffer(ncent) : NULL;
    REQUIRE(perm && (!want_labels || labels));
    const int finite = view_finite(v, B, H, S, D, st) && (!init || all_finite_f(init, ncent));
    vcattn_status s = vcattn_vsmooth_plan(v, B, H, S, D, st, &km, perm, labels, cent);
    check_status_string(s);
    REQUIRE(s == (finite ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_NON_FINITE) || s == VCATTN_STATUS_BAD_STRIDE ||
            s == VCATTN_STATUS_SIZE_OVERFLOW);
    if (s == VCATTN_STATUS_BAD_STRIDE) { /* the harness's own stride check disagrees only on overlap */
        goto done;
    }
    if (s == VCATTN_STATUS_SUCCESS) {
        check_plan_outputs(perm, labels, cent, n_bh, S, k, D);
        /* the same plan on one thread, and on each head's view by _heads */
        int32_t *perm1 = (int32_t *)malloc(sizeof(int32_t) * (size_t)nperm);
        REQUIRE(perm1 != NULL);
        vcattn_kmeans_params one = km;
        one.num_threads = 1;
        REQUIRE(vcattn_vsmooth_plan(v, B, H, S, D, st, &one, perm1, NULL, NULL) == VCATTN_STATUS_SUCCESS);
        REQUIRE(memcmp(perm, perm1, sizeof(int32_t) * (size_t)nperm) == 0);
        if (!warm && B == 1) {
            const int64_t fh = (int64_t)(rd_u8(r) % (unsigned)H), nh = 1 + (int64_t)(rd_u8(r) % (unsigned)(H - fh));
            REQUIRE(vcattn_vsmooth_plan_heads(v + fh * st[1], B, nh, fh, S, D, st, &one, perm1, NULL, NULL) ==
                    VCATTN_STATUS_SUCCESS);
            REQUIRE(memcmp(perm + fh * S, perm1, sizeof(int32_t) * (size_t)(nh * S)) == 0);
        }
        free(perm1);
        /* the block-energy share in sequence order, by the plan, and by one shared perm */
        if (S >= 128) {
            double share = -1.0;
            const int32_t *perms[3] = {NULL, perm, perm};
            const int64_t pstride[3] = {0, S, 0};
            for (int i = 0; i < 3; ++i) {
                REQUIRE(vcattn_block_energy_share(v, B, H, S, D, st, perms[i], pstride[i], &share) == VCATTN_STATUS_SUCCESS);
                REQUIRE(share >= 0.0 && share <= 1.0 + 1e-9);
            }
            REQUIRE(vcattn_block_energy_share(v, B, H, S, D, st, perm, S + 1, &share) == VCATTN_STATUS_INVALID_ARGUMENT);
            int32_t keep = perm[0];
            perm[0] = perm[S - 1];
            REQUIRE(vcattn_block_energy_share(v, B, H, S, D, st, perm, S, &share) == VCATTN_STATUS_INVALID_ARGUMENT);
            perm[0] = keep;
        } else {
            double share;
            REQUIRE(vcattn_block_energy_share(v, B, H, S, D, st, NULL, 0, &share) == VCATTN_STATUS_BAD_SHAPE);
        }
    } else if (s == VCATTN_STATUS_NON_FINITE && S >= 128 && !view_finite(v, B, H, S, D, st)) {
        double share;
        REQUIRE(vcattn_block_energy_share(v, B, H, S, D, st, NULL, 0, &share) == VCATTN_STATUS_NON_FINITE);
    }
    /* a bad first head */
    {
        const int64_t bad_fh = rd_u8(r) & 1 ? -1 : INT64_MAX;
        REQUIRE(vcattn_vsmooth_plan_heads(v, B, H, bad_fh, S, D, st, &km, perm, NULL, NULL) == VCATTN_STATUS_INVALID_ARGUMENT);
    }
done:
    free(v);
    free(init);
    free(perm);
    free(labels);
    free(cent);
}

/* ---- the per-layer plan object -------------------------------------------------------- */

static void op_plan_object(rd *r) {
    const int64_t L = rd_size(r, 3), B = rd_size(r, 2), H = rd_size(r, 2), S = rd_seq(r), D = rd_any_dim(r);
    static const int ks[] = {1, 2, 4, 16, 64, 0, -1, 3};
    const int k = ks[rd_u8(r) % 8];
    /* bytes the plan asks for: skip valid requests beyond a few MB */
    int64_t nperm = 0, ncent = 0;
    int fits = mul_ok(L, B, &nperm) && mul_ok(nperm, H, &nperm) && mul_ok(nperm, S, &nperm) && nperm <= BUF_CAP &&
               mul_ok(L * B * H, k > 0 ? k : 1, &ncent) && mul_ok(ncent, D, &ncent) && ncent <= BUF_CAP;
    const int must_refuse = L <= 0 || B <= 0 || H <= 0 || S <= 0 || D <= 0 || k < 1;
    if (!fits && !must_refuse) return;
    vcattn_plan *plan = (vcattn_plan *)&plan; /* must come back NULL on failure */
    vcattn_status s = vcattn_plan_create(L, B, H, S, D, k, &plan);
    check_status_string(s);
    if (must_refuse) REQUIRE(s != VCATTN_STATUS_SUCCESS);
    REQUIRE(vcattn_plan_create(1, 1, 1, 1, 1, 1, NULL) == VCATTN_STATUS_NULL_POINTER);
    if (s != VCATTN_STATUS_SUCCESS) {
        REQUIRE(plan == NULL);
        vcattn_plan_destroy(plan); /* NULL is fine */
        return;
    }
    size_t bytes = 0;
    REQUIRE(vcattn_plan_memory_bytes(plan, &bytes) == VCATTN_STATUS_SUCCESS);
    REQUIRE(bytes >= (size_t)nperm * sizeof(int32_t) + (size_t)ncent * sizeof(float));
    const int32_t *pp = (const int32_t *)&pp;
    for (int64_t l = 0; l < L; ++l) {
        REQUIRE(vcattn_plan_permutation(plan, l, &pp) == VCATTN_STATUS_SUCCESS);
        REQUIRE(pp == NULL);
    }
    REQUIRE(vcattn_plan_permutation(plan, L, &pp) == VCATTN_STATUS_INVALID_ARGUMENT);
    REQUIRE(vcattn_plan_permutation(plan, -1, &pp) == VCATTN_STATUS_INVALID_ARGUMENT);
    int64_t st[3];
    contiguous(H, S, D, st);
    int64_t n = 0, work = 0;
    const int cheap = mul_ok(B * H * S, D, &n) && n <= BUF_CAP && mul_ok(n, k < S ? k : S, &work) && work * 3 <= WORK_CAP;
    if (cheap) {
        float *v = (float *)malloc(sizeof(float) * (size_t)n);
        REQUIRE(v != NULL);
        rd_fill(r, v, n);
        const int finite = all_finite_f(v, n);
        const int64_t layer = (int64_t)(rd_u8(r) % (unsigned)(L + 1)) - (rd_u8(r) & 1); /* -1 .. L */
        static const int its[] = {1, 2, 0, -1};
        const int it = its[rd_u8(r) % 4];
        for (int round = 0; round < 2; ++round) { /* the second update warm-starts */
            s = vcattn_plan_update(plan, layer, v, st, it, 7, rd_threads(r) & 3);
            check_status_string(s);
            if (layer < 0 || layer >= L) {
                REQUIRE(s == VCATTN_STATUS_INVALID_ARGUMENT);
                break;
            }
            if (it < 1) {
                REQUIRE(s == VCATTN_STATUS_INVALID_ARGUMENT);
                break;
            }
            REQUIRE(s == (finite ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_NON_FINITE));
            REQUIRE(vcattn_plan_permutation(plan, layer, &pp) == VCATTN_STATUS_SUCCESS);
            if (s != VCATTN_STATUS_SUCCESS) {
                if (round == 0) REQUIRE(pp == NULL);
                break;
            }
            REQUIRE(pp != NULL);
            check_plan_outputs(pp, NULL, NULL, B * H, S, k, D);
        }
        free(v);
    }
    REQUIRE(vcattn_plan_update(plan, 0, NULL, st, 1, 0, 1) == VCATTN_STATUS_NULL_POINTER);
    vcattn_plan_destroy(plan);
}

/* ---- small contracts: cube order, schedule, methods, codecs, metrics, workload, .npy save --- */

static void op_cube(rd *r) {
    int64_t g[6];
    for (int i = 0; i < 6; ++i) g[i] = rd_size(r, i < 3 ? 12 : 5);
    int64_t n;
    const int bad = g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || g[3] <= 0 || g[4] <= 0 || g[5] <= 0;
    const int fits = !bad && mul_ok(g[0], g[1], &n) && mul_ok(n, g[2], &n) && n <= BUF_CAP;
    int32_t one = 0;
    if (!fits) {
        /* a valid huge grid is not run (it would write n entries); anything refused must say why */
        if (bad || !mul_ok(g[0], g[1], &n) || !mul_ok(n, g[2], &n) || n > INT32_MAX) {
            vcattn_status s = vcattn_cube_permutation(g[0], g[1], g[2], g[3], g[4], g[5], &one);
            REQUIRE(s == (bad ? VCATTN_STATUS_BAD_SHAPE : VCATTN_STATUS_SIZE_OVERFLOW));
        }
        return;
    }
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    REQUIRE(perm != NULL);
    REQUIRE(vcattn_cube_permutation(g[0], g[1], g[2], g[3], g[4], g[5], perm) == VCATTN_STATUS_SUCCESS);
    check_plan_outputs(perm, NULL, NULL, 1, n, 1, 1);
    REQUIRE(vcattn_cube_permutation(g[0], g[1], g[2], g[3], g[4], g[5], NULL) == VCATTN_STATUS_NULL_POINTER);
    free(perm);
}

static void op_schedule(rd *r) {
    static const int steps[] = {1, 2, 4, 10, 40, 50, 0, -1, 1000, 7, 3, 100};
    static const double fr[] = {0.25, 0.5, 1.0, 1e-9, 0.0, -0.5, 1.0000001, NAN, INFINITY, 0.1, 0.99, 0.3333};
    static const int re[] = {1, 2, 4, 0, -1, INT_MAX, 3, 40};
    vcattn_schedule s;
    vcattn_schedule_init(&s, steps[rd_u8(r) % 12]);
    REQUIRE(s.group_fraction == 0.25 && s.refresh_every == 4);
    if (rd_u8(r) & 1) s.group_fraction = fr[rd_u8(r) % 12];
    if (rd_u8(r) & 1) s.refresh_every = re[rd_u8(r) % 8];
    s.group_every_step = (int)(rd_u8(r) % 3) - (rd_u8(r) & 1);
    s.keep_demean_after_window = (int)(rd_u8(r) % 3);
    const int valid = s.num_steps >= 1 && s.group_fraction > 0.0 && s.group_fraction <= 1.0 && s.refresh_every >= 1;
    int *list = (int *)malloc(sizeof(int) * (size_t)(s.num_steps > 0 ? s.num_steps : 1));
    REQUIRE(list != NULL);
    int count = -1;
    vcattn_status st = vcattn_schedule_grouping_steps(&s, list, &count);
    check_status_string(st);
    REQUIRE((st == VCATTN_STATUS_SUCCESS) == valid);
    vcattn_schedule_action a;
    static const int probe[] = {0, 1, -1, INT_MAX, INT_MIN};
    for (int i = 0; i < 5; ++i) {
        const int step = probe[i];
        st = vcattn_schedule_action_at(&s, step, &a);
        REQUIRE(st == (!valid ? st : (step >= 0 && step < s.num_steps) ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_INVALID_ARGUMENT));
        if (!valid) REQUIRE(st != VCATTN_STATUS_SUCCESS);
    }
    if (valid) {
        REQUIRE(count >= 1 && count <= s.num_steps && list[0] == 0);
        int at = 0;
        for (int i = 0; i < s.num_steps; ++i) {
            REQUIRE(vcattn_schedule_action_at(&s, i, &a) == VCATTN_STATUS_SUCCESS);
            REQUIRE(a == VCATTN_SCHEDULE_GROUP || a == VCATTN_SCHEDULE_REUSE || a == VCATTN_SCHEDULE_NO_SMOOTH);
            if (a == VCATTN_SCHEDULE_GROUP) REQUIRE(at < count && list[at++] == i);
            if (s.group_every_step) REQUIRE(a == VCATTN_SCHEDULE_GROUP);
        }
        REQUIRE(at == count);
        REQUIRE(vcattn_schedule_action_at(&s, 0, NULL) == VCATTN_STATUS_NULL_POINTER);
    }
    REQUIRE(vcattn_schedule_action_at(NULL, 0, &a) == VCATTN_STATUS_NULL_POINTER);
    free(list);
}

/* a NUL-terminated string of up to 40 bytes from the input */
static void rd_string(rd *r, char *buf, size_t cap) {
    size_t n = rd_u8(r) % 41;
    if (n >= cap) n = cap - 1;
    for (size_t i = 0; i < n; ++i) buf[i] = (char)rd_u8(r);
    buf[n] = '\0';
}

static void op_names(rd *r) {
    /* statuses, methods, presets by index and by a decoded name */
    const int si = (int)(int8_t)rd_u8(r);
    const char *s = vcattn_status_string((vcattn_status)si);
    REQUIRE(s != NULL && s[0] != '\0');
    if (si >= 0 && si < VCATTN_STATUS_COUNT) check_status_string((vcattn_status)si);
    REQUIRE(vcattn_version_string() != NULL);
    const int mi = (int)(int8_t)rd_u8(r);
    const char *name = vcattn_method_name((vcattn_method)mi);
    REQUIRE((name != NULL) == (mi >= 0 && mi < VCATTN_METHOD_COUNT));
    vcattn_method_config cfg;
    REQUIRE(vcattn_method_config_get((vcattn_method)mi, &cfg) ==
            (name ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_INVALID_ARGUMENT));
    if (name) REQUIRE(config_documented(&cfg));
    char text[48];
    rd_string(r, text, sizeof text);
    vcattn_method m = VCATTN_METHOD_COUNT;
    vcattn_status st = vcattn_method_from_name(text, &m);
    int known = 0;
    for (int i = 0; i < VCATTN_METHOD_COUNT; ++i) known |= strcmp(text, vcattn_method_name((vcattn_method)i)) == 0;
    REQUIRE(st == (known ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_INVALID_ARGUMENT));
    if (known) REQUIRE(strcmp(vcattn_method_name(m), text) == 0);
    REQUIRE(vcattn_method_from_name(NULL, &m) == VCATTN_STATUS_NULL_POINTER);
    vcattn_workload_params wp, before;
    memset(&wp, 0x3C, sizeof wp);
    before = wp;
    st = vcattn_workload_preset(text, &wp);
    known = 0;
    for (int i = 0; vcattn_workload_preset_name(i); ++i) known |= strcmp(text, vcattn_workload_preset_name(i)) == 0;
    REQUIRE(st == (known ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_INVALID_ARGUMENT));
    if (!known) REQUIRE(memcmp(&wp, &before, sizeof wp) == 0); /* p untouched */
    REQUIRE(vcattn_workload_preset_name(-1 - (int)(rd_u8(r) % 3)) == NULL);
}

static void op_codecs(rd *r) {
    static const int64_t ns[] = {0, 1, 2, 16, 255, -1, INT64_MIN, 7};
    const int64_t n = ns[rd_u8(r) % 8];
    const int64_t m = n > 0 ? n : 1;
    float *x = (float *)malloc(sizeof(float) * (size_t)m), *y = (float *)malloc(sizeof(float) * (size_t)m);
    uint8_t *codes = (uint8_t *)malloc((size_t)m);
    REQUIRE(x && y && codes);
    rd_fill(r, x, m);
    const vcattn_status want = n < 0 ? VCATTN_STATUS_BAD_SHAPE : VCATTN_STATUS_SUCCESS;
    REQUIRE(vcattn_encode_e4m3(x, codes, n) == want);
    REQUIRE(vcattn_decode_e4m3(codes, y, n) == want);
    for (int64_t i = 0; i < n; ++i) {
        /* encoding saturates at 448; NaN is the one code that is not finite */
        REQUIRE(isnan(x[i]) ? isnan(y[i]) : (isfinite(y[i]) && fabsf(y[i]) <= 448.0f));
        REQUIRE((codes[i] & 0x7F) != 0x7F || isnan(x[i]));
    }
    REQUIRE(vcattn_encode_e2m1(x, codes, n) == want);
    REQUIRE(vcattn_decode_e2m1(codes, y, n) == want);
    for (int64_t i = 0; i < n; ++i) REQUIRE(codes[i] < 16 && isfinite(y[i]) && fabsf(y[i]) <= 6.0f);
    REQUIRE(vcattn_round_bf16(x, y, n) == want);
    for (int64_t i = 0; i < n; ++i) REQUIRE(isnan(x[i]) ? isnan(y[i])
                                : (isinf(y[i]) || fabsf(y[i] - x[i]) <= fmaxf(fabsf(x[i]) * 0x1p-8f, 0x1p-134f)));
    /* NULL with nothing to do is fine; NULL with work is not */
    REQUIRE(vcattn_encode_e4m3(NULL, NULL, 0) == VCATTN_STATUS_SUCCESS);
    if (n > 0) REQUIRE(vcattn_decode_e2m1(NULL, y, n) == VCATTN_STATUS_NULL_POINTER);
    /* every E4M3 code but NaN survives decode then encode */
    const uint8_t c = (uint8_t)rd_u8(r);
    float cv;
    uint8_t back;
    REQUIRE(vcattn_decode_e4m3(&c, &cv, 1) == VCATTN_STATUS_SUCCESS && vcattn_encode_e4m3(&cv, &back, 1) == VCATTN_STATUS_SUCCESS);
    REQUIRE((c & 0x7F) == 0x7F || back == c);
    free(x);
    free(y);
    free(codes);
}

static void op_metrics(rd *r) {
    static const int64_t ns[] = {1, 2, 17, 300, 0, -1, 5, 64};
    const int64_t n = ns[rd_u8(r) % 8], m = n > 0 ? n : 1;
    float *a = (float *)malloc(sizeof(float) * (size_t)m), *b = (float *)malloc(sizeof(float) * (size_t)m),
          *c = (float *)malloc(sizeof(float) * (size_t)m);
    REQUIRE(a && b && c);
    rd_fill(r, a, m);
    rd_fill(r, b, m);
    rd_fill(r, c, m);
    const int finite = all_finite_f(a, m) && all_finite_f(b, m), finite3 = finite && all_finite_f(c, m);
    vcattn_fidelity f;
    vcattn_status s = vcattn_fidelity_compare(a, b, n, &f);
    REQUIRE(s == (n <= 0 ? VCATTN_STATUS_BAD_SHAPE : finite ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_NON_FINITE));
    if (s == VCATTN_STATUS_SUCCESS) {
        /* infinities only where documented by the formula (zero error or zero reference), never NaN */
        REQUIRE(!isnan(f.rel_l2) && !isnan(f.cosine) && !isnan(f.psnr_db) && isfinite(f.max_abs_error));
        REQUIRE(f.rel_l2 >= 0.0 && f.cosine >= -1.0 - 1e-9 && f.cosine <= 1.0 + 1e-9);
    }
    vcattn_error_budget e;
    s = vcattn_error_budget_compute(a, b, c, n, &e);
    REQUIRE(s == (n <= 0 ? VCATTN_STATUS_BAD_SHAPE : finite3 ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_NON_FINITE));
    if (s == VCATTN_STATUS_SUCCESS)
        REQUIRE(isfinite(e.value_rel_l2) && isfinite(e.probability_rel_l2) && e.value_share >= 0.0 && e.value_share <= 1.0);
    REQUIRE(vcattn_fidelity_compare(NULL, b, n, &f) == VCATTN_STATUS_NULL_POINTER);
    free(a);
    free(b);
    free(c);
}

static float rd_field(rd *r, float usual) {
    static const float t[] = {0.0f, 0.5f, 1.0f, -0.1f, 2.0f, 1e-4f, 100.0f, 1e30f, NAN, INFINITY, 1e-3f, 20.0f};
    unsigned b = rd_u8(r);
    return b < 160 ? usual : t[b % 12];
}

static void op_workload(rd *r) {
    vcattn_workload_params p;
    vcattn_workload_params_init(&p);
    if (rd_u8(r) & 1) {
        const char *name = vcattn_workload_preset_name((int)(rd_u8(r) % 3));
        REQUIRE(name && vcattn_workload_preset(name, &p) == VCATTN_STATUS_SUCCESS);
    }
    p.batch = rd_size(r, 2);
    p.heads = rd_size(r, 2);
    p.frames = rd_size(r, 3);
    p.height = rd_size(r, 6);
    p.width = rd_size(r, 6);
    p.head_dim = rd_head_dim(r);
    p.seed = rd_bytes(r, 2);
    p.spatial_correlation = rd_field(r, p.spatial_correlation);
    p.temporal_correlation = rd_field(r, p.temporal_correlation);
    p.k_channel_offset = rd_field(r, p.k_channel_offset);
    p.v_outlier_fraction = rd_field(r, p.v_outlier_fraction);
    p.v_outlier_scale = rd_field(r, p.v_outlier_scale);
    p.v_channel_offset = rd_field(r, p.v_channel_offset);
    p.rope_theta = rd_field(r, p.rope_theta);
    p.q_channel_offset = rd_field(r, p.q_channel_offset);
    p.qk_offset_alignment = rd_field(r, p.qk_offset_alignment);
    p.head_scale_min = rd_field(r, p.head_scale_min);
    p.head_scale_max = rd_field(r, p.head_scale_max);
    p.v_frame_token_scale = rd_field(r, p.v_frame_token_scale);
    if (rd_u8(r) < 40) p.v_outlier_channels = (int)(rd_u8(r) % 140) - 4;
    if (rd_u8(r) < 40)
        for (int a = 0; a < 3; ++a) p.rope_dims[a] = (int)(rd_u8(r) % 70) - 2;
    int64_t n;
    const int fits = p.batch > 0 && p.heads > 0 && p.frames > 0 && p.height > 0 && p.width > 0 && p.head_dim > 0 &&
                     mul_ok(p.batch, p.heads, &n) && mul_ok(n, p.frames, &n) && mul_ok(n, p.height, &n) &&
                     mul_ok(n, p.width, &n) && mul_ok(n, p.head_dim, &n) && n <= BUF_CAP / 4;
    const int must_refuse = p.batch <= 0 || p.heads <= 0 || p.frames <= 0 || p.height <= 0 || p.width <= 0 ||
                            (p.head_dim != 64 && p.head_dim != 128) || isnan(p.spatial_correlation) ||
                            isnan(p.rope_theta) || p.spatial_correlation > 1.0f || p.v_outlier_channels < 0;
    float one[1];
    if (!fits) {
        if (must_refuse) REQUIRE(vcattn_workload_generate(&p, one, one, one) != VCATTN_STATUS_SUCCESS);
        return;
    }
    float *q = out_buffer(n), *k = out_buffer(n), *v = out_buffer(n);
    vcattn_status s = vcattn_workload_generate(&p, q, k, v);
    check_status_string(s);
    REQUIRE(s == VCATTN_STATUS_SUCCESS || s == VCATTN_STATUS_INVALID_ARGUMENT || s == VCATTN_STATUS_UNSUPPORTED_HEAD_DIM);
    if (must_refuse) REQUIRE(s != VCATTN_STATUS_SUCCESS);
    if (s == VCATTN_STATUS_SUCCESS) REQUIRE(all_finite_f(q, n) && all_finite_f(k, n) && all_finite_f(v, n));
    REQUIRE(vcattn_workload_generate(&p, NULL, k, v) == VCATTN_STATUS_NULL_POINTER);
    free(q);
    free(k);
    free(v);
}

static char g_tmpdir[64];

static void op_npy_save(rd *r) {
    static const int ndims[] = {1, 2, 3, 4, 4, 8, 0, 9};
    const int ndim = ndims[rd_u8(r) % 8];
    int64_t shape[9];
    int64_t n = 1;
    int overflow = 0, bad = ndim < 1 || ndim > 8;
    for (int i = 0; i < 9; ++i) {
        shape[i] = rd_size(r, 4);
        if (i < ndim) {
            if (shape[i] <= 0) bad = 1;
            else if (!mul_ok(n, shape[i], &n)) overflow = 1;
        }
    }
    char path[128];
    snprintf(path, sizeof path, "%s/save.npy", g_tmpdir);
    float one = 0.0f;
    if (bad || overflow || n > BUF_CAP) {
        if (bad || overflow) REQUIRE(vcattn_npy_save_f32(path, &one, ndim, shape) != VCATTN_STATUS_SUCCESS);
        return;
    }
    float *x = (float *)malloc(sizeof(float) * (size_t)n);
    REQUIRE(x != NULL);
    rd_fill(r, x, n);
    REQUIRE(vcattn_npy_save_f32(path, x, ndim, shape) == VCATTN_STATUS_SUCCESS);
    /* what was written reads back bit for bit (4-D), or is refused by rank */
    float *back = NULL;
    int64_t s4[4];
    vcattn_npy_error err;
    vcattn_status s = vcattn_npy_load_ex(path, &back, s4, &err);
    if (ndim == 4) {
        REQUIRE(s == VCATTN_STATUS_SUCCESS && memcmp(s4, shape, sizeof s4) == 0);
        REQUIRE(memcmp(back, x, sizeof(float) * (size_t)n) == 0);
    } else {
        REQUIRE(s == VCATTN_STATUS_BAD_FILE_FORMAT && err.reason == VCATTN_NPY_WRONG_RANK && back == NULL);
    }
    vcattn_free(back);
    free(x);
    REQUIRE(vcattn_npy_save_f32(NULL, &one, 1, shape) == VCATTN_STATUS_NULL_POINTER);
}

static void op_facts(rd *r) {
    static const int64_t ns[] = {16, 17, 20, 0, 15, -1, INT64_MIN, ((int64_t)1 << 32) + 1};
    const int64_t n = ns[rd_u8(r) % 8];
    vcattn_expcast_facts f;
    vcattn_expcast_tail_facts t;
    const vcattn_status want = n >= 16 && n <= ((int64_t)1 << 32) ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_INVALID_ARGUMENT;
    REQUIRE(vcattn_expcast_measure(n, &f) == want);
    REQUIRE(vcattn_expcast_tail_measure(n, &t) == want);
    if (want == VCATTN_STATUS_SUCCESS) {
        REQUIRE(f.agree_share >= 0.0 && f.agree_share <= 1.0 && isfinite(f.ratio_min) && isfinite(f.ratio_max));
        REQUIRE(f.ratio_min <= f.ratio_max && isfinite(f.row_tv_bound));
        for (int i = 0; i < 3; ++i) REQUIRE(isfinite(t.cut_octaves[i]) && isfinite(t.tail_mass_ratio[i]));
    }
    REQUIRE(vcattn_expcast_measure(16, NULL) == VCATTN_STATUS_NULL_POINTER);
}

/* The GPU entry points of this (CUDA-less) build: each answers NOT_BUILT or NULL_POINTER. */
static void op_gpu(rd *r) {
    static float dummy[4];
    vcattn_gpu_params g;
    vcattn_gpu_params_init(&g, rd_size(r, 2), rd_size(r, 2), rd_seq(r), rd_seq(r), rd_head_dim(r), dummy, dummy,
                           dummy, dummy);
    g.method = (vcattn_method)((int)(rd_u8(r) % 9) - 1);
    g.softmax_scale = rd_scale(r);
    size_t bytes = 0;
    vcattn_gpu_layout layout;
    const vcattn_status s = vcattn_gpu_params_validate(&g);
    check_status_string(s);
    REQUIRE(s == VCATTN_STATUS_NOT_BUILT || s != VCATTN_STATUS_SUCCESS || vcattn_gpu_workspace_size(&g, &bytes) == VCATTN_STATUS_SUCCESS);
    check_status_string(vcattn_gpu_workspace_size(&g, &bytes));
    check_status_string(vcattn_gpu_workspace_layout(&g, &layout));
    check_status_string(vcattn_gpu_output_status(&g, NULL, 0, NULL));
    REQUIRE(vcattn_gpu_params_validate(NULL) == VCATTN_STATUS_NULL_POINTER);
    vcattn_gpu_kmeans_params kp;
    vcattn_gpu_kmeans_params_init(&kp);
    REQUIRE(kp.clusters == 64 && kp.iterations == 8);
    check_status_string(vcattn_gpu_kmeans_workspace_size(&kp, &bytes));
    vcattn_gpu_plan *gp = NULL;
    const vcattn_status c = vcattn_gpu_plan_create(1, 1, 1, 128, 128, 64, &gp);
    check_status_string(c);
    if (c == VCATTN_STATUS_SUCCESS) vcattn_gpu_plan_destroy(gp);
}

typedef void (*op_fn)(rd *r);

/* the folder goes when the fuzzer exits normally (end of -max_total_time or -runs) */
static void remove_tmpdir(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/save.npy", g_tmpdir);
    remove(path);
    rmdir(g_tmpdir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    /* vcattn_npy_save_f32 writes here (a private folder: a failed save removes its file) */
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/vcattn_fuzz_XXXXXX");
    if (!mkdtemp(g_tmpdir)) abort();
    atexit(remove_tmpdir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const op_fn ops[] = {op_attention, op_attention, op_attention, op_attention, op_plan,
                                op_plan,      op_plan_object, op_cube,    op_schedule,  op_names,
                                op_codecs,    op_metrics,   op_workload,  op_npy_save,  op_facts,
                                op_gpu};
    if (size == 0) return 0;
    rd r = {data + 1, size - 1};
    ops[data[0] % (sizeof ops / sizeof ops[0])](&r);
    return 0;
}
