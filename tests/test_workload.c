/* test_workload.c - the synthetic video-DiT workload: determinism, the
 * structure it promises (space-time correlation, K/V channel offsets,
 * clustered V outlier tokens whose channels vary per head, moderately peaked
 * softmax) and input validation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "test.h"
#include "vcattn.h"

typedef struct {
    float *q, *k, *v;
    int64_t seq, n;
} wl_bufs;

static int wl_alloc(const vcattn_workload_params *p, wl_bufs *b) {
    b->seq = p->frames * p->height * p->width;
    b->n = p->batch * p->heads * b->seq * p->head_dim;
    b->q = (float *)malloc(sizeof(float) * (size_t)b->n);
    b->k = (float *)malloc(sizeof(float) * (size_t)b->n);
    b->v = (float *)malloc(sizeof(float) * (size_t)b->n);
    return b->q && b->k && b->v;
}

static void wl_release(wl_bufs *b) {
    free(b->q);
    free(b->k);
    free(b->v);
    memset(b, 0, sizeof *b);
}

/* generate into freshly allocated buffers; 0 on any failure (recorded) */
static int wl_make(const vcattn_workload_params *p, wl_bufs *b) {
    if (!wl_alloc(p, b)) {
        CHECK_MSG(0, "out of memory in test");
        wl_release(b);
        return 0;
    }
    vcattn_status st = vcattn_workload_generate(p, b->q, b->k, b->v);
    CHECK_STATUS(st, VCATTN_STATUS_SUCCESS);
    if (st != VCATTN_STATUS_SUCCESS) {
        wl_release(b);
        return 0;
    }
    return 1;
}

static void wl_small(vcattn_workload_params *p, uint64_t seed) {
    vcattn_workload_params_init(p);
    p->frames = 4;
    p->height = 16;
    p->width = 16;
    p->head_dim = 64;
    p->seed = seed;
}

/* mean cosine of per-channel-centred rows a and b (D values) */
static double wl_cos(const float *a, const float *b, const double *mu, int64_t d) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < d; ++i) {
        double x = a[i] - mu[i], y = b[i] - mu[i];
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    return ab / sqrt(aa * bb + 1e-300);
}

static void wl_channel_mean(const float *x, int64_t s, int64_t d, double *mu) {
    for (int64_t i = 0; i < d; ++i) mu[i] = 0.0;
    for (int64_t t = 0; t < s; ++t)
        for (int64_t i = 0; i < d; ++i) mu[i] += x[t * d + i];
    for (int64_t i = 0; i < d; ++i) mu[i] /= (double)s;
}

TEST(workload_defaults) {
    vcattn_workload_params p;
    memset(&p, 0x5A, sizeof p);
    vcattn_workload_params_init(&p);
    CHECK_EQ_INT(p.batch, 1);
    CHECK_EQ_INT(p.heads, 2);
    CHECK_EQ_INT(p.frames * p.height * p.width, 8192);
    CHECK_EQ_INT(p.frames, 8);
    CHECK_EQ_INT(p.height, 32);
    CHECK_EQ_INT(p.width, 32);
    CHECK_EQ_INT(p.head_dim, 128);
    CHECK_EQ_INT(p.seed, 1);
    CHECK_NEAR(p.spatial_correlation, 0.9, 1e-6);
    CHECK_NEAR(p.temporal_correlation, 0.8, 1e-6);
    CHECK_NEAR(p.k_channel_offset, 2.0, 1e-6);
    CHECK_NEAR(p.v_outlier_fraction, 0.005, 1e-9);
    CHECK_NEAR(p.v_outlier_scale, 20.0, 1e-6);
    CHECK_EQ_INT(p.v_outlier_channels, 8);
    CHECK_NEAR(p.v_channel_offset, 0.5, 1e-6);
    vcattn_workload_params_init(NULL); /* must not crash */
}

TEST(workload_deterministic_per_seed) {
    vcattn_workload_params p;
    wl_small(&p, test_seed());
    wl_bufs a, b, c;
    if (!wl_make(&p, &a)) return;
    if (!wl_make(&p, &b)) { wl_release(&a); return; }
    size_t bytes = sizeof(float) * (size_t)a.n;
    CHECK(memcmp(a.q, b.q, bytes) == 0);
    CHECK(memcmp(a.k, b.k, bytes) == 0);
    CHECK(memcmp(a.v, b.v, bytes) == 0);
    p.seed += 1;
    if (wl_make(&p, &c)) {
        int64_t same_q = 0, same_k = 0, same_v = 0;
        for (int64_t i = 0; i < a.n; ++i) {
            same_q += a.q[i] == c.q[i];
            same_k += a.k[i] == c.k[i];
            same_v += a.v[i] == c.v[i];
        }
        CHECK_MSG(same_q < a.n / 100 && same_k < a.n / 100 && same_v < a.n / 100,
                  "another seed repeats values: %lld %lld %lld of %lld", (long long)same_q,
                  (long long)same_k, (long long)same_v, (long long)a.n);
        wl_release(&c);
    }
    wl_release(&a);
    wl_release(&b);
}

/* Slice (b, h) depends on (seed, b, h) only: adding heads or batch items does
 * not change it, and different (b, h) get different data. */
TEST(workload_slices_independent) {
    vcattn_workload_params p;
    wl_small(&p, test_seed());
    p.batch = 1;
    p.heads = 2;
    wl_bufs a, b;
    if (!wl_make(&p, &a)) return;
    p.batch = 2;
    p.heads = 3;
    if (!wl_make(&p, &b)) { wl_release(&a); return; }
    const int64_t slice = a.seq * p.head_dim;
    const size_t bytes = sizeof(float) * (size_t)slice;
    for (int64_t h = 0; h < 2; ++h) {
        CHECK(memcmp(a.q + h * slice, b.q + h * slice, bytes) == 0);
        CHECK(memcmp(a.k + h * slice, b.k + h * slice, bytes) == 0);
        CHECK(memcmp(a.v + h * slice, b.v + h * slice, bytes) == 0);
    }
    /* batch 1, head 0 differs from batch 0, head 0; head 1 from head 0 */
    CHECK(memcmp(b.v, b.v + 3 * slice, bytes) != 0);
    CHECK(memcmp(b.q, b.q + slice, bytes) != 0);
    wl_release(&a);
    wl_release(&b);
}

TEST(workload_finite_and_order_one) {
    vcattn_workload_params p;
    vcattn_workload_params_init(&p);
    p.seed = test_seed();
    wl_bufs b;
    if (!wl_make(&p, &b)) return;
    const int64_t D = p.head_dim;
    int finite = 1;
    for (int64_t i = 0; i < b.n; ++i)
        finite &= isfinite(b.q[i]) && isfinite(b.k[i]) && isfinite(b.v[i]);
    CHECK(finite);
    for (int64_t h = 0; h < p.heads; ++h) {
        const float *x[3] = {b.q + h * b.seq * D, b.k + h * b.seq * D, b.v + h * b.seq * D};
        for (int t = 0; t < 3; ++t) {
            double mu[128], ss = 0.0;
            wl_channel_mean(x[t], b.seq, D, mu);
            for (int64_t s = 0; s < b.seq; ++s)
                for (int64_t d = 0; d < D; ++d) {
                    double e = x[t][s * D + d] - mu[d];
                    ss += e * e;
                }
            double rms = sqrt(ss / (double)(b.seq * D));
            /* post-norm-like activations: O(1) (V includes its outliers) */
            CHECK_MSG(rms > 0.5 && rms < 2.5, "tensor %d head %lld: centred RMS %g", t,
                      (long long)h, rms);
        }
    }
    wl_release(&b);
}

/* mean cosine of V between x-neighbours, t-neighbours and random pairs */
static void wl_neighbour_cosines(const vcattn_workload_params *p, const float *v, double *cx,
                                 double *ct, double *cr, uint64_t seed) {
    const int64_t D = p->head_dim, S = p->frames * p->height * p->width;
    const int64_t frame = p->height * p->width;
    double mu[128];
    wl_channel_mean(v, S, D, mu);
    test_rng r = {seed};
    double sx = 0, st = 0, sr = 0;
    int64_t nx = 0, nt = 0, nr = 0;
    for (int64_t s = 0; s < S; ++s) {
        if (s % p->width + 1 < p->width) {
            sx += wl_cos(v + s * D, v + (s + 1) * D, mu, D);
            ++nx;
        }
        if (s + frame < S) {
            st += wl_cos(v + s * D, v + (s + frame) * D, mu, D);
            ++nt;
        }
        int64_t j = (int64_t)(test_rng_next(&r) % (uint64_t)S);
        if (j != s) {
            sr += wl_cos(v + s * D, v + j * D, mu, D);
            ++nr;
        }
    }
    *cx = sx / (double)nx;
    *ct = st / (double)nt;
    *cr = sr / (double)nr;
}

TEST(workload_space_time_correlation) {
    vcattn_workload_params p;
    vcattn_workload_params_init(&p);
    p.seed = test_seed();
    p.heads = 1;
    p.v_outlier_fraction = 0.0f; /* look at the content only */
    wl_bufs b;
    if (!wl_make(&p, &b)) return;
    double cx, ct, cr;
    wl_neighbour_cosines(&p, b.v, &cx, &ct, &cr, p.seed);
    CHECK_MSG(cx > cr + 0.25, "x-neighbour cosine %g vs random %g", cx, cr);
    CHECK_MSG(ct > cr + 0.2, "t-neighbour cosine %g vs random %g", ct, cr);
    CHECK_MSG(fabs(cr) < 0.1, "random pairs cosine %g", cr);
    wl_release(&b);

    /* no correlation asked: neighbours look like random pairs */
    p.spatial_correlation = 0.0f;
    p.temporal_correlation = 0.0f;
    if (!wl_make(&p, &b)) return;
    wl_neighbour_cosines(&p, b.v, &cx, &ct, &cr, p.seed);
    CHECK_MSG(fabs(cx - cr) < 0.05 && fabs(ct - cr) < 0.05,
              "uncorrelated: x %g t %g random %g", cx, ct, cr);
    wl_release(&b);

    /* only temporal correlation */
    p.temporal_correlation = 0.95f;
    if (!wl_make(&p, &b)) return;
    wl_neighbour_cosines(&p, b.v, &cx, &ct, &cr, p.seed);
    CHECK_MSG(fabs(cx - cr) < 0.05 && ct > cr + 0.3, "temporal only: x %g t %g random %g", cx,
              ct, cr);
    wl_release(&b);
}

/* Mean over channels of |token mean of K| */
static double wl_mean_abs_channel_mean(const float *k, int64_t S, int64_t D) {
    double mu[128], s = 0.0;
    wl_channel_mean(k, S, D, mu);
    for (int64_t d = 0; d < D; ++d) s += fabs(mu[d]);
    return s / (double)D;
}

TEST(workload_k_channel_offset) {
    vcattn_workload_params p;
    vcattn_workload_params_init(&p);
    p.seed = test_seed();
    const int64_t D = p.head_dim;
    wl_bufs with, without;
    if (!wl_make(&p, &with)) return;
    p.k_channel_offset = 0.0f;
    if (!wl_make(&p, &without)) { wl_release(&with); return; }
    const size_t bytes = sizeof(float) * (size_t)with.n;
    /* only K changes */
    CHECK(memcmp(with.q, without.q, bytes) == 0);
    CHECK(memcmp(with.v, without.v, bytes) == 0);
    double ss = 0.0, worst = 0.0;
    for (int64_t h = 0; h < p.heads; ++h) {
        const float *kw = with.k + h * with.seq * D, *ko = without.k + h * with.seq * D;
        for (int64_t d = 0; d < D; ++d) {
            double off = (double)kw[d] - ko[d];
            ss += off * off;
            for (int64_t s = 1; s < with.seq; ++s) {
                double dev = fabs(((double)kw[s * D + d] - ko[s * D + d]) - off);
                if (dev > worst) worst = dev;
            }
        }
        double m_with = wl_mean_abs_channel_mean(kw, with.seq, D);
        double m_without = wl_mean_abs_channel_mean(ko, with.seq, D);
        CHECK_MSG(m_with > 1.0 && m_with > 2.0 * m_without,
                  "head %lld: |channel mean of K| %g with offset, %g without", (long long)h,
                  m_with, m_without);
    }
    /* the difference is one constant per (head, channel) with std ~ 2 */
    CHECK_MSG(worst < 1e-5, "K offset not constant over tokens: %g", worst);
    double std = sqrt(ss / (double)(p.heads * D));
    CHECK_MSG(std > 1.5 && std < 2.5, "K offset std %g, expected ~2", std);
    wl_release(&with);
    wl_release(&without);
}

TEST(workload_v_channel_offset) {
    vcattn_workload_params p;
    wl_small(&p, test_seed());
    p.head_dim = 128;
    p.heads = 3;
    p.v_channel_offset = 1.5f;
    const int64_t D = p.head_dim;
    wl_bufs with, without;
    if (!wl_make(&p, &with)) return;
    p.v_channel_offset = 0.0f;
    if (!wl_make(&p, &without)) { wl_release(&with); return; }
    const size_t bytes = sizeof(float) * (size_t)with.n;
    CHECK(memcmp(with.q, without.q, bytes) == 0);
    CHECK(memcmp(with.k, without.k, bytes) == 0);
    double ss = 0.0, worst = 0.0;
    for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t d = 0; d < D; ++d) {
            const float *vw = with.v + h * with.seq * D, *vo = without.v + h * with.seq * D;
            double off = (double)vw[d] - vo[d];
            ss += off * off;
            for (int64_t s = 1; s < with.seq; ++s) {
                double dev = fabs(((double)vw[s * D + d] - vo[s * D + d]) - off);
                if (dev > worst) worst = dev;
            }
        }
    CHECK_MSG(worst < 1e-5, "V offset not constant over tokens: %g", worst);
    double std = sqrt(ss / (double)(p.heads * D));
    CHECK_MSG(std > 1.1 && std < 1.9, "V offset std %g, expected ~1.5", std);
    wl_release(&with);
    wl_release(&without);
}

TEST(workload_v_outliers) {
    vcattn_workload_params p;
    vcattn_workload_params_init(&p);
    p.seed = test_seed();
    p.heads = 3;
    p.v_outlier_fraction = 0.01f;
    p.v_outlier_channels = 8;
    p.v_outlier_scale = 20.0f;
    const int64_t D = p.head_dim, T = p.frames, H = p.height, W = p.width;
    wl_bufs with, without;
    if (!wl_make(&p, &with)) return;
    p.v_outlier_scale = 0.0f;
    if (!wl_make(&p, &without)) { wl_release(&with); return; }
    const int64_t S = with.seq;
    const int64_t expected = (int64_t)floor(0.01 * (double)S + 0.5);
    const size_t bytes = sizeof(float) * (size_t)with.n;
    CHECK(memcmp(with.q, without.q, bytes) == 0);
    CHECK(memcmp(with.k, without.k, bytes) == 0);

    unsigned char *is_out = (unsigned char *)calloc((size_t)S, 1);
    unsigned char chans[3][128];
    if (!is_out) { CHECK(0); wl_release(&with); wl_release(&without); return; }
    for (int64_t h = 0; h < p.heads; ++h) {
        const float *vw = with.v + h * S * D, *vo = without.v + h * S * D;
        int64_t tokens = 0, bad_count = 0, mismatched_set = 0, bad_mag = 0;
        int have_set = 0;
        double out_abs = 0.0, other_abs = 0.0;
        int64_t n_out_entries = 0, n_other = 0;
        for (int64_t s = 0; s < S; ++s) {
            unsigned char set[128];
            int count = 0;
            for (int64_t d = 0; d < D; ++d) {
                double diff = (double)vw[s * D + d] - vo[s * D + d];
                set[d] = diff != 0.0;
                count += set[d];
                if (diff != 0.0 && (fabs(diff) < 0.75 * 20 - 1e-3 || fabs(diff) > 1.25 * 20 + 1e-3))
                    ++bad_mag;
            }
            if (count == 0) {
                if (h == 0) is_out[s] = 0;
                else CHECK_MSG(!is_out[s], "outlier tokens differ between heads");
                for (int64_t d = 0; d < D; ++d) other_abs += fabs(vw[s * D + d]);
                n_other += D;
                continue;
            }
            ++tokens;
            if (h == 0) is_out[s] = 1;
            else if (!is_out[s]) CHECK_MSG(0, "outlier tokens differ between heads");
            if (count != p.v_outlier_channels) ++bad_count;
            if (!have_set) {
                memcpy(chans[h], set, 128);
                have_set = 1;
            } else if (memcmp(chans[h], set, (size_t)D) != 0) {
                ++mismatched_set;
            }
            for (int64_t d = 0; d < D; ++d)
                if (set[d]) {
                    out_abs += fabs(vw[s * D + d]);
                    ++n_out_entries;
                }
        }
        CHECK_EQ_INT(tokens, expected);
        CHECK_EQ_INT(bad_count, 0);
        CHECK_EQ_INT(mismatched_set, 0);
        CHECK_EQ_INT(bad_mag, 0);
        /* in the data itself the outliers stand far above everything else */
        if (n_out_entries > 0 && n_other > 0)
            CHECK_MSG(out_abs / (double)n_out_entries > 10.0 * other_abs / (double)n_other,
                      "outlier magnitude %g vs typical %g", out_abs / (double)n_out_entries,
                      other_abs / (double)n_other);
    }
    /* the channel sets vary across heads */
    CHECK(memcmp(chans[0], chans[1], (size_t)D) != 0);
    CHECK(memcmp(chans[1], chans[2], (size_t)D) != 0);
    CHECK(memcmp(chans[0], chans[2], (size_t)D) != 0);

    /* spatially clustered: most outlier tokens touch another one (6-neighbourhood);
     * scattered at random only about 6% would */
    int64_t touching = 0, total = 0;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t y = 0; y < H; ++y)
            for (int64_t x = 0; x < W; ++x) {
                int64_t s = (t * H + y) * W + x;
                if (!is_out[s]) continue;
                ++total;
                int near = (x > 0 && is_out[s - 1]) || (x + 1 < W && is_out[s + 1]) ||
                           (y > 0 && is_out[s - W]) || (y + 1 < H && is_out[s + W]) ||
                           (t > 0 && is_out[s - H * W]) || (t + 1 < T && is_out[s + H * W]);
                touching += near;
            }
    CHECK_MSG(total > 0 && touching * 10 > total * 6, "only %lld of %lld outlier tokens clustered",
              (long long)touching, (long long)total);
    free(is_out);
    wl_release(&with);
    wl_release(&without);
}

TEST(workload_outlier_knobs_off) {
    vcattn_workload_params p;
    wl_small(&p, test_seed());
    wl_bufs base, b;
    p.v_outlier_scale = 0.0f;
    if (!wl_make(&p, &base)) return;
    const size_t bytes = sizeof(float) * (size_t)base.n;
    p.v_outlier_scale = 20.0f;
    p.v_outlier_channels = 0;
    if (wl_make(&p, &b)) {
        CHECK(memcmp(base.v, b.v, bytes) == 0);
        wl_release(&b);
    }
    p.v_outlier_channels = 8;
    p.v_outlier_fraction = 0.0f;
    if (wl_make(&p, &b)) {
        CHECK(memcmp(base.v, b.v, bytes) == 0);
        wl_release(&b);
    }
    /* every token an outlier, every channel: still finite, all tokens shifted */
    p.v_outlier_fraction = 1.0f;
    p.v_outlier_channels = (int)p.head_dim;
    if (wl_make(&p, &b)) {
        int64_t changed = 0;
        for (int64_t i = 0; i < b.n; ++i) changed += fabs((double)b.v[i] - base.v[i]) >= 14.9;
        CHECK_EQ_INT(changed, b.n);
        wl_release(&b);
    }
    wl_release(&base);
}

TEST(workload_softmax_moderately_peaked) {
    vcattn_workload_params p;
    vcattn_workload_params_init(&p);
    p.seed = test_seed();
    p.heads = 1;
    wl_bufs b;
    if (!wl_make(&p, &b)) return;
    const int64_t S = b.seq, D = p.head_dim;
    const double scale = 1.0 / sqrt((double)D);
    double *sc = (double *)malloc(sizeof(double) * (size_t)S);
    if (!sc) { CHECK(0); wl_release(&b); return; }
    enum { ROWS = 24 };
    double pmax[ROWS];
    test_rng r = {p.seed};
    for (int i = 0; i < ROWS; ++i) {
        int64_t row = (int64_t)(test_rng_next(&r) % (uint64_t)S);
        double m = -INFINITY, z = 0.0;
        for (int64_t j = 0; j < S; ++j) {
            double s = 0.0;
            for (int64_t d = 0; d < D; ++d) s += (double)b.q[row * D + d] * b.k[j * D + d];
            sc[j] = s * scale;
            if (sc[j] > m) m = sc[j];
        }
        for (int64_t j = 0; j < S; ++j) z += exp(sc[j] - m);
        pmax[i] = 1.0 / z;
        CHECK_MSG(pmax[i] > 4.0 / (double)S && pmax[i] < 0.9, "row %lld max probability %g",
                  (long long)row, pmax[i]);
    }
    /* median in 1e-3 .. 1e-1 */
    for (int i = 1; i < ROWS; ++i)
        for (int j = i; j > 0 && pmax[j - 1] > pmax[j]; --j) {
            double t = pmax[j];
            pmax[j] = pmax[j - 1];
            pmax[j - 1] = t;
        }
    double median = 0.5 * (pmax[ROWS / 2 - 1] + pmax[ROWS / 2]);
    CHECK_MSG(median > 1e-3 && median < 1e-1, "median row max probability %g", median);
    free(sc);
    wl_release(&b);
}

TEST(workload_edge_shapes) {
    vcattn_workload_params p;
    vcattn_workload_params_init(&p);
    p.seed = test_seed();
    /* one token, full correlation, odd grid sizes, D = 64 */
    const int64_t grids[4][3] = {{1, 1, 1}, {3, 5, 7}, {1, 40, 3}, {9, 1, 1}};
    const float corr[4] = {0.0f, 1.0f, 0.5f, 1.0f};
    for (int g = 0; g < 4; ++g) {
        p.frames = grids[g][0];
        p.height = grids[g][1];
        p.width = grids[g][2];
        p.head_dim = g % 2 ? 64 : 128;
        p.spatial_correlation = corr[g];
        p.temporal_correlation = corr[3 - g];
        p.v_outlier_fraction = g == 0 ? 1.0f : 0.3f;
        wl_bufs b;
        if (!wl_make(&p, &b)) continue;
        int finite = 1;
        for (int64_t i = 0; i < b.n; ++i)
            finite &= isfinite(b.q[i]) && isfinite(b.k[i]) && isfinite(b.v[i]);
        CHECK_MSG(finite, "grid %d not finite", g);
        wl_release(&b);
    }
}

TEST(workload_rejects_bad_input) {
    vcattn_workload_params ok;
    wl_small(&ok, test_seed());
    enum { N = 64 };
    float q[N], k[N], v[N];
    for (int i = 0; i < N; ++i) q[i] = k[i] = v[i] = 123.0f;
    vcattn_workload_params p;

    CHECK_STATUS(vcattn_workload_generate(NULL, q, k, v), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_workload_generate(&ok, NULL, k, v), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_workload_generate(&ok, q, NULL, v), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_workload_generate(&ok, q, k, NULL), VCATTN_STATUS_NULL_POINTER);

    /* every size, zero and negative */
    for (int field = 0; field < 6; ++field)
        for (int sign = 0; sign < 2; ++sign) {
            p = ok;
            int64_t bad = sign ? -3 : 0;
            int64_t *f[6] = {&p.batch, &p.heads, &p.frames, &p.height, &p.width, &p.head_dim};
            *f[field] = bad;
            CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_BAD_SHAPE);
        }
    const int64_t dims[] = {1, 16, 32, 96, 127, 129, 256};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
        p = ok;
        p.head_dim = dims[i];
        p.v_outlier_channels = 0;
        CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_UNSUPPORTED_HEAD_DIM);
    }
    /* S = 2^63 overflows; so does B*H*S*D, and the byte count */
    p = ok;
    p.frames = p.height = p.width = (int64_t)1 << 21;
    CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_SIZE_OVERFLOW);
    p = ok;
    p.batch = INT64_MAX / 2;
    CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_SIZE_OVERFLOW);
    p = ok;
    p.batch = INT64_MAX / (4 * 65536) + 1; /* S*D = 65536: elements fit int64, bytes do not */
    p.heads = 1;
    CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_SIZE_OVERFLOW);

    /* float knobs: out of range or not finite */
    const float bad_unit[] = {-0.01f, 1.01f, NAN, INFINITY, -INFINITY};
    const float bad_scale[] = {-1e-3f, NAN, INFINITY, -INFINITY, 1e30f};
    for (size_t i = 0; i < 5; ++i)
        for (int f = 0; f < 6; ++f) {
            p = ok;
            float *fields[6] = {&p.spatial_correlation, &p.temporal_correlation,
                                &p.v_outlier_fraction, &p.k_channel_offset,
                                &p.v_outlier_scale, &p.v_channel_offset};
            *fields[f] = f < 3 ? bad_unit[i] : bad_scale[i];
            CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_INVALID_ARGUMENT);
        }
    p = ok;
    p.v_outlier_channels = -1;
    CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_INVALID_ARGUMENT);
    p.v_outlier_channels = (int)p.head_dim + 1;
    CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_INVALID_ARGUMENT);

    /* nothing was written by any rejected call */
    int untouched = 1;
    for (int i = 0; i < N; ++i) untouched &= q[i] == 123.0f && k[i] == 123.0f && v[i] == 123.0f;
    CHECK(untouched);
}

/* ---- long-video extensions (docs/workload.md, "Long-video presets") ------------------- */

/* a small grid with every extension on, like the presets */
static void wl_long_small(vcattn_workload_params *p, uint64_t seed) {
    CHECK_STATUS(vcattn_workload_preset("video-long-wan720p", p), VCATTN_STATUS_SUCCESS);
    p->frames = 3;
    p->height = 6;
    p->width = 10;
    p->heads = 3;
    p->seed = seed;
}

TEST(workload_presets) {
    vcattn_workload_params p;
    const struct { const char *name; int64_t t, h, w, heads, seq; float theta; int dt; } want[] = {
        {"video-long-wan720p", 21, 45, 80, 4, 75600, 10000.0f, 44},
        {"video-long-hunyuan720p", 33, 45, 80, 4, 118800, 256.0f, 16},
        {"video-9600", 4, 48, 50, 8, 9600, 10000.0f, 44},
        {"video-9600-sinks", 4, 48, 50, 8, 9600, 10000.0f, 44},
        {"video-long-wan720p-sinks", 21, 45, 80, 4, 75600, 10000.0f, 44},
    };
    int count = 0;
    while (vcattn_workload_preset_name(count)) ++count;
    CHECK_EQ_INT(count, 5);
    CHECK(vcattn_workload_preset_name(-1) == NULL);
    for (int i = 0; i < 5; ++i) {
        memset(&p, 0x5A, sizeof p);
        CHECK_STATUS(vcattn_workload_preset(want[i].name, &p), VCATTN_STATUS_SUCCESS);
        CHECK(!strcmp(vcattn_workload_preset_name(i), want[i].name));
        CHECK_EQ_INT(p.frames, want[i].t);
        CHECK_EQ_INT(p.height, want[i].h);
        CHECK_EQ_INT(p.width, want[i].w);
        CHECK_EQ_INT(p.heads, want[i].heads);
        CHECK_EQ_INT(p.frames * p.height * p.width, want[i].seq);
        CHECK_EQ_INT(p.head_dim, 128);
        CHECK_EQ_INT(p.batch, 1);
        CHECK_NEAR(p.rope_theta, want[i].theta, 1e-3);
        CHECK_EQ_INT(p.rope_dims[0], want[i].dt);
        CHECK_EQ_INT(p.rope_dims[0] + p.rope_dims[1] + p.rope_dims[2], 128);
        CHECK(p.head_scale_min > 0.0f && p.head_scale_min < p.head_scale_max);
        const int sinks = strstr(want[i].name, "-sinks") != NULL;
        CHECK(p.q_channel_offset > 0.0f);
        /* the sink presets put sink tokens where the others put frame tokens */
        CHECK(sinks ? p.v_frame_token_scale == 0.0f && p.sink_head_every == 4 && p.sink_logit > 0.0f
                    : p.v_frame_token_scale > 0.0f && p.sink_head_every == 0 && p.sink_v_scale == 0.0f);
        /* the built-in fields stay the defaults */
        CHECK_NEAR(p.k_channel_offset, 2.0, 1e-6);
        CHECK_NEAR(p.v_outlier_fraction, 0.005, 1e-9);
    }
    memset(&p, 0x5A, sizeof p);
    vcattn_workload_params before = p;
    CHECK_STATUS(vcattn_workload_preset("video-long", &p), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK(memcmp(&p, &before, sizeof p) == 0);
    CHECK_STATUS(vcattn_workload_preset(NULL, &p), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_workload_preset("video-9600", NULL), VCATTN_STATUS_NULL_POINTER);
    /* the init leaves every extension off */
    vcattn_workload_params_init(&p);
    CHECK(p.rope_theta == 0.0f && p.rope_dims[0] == 0 && p.rope_dims[1] == 0 && p.rope_dims[2] == 0);
    CHECK(p.q_channel_offset == 0.0f && p.qk_offset_alignment == 0.0f);
    CHECK(p.head_scale_min == 0.0f && p.head_scale_max == 0.0f && p.v_frame_token_scale == 0.0f);
}

TEST(workload_presets_deterministic) {
    for (int i = 0; vcattn_workload_preset_name(i); ++i) {
        vcattn_workload_params p;
        CHECK_STATUS(vcattn_workload_preset(vcattn_workload_preset_name(i), &p), VCATTN_STATUS_SUCCESS);
        p.frames = 2; /* the preset's frame, fewer of them: quick */
        p.heads = 2;
        wl_bufs a, b;
        if (!wl_make(&p, &a)) return;
        if (!wl_make(&p, &b)) { wl_release(&a); return; }
        size_t bytes = sizeof(float) * (size_t)a.n;
        CHECK(memcmp(a.q, b.q, bytes) == 0);
        CHECK(memcmp(a.k, b.k, bytes) == 0);
        CHECK(memcmp(a.v, b.v, bytes) == 0);
        int finite = 1;
        for (int64_t j = 0; j < a.n; ++j) finite &= isfinite(a.q[j]) && isfinite(a.k[j]) && isfinite(a.v[j]);
        CHECK(finite);
        /* slice (b, h) does not depend on the head count */
        wl_bufs c;
        p.heads = 1;
        if (wl_make(&p, &c)) {
            CHECK(memcmp(a.q, c.q, bytes / 2) == 0 && memcmp(a.v, c.v, bytes / 2) == 0);
            wl_release(&c);
        }
        wl_release(&a);
        wl_release(&b);
    }
}

/* RoPE rotates each (2j, 2j+1) pair of Q and K by pos_axis * theta^(-2i/dims_axis):
 * the data with RoPE equals the data without it rotated by libm's cos/sin, and
 * every pair keeps its norm. */
TEST(workload_rope) {
    vcattn_workload_params p;
    wl_long_small(&p, test_seed());
    wl_bufs on, off;
    if (!wl_make(&p, &on)) return;
    vcattn_workload_params p0 = p;
    p0.rope_theta = 0.0f;
    if (!wl_make(&p0, &off)) { wl_release(&on); return; }
    CHECK(memcmp(on.v, off.v, sizeof(float) * (size_t)on.n) == 0);
    const int64_t D = p.head_dim, S = on.seq;
    double worst_norm = 0.0, worst_rot = 0.0;
    int64_t moved = 0;
    for (int t = 0; t < 2; ++t) {
        const float *x1 = t ? on.k : on.q, *x0 = t ? off.k : off.q;
        for (int64_t h = 0; h < p.heads; ++h)
            for (int64_t s = 0; s < S; ++s) {
                const int64_t pos[3] = {s / (p.height * p.width), (s / p.width) % p.height, s % p.width};
                const float *r1 = x1 + (h * S + s) * D, *r0 = x0 + (h * S + s) * D;
                int64_t ch = 0;
                for (int a = 0; a < 3; ++a)
                    for (int i = 0; i < p.rope_dims[a] / 2; ++i, ch += 2) {
                        double ang = (double)pos[a] * pow((double)p.rope_theta, -2.0 * i / p.rope_dims[a]);
                        double x = r0[ch], y = r0[ch + 1];
                        double ex = x * cos(ang) - y * sin(ang), ey = x * sin(ang) + y * cos(ang);
                        double n0 = sqrt(x * x + y * y), n1 = hypot(r1[ch], r1[ch + 1]);
                        double dn = fabs(n1 - n0) / (n0 + 1e-6);
                        double dr = hypot(r1[ch] - ex, r1[ch + 1] - ey) / (n0 + 1e-6);
                        if (dn > worst_norm) worst_norm = dn;
                        if (dr > worst_rot) worst_rot = dr;
                        moved += r1[ch] != r0[ch];
                    }
                for (; ch < D; ++ch) CHECK(r1[ch] == r0[ch]);
                if (s == 0) /* position (0, 0, 0): no rotation at all */
                    CHECK(memcmp(r1, r0, sizeof(float) * (size_t)D) == 0);
            }
    }
    CHECK_MSG(worst_norm < 1e-5, "RoPE changes a pair norm by %g (relative)", worst_norm);
    CHECK_MSG(worst_rot < 1e-5, "RoPE differs from libm's rotation by %g (relative)", worst_rot);
    CHECK_MSG(moved > on.n / 4, "RoPE moved only %lld values", (long long)moved);
    wl_release(&on);
    wl_release(&off);

    /* HunyuanVideo's bands and theta, and bands that leave channels unrotated */
    CHECK_STATUS(vcattn_workload_preset("video-long-hunyuan720p", &p), VCATTN_STATUS_SUCCESS);
    p.frames = 2; p.height = 4; p.width = 5; p.heads = 1; p.head_dim = 64;
    p.rope_dims[0] = 8; p.rope_dims[1] = 20; p.rope_dims[2] = 20; /* 16 channels unrotated */
    if (wl_make(&p, &on)) {
        p.rope_theta = 0.0f;
        if (wl_make(&p, &off)) {
            for (int64_t s = 0; s < on.seq; ++s)
                for (int64_t d = 48; d < 64; ++d) CHECK(on.q[s * 64 + d] == off.q[s * 64 + d]);
            wl_release(&off);
        }
        wl_release(&on);
    }
}

/* Per-head sharpness: Q of head h is g_h (Q + q_offset); g_h log-uniform in
 * [min, max], different per head; K and V untouched. */
TEST(workload_head_sharpness) {
    vcattn_workload_params p;
    wl_long_small(&p, test_seed());
    p.rope_theta = 0.0f;
    p.q_channel_offset = 0.0f;
    p.heads = 8;
    wl_bufs with, without;
    if (!wl_make(&p, &with)) return;
    vcattn_workload_params p0 = p;
    p0.head_scale_min = p0.head_scale_max = 0.0f;
    if (!wl_make(&p0, &without)) { wl_release(&with); return; }
    const size_t bytes = sizeof(float) * (size_t)with.n;
    CHECK(memcmp(with.k, without.k, bytes) == 0);
    CHECK(memcmp(with.v, without.v, bytes) == 0);
    const int64_t D = p.head_dim, S = with.seq;
    double g[8], gmin = 1e9, gmax = 0.0;
    for (int64_t h = 0; h < p.heads; ++h) {
        double num = 0.0, den = 0.0;
        const float *a = with.q + h * S * D, *b = without.q + h * S * D;
        for (int64_t i = 0; i < S * D; ++i) {
            num += (double)a[i] * b[i];
            den += (double)b[i] * b[i];
        }
        g[h] = num / den;
        double worst = 0.0;
        for (int64_t i = 0; i < S * D; ++i) {
            double e = fabs(a[i] - g[h] * b[i]) / (fabs(b[i]) * g[h] + 1e-6);
            if (e > worst) worst = e;
        }
        CHECK_MSG(worst < 1e-5, "head %lld: Q is not a constant multiple (%g)", (long long)h, worst);
        CHECK_MSG(g[h] >= p.head_scale_min * (1 - 1e-6) && g[h] <= p.head_scale_max * (1 + 1e-6),
                  "head %lld: scale %g outside [%g, %g]", (long long)h, g[h], p.head_scale_min,
                  p.head_scale_max);
        if (g[h] < gmin) gmin = g[h];
        if (g[h] > gmax) gmax = g[h];
    }
    /* 8 log-uniform draws over a factor 4: spread well beyond a factor 1.3 */
    CHECK_MSG(gmax / gmin > 1.3, "per-head scales barely differ: %g .. %g", gmin, gmax);
    for (int64_t h = 1; h < p.heads; ++h) CHECK(g[h] != g[0]);
    wl_release(&with);
    wl_release(&without);
}

/* The Q offset: a per-(head, channel) constant (before RoPE), correlated with
 * K's offset by qk_offset_alignment. */
TEST(workload_q_offset_alignment) {
    vcattn_workload_params p;
    wl_long_small(&p, test_seed());
    p.rope_theta = 0.0f;
    p.head_scale_min = p.head_scale_max = 0.0f;
    p.heads = 4;
    p.q_channel_offset = 1.0f;
    p.qk_offset_alignment = 0.8f;
    wl_bufs a, b;
    if (!wl_make(&p, &a)) return;
    vcattn_workload_params p0 = p;
    p0.q_channel_offset = 0.0f;
    p0.k_channel_offset = 0.0f;
    if (!wl_make(&p0, &b)) { wl_release(&a); return; }
    const int64_t D = p.head_dim, S = a.seq;
    double qq = 0, kk = 0, qk = 0, worst = 0;
    for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t d = 0; d < D; ++d) {
            const int64_t i0 = h * S * D + d;
            double oq = (double)a.q[i0] - b.q[i0], ok = (double)a.k[i0] - b.k[i0];
            qq += oq * oq;
            kk += ok * ok;
            qk += oq * ok;
            for (int64_t s = 1; s < S; ++s)
                worst = fmax(worst, fabs(((double)a.q[i0 + s * D] - b.q[i0 + s * D]) - oq));
        }
    CHECK_MSG(worst < 1e-5, "Q offset not constant over tokens: %g", worst);
    double corr = qk / sqrt(qq * kk), std = sqrt(qq / (double)(p.heads * D));
    CHECK_MSG(corr > 0.65 && corr < 0.92, "Q/K offset correlation %g, expected ~0.8", corr);
    CHECK_MSG(std > 0.8 && std < 1.2, "Q offset std %g, expected ~1", std);
    wl_release(&a);
    wl_release(&b);
}

/* Massive first-of-frame V tokens: token t*H*W of every frame gets the same
 * per-head dense vector (RMS ~ v_frame_token_scale); nothing else changes. */
TEST(workload_frame_tokens) {
    vcattn_workload_params p;
    wl_long_small(&p, test_seed());
    p.frames = 4;
    wl_bufs with, without;
    if (!wl_make(&p, &with)) return;
    vcattn_workload_params p0 = p;
    p0.v_frame_token_scale = 0.0f;
    if (!wl_make(&p0, &without)) { wl_release(&with); return; }
    const size_t bytes = sizeof(float) * (size_t)with.n;
    CHECK(memcmp(with.q, without.q, bytes) == 0);
    CHECK(memcmp(with.k, without.k, bytes) == 0);
    const int64_t D = p.head_dim, S = with.seq, HW = p.height * p.width;
    double first[3][128];
    for (int64_t h = 0; h < p.heads; ++h) {
        double ss = 0.0, worst = 0.0;
        int64_t changed_other = 0;
        for (int64_t s = 0; s < S; ++s) {
            const float *a = with.v + (h * S + s) * D, *b = without.v + (h * S + s) * D;
            if (s % HW) {
                changed_other += memcmp(a, b, sizeof(float) * (size_t)D) != 0;
                continue;
            }
            for (int64_t d = 0; d < D; ++d) {
                double diff = (double)a[d] - b[d];
                if (s == 0) {
                    first[h][d] = diff;
                    ss += diff * diff;
                } else {
                    worst = fmax(worst, fabs(diff - first[h][d]));
                }
            }
        }
        CHECK_EQ_INT(changed_other, 0);
        CHECK_MSG(worst < 1e-4 * p.v_frame_token_scale, "frame tokens get different vectors: %g", worst);
        double rms = sqrt(ss / (double)D);
        CHECK_MSG(rms > 0.7 * p.v_frame_token_scale && rms < 1.3 * p.v_frame_token_scale,
                  "frame-token RMS %g for scale %g", rms, p.v_frame_token_scale);
    }
    /* a different vector per head */
    CHECK(first[0][0] != first[1][0] && first[1][0] != first[2][0]);
    wl_release(&with);
    wl_release(&without);
}

/* Sink heads: in the sink heads (h % 4 == 2) the sink tokens (the first of every
 * frame, the largest V norms) take most of each row's softmax mass, elsewhere next
 * to none; their V norms are 6-15x the typical (bounds with rounding slack). */
TEST(workload_sink_heads) {
    vcattn_workload_params p;
    wl_long_small(&p, test_seed());
    p.heads = 4;
    p.frames = 4;
    p.height = 16;
    p.width = 16;
    p.v_frame_token_scale = 0.0f;
    p.v_outlier_fraction = 0.0f;
    p.sink_head_every = 4;
    p.sink_extra_tokens = 4;
    p.sink_logit = 9.0f;
    p.sink_v_scale = 15.0f;
    wl_bufs w;
    if (!wl_make(&p, &w)) return;
    const int64_t D = p.head_dim, S = w.seq, HW = p.height * p.width;
    const int64_t nsink = p.frames + p.sink_extra_tokens;
    for (int64_t h = 0; h < p.heads; ++h) {
        const float *q = w.q + h * S * D, *k = w.k + h * S * D, *v = w.v + h * S * D;
        double *nv = (double *)malloc(sizeof(double) * (size_t)S), *sc = (double *)malloc(sizeof(double) * (size_t)S);
        if (!nv || !sc) { free(nv); free(sc); CHECK_MSG(0, "out of memory in test"); break; }
        for (int64_t s = 0; s < S; ++s) {
            double n2 = 0.0;
            for (int64_t d = 0; d < D; ++d) n2 += (double)v[s * D + d] * v[s * D + d];
            nv[s] = sqrt(n2);
        }
        /* the sinks = the nsink largest V norms (sparse outliers are off here) */
        double thresh = INFINITY;
        for (int64_t j = 0; j < nsink; ++j) {
            double next = -1.0;
            for (int64_t s = 0; s < S; ++s)
                if (nv[s] < thresh && nv[s] > next) next = nv[s];
            thresh = next;
        }
        thresh *= 0.999; /* nv >= thresh: the nsink largest */
        double rest = 0.0;
        for (int64_t s = 0; s < S; ++s)
            if (nv[s] < thresh) rest += nv[s] * nv[s];
        const double rms = sqrt(rest / (double)(S - nsink));
        for (int64_t t = 0; t < p.frames; ++t)
            CHECK_MSG(nv[t * HW] >= thresh && nv[t * HW] > 4.5 * rms && nv[t * HW] < 16.5 * rms,
                      "frame %lld's sink: V norm %g x", (long long)t, nv[t * HW] / rms);
        double mass = 0.0;
        const int rows = 16;
        for (int r = 0; r < rows; ++r) {
            const int64_t i = (int64_t)(2 * r + 1) * S / (2 * rows) + 3; /* not a frame start */
            double mx = -INFINITY, sum = 0.0, sink = 0.0;
            for (int64_t s = 0; s < S; ++s) {
                double a = 0.0;
                for (int64_t d = 0; d < D; ++d) a += (double)q[i * D + d] * k[s * D + d];
                sc[s] = a / sqrt((double)D);
                mx = fmax(mx, sc[s]);
            }
            for (int64_t s = 0; s < S; ++s) {
                double e = exp(sc[s] - mx);
                sum += e;
                if (nv[s] >= thresh) sink += e;
            }
            mass += sink / sum / rows;
        }
        if (h % 4 == 2)
            CHECK_MSG(mass > 0.5, "sink head %lld: sink mass %g", (long long)h, mass);
        else
            CHECK_MSG(mass < 0.05, "head %lld: sink mass %g", (long long)h, mass);
        free(nv);
        free(sc);
    }
    wl_release(&w);
}

TEST(workload_rejects_bad_extensions) {
    vcattn_workload_params ok, p;
    wl_long_small(&ok, test_seed());
    float q[64], k[64], v[64];
#define WL_BAD(stmt)                                                                           \
    do {                                                                                       \
        p = ok;                                                                                \
        stmt;                                                                                  \
        CHECK_STATUS(vcattn_workload_generate(&p, q, k, v), VCATTN_STATUS_INVALID_ARGUMENT);   \
    } while (0)
    WL_BAD(p.rope_dims[0] = 43);                       /* odd */
    WL_BAD(p.rope_dims[1] = -2);
    WL_BAD(p.rope_dims[2] = 44);                       /* sum 130 > 128 */
    WL_BAD(p.rope_dims[0] = p.rope_dims[1] = p.rope_dims[2] = 0); /* theta without bands */
    WL_BAD(p.rope_theta = 1.0f);
    WL_BAD(p.rope_theta = -10000.0f);
    WL_BAD(p.rope_theta = NAN);
    WL_BAD(p.q_channel_offset = -1.0f);
    WL_BAD(p.qk_offset_alignment = 1.5f);
    WL_BAD(p.qk_offset_alignment = NAN);
    WL_BAD(p.head_scale_min = 0.0f);                   /* only one of the pair is 0 */
    WL_BAD(p.head_scale_min = 3.0f);                   /* min > max */
    WL_BAD(p.head_scale_max = INFINITY);
    WL_BAD(p.head_scale_min = 1e-5f);
    WL_BAD(p.v_frame_token_scale = -1.0f);
    WL_BAD(p.v_frame_token_scale = NAN);
    WL_BAD(p.sink_head_every = -1);
    WL_BAD(p.sink_extra_tokens = 65);
    WL_BAD(p.sink_logit = -1.0f);
    WL_BAD(p.sink_logit = NAN);
    WL_BAD(p.sink_v_scale = 1e4f);
    WL_BAD((p.sink_head_every = 2, p.sink_extra_tokens = 64, p.frames = 1, p.height = 2, p.width = 2));
#undef WL_BAD
    /* nothing written on failure */
    for (int i = 0; i < 64; ++i) q[i] = 7.0f;
    p = ok;
    p.rope_dims[0] = 3;
    vcattn_workload_generate(&p, q, k, v);
    for (int i = 0; i < 64; ++i) CHECK(q[i] == 7.0f);
}
