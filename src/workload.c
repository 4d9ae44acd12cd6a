/* workload.c - synthetic video-DiT attention inputs (Q, K, V).
 *
 * What is modelled, and why (docs/workload.md has the long form):
 *
 *  1. Content correlated in space and time.  Every token of a T x H x W grid
 *     (sequence order t-major raster, s = (t*H + y)*W + x) carries a latent
 *     vector z of WL_LATENT factors, a property of the clip shared by every
 *     head of one batch item (like the hidden state that all heads project):
 *       z = sqrt(0.7) * prototype[region(s)] + sqrt(0.3) * smooth field.
 *     The smooth field is white noise through a stationary AR(1) filter
 *     along x, then y (coefficient spatial_correlation) and t
 *     (temporal_correlation): unit variance, corr = rho_s^(|dx|+|dy|) *
 *     rho_t^|dt|.  Regions: each token takes the argmax of WL_SEGMENTS such
 *     fields, which cuts the clip into irregular, coherent patches (objects,
 *     background) whose tokens share a random prototype even when far apart.
 *     Without regions, content would only be local and static 3-D cubes
 *     would group V as well as clustering; the paper measures the opposite
 *     (block-mean energy 8% sequence order, 12% cubes, 36% k-means).  With
 *     WL_SEGMENTS = 24 and the shares below, v_channel_offset = 0 gives
 *     13-17% / 20-24% / 39-44% at the default size (64-cluster k-means).
 *  2. Per-head projections.  Q, K and V are z times random WL_LATENT x D
 *     matrices (different per tensor and per head), times per-channel gains,
 *     plus i.i.d. noise carrying WL_NOISE_SHARE of each entry's variance so
 *     that nothing is exactly low-rank.  K's matrix is correlated with Q's
 *     (WL_QK_SHARED) so that a query scores similar - hence mostly nearby -
 *     tokens higher, as in real video attention; Q is scaled by WL_Q_SCALE
 *     so that softmax rows are moderately peaked (row max probability around
 *     1e-2 at 8K tokens, neither uniform nor one-hot).
 *  3. K channel offsets: a per-(head, channel) constant with std
 *     k_channel_offset added to every K token.  It shifts each score row by a
 *     constant (softmax does not change) but dominates K's range: the reason
 *     SageAttention subtracts the token mean of K before quantizing.
 *  4. V channel offsets: a per-(head, channel) constant with std
 *     v_channel_offset: energy that a block mean removes for free.
 *  5. Sparse V outliers.  round(v_outlier_fraction * S) tokens, grown around
 *     a few space-time blobs (highlights, edges; a blob drifts across frames),
 *     get sign * v_outlier_scale * m (m uniform in [0.75, 1.25], in units of
 *     the V std, which is 1) added in v_outlier_channels channels.  The
 *     tokens are a property of the clip (shared by the heads of one batch
 *     item); the channel set and signs are drawn per (batch, head).  This is
 *     the paper's observation: V outliers sit in a few tokens whose channels
 *     change across heads; they inflate per-channel or per-block V scales.
 *
 *  6. Long-video extensions (all off by default, on in the presets; docs/
 *     workload.md "Long-video presets"): a per-(head, channel) Q offset
 *     partly aligned with K's, a per-head logit scale g_h (log-uniform),
 *     massive first-of-frame V tokens, and 3-D RoPE on Q and K (Wan's /
 *     HunyuanVideo's bands).  Under RoPE the constant parts of Q and K give
 *     position-dependent scores that decay with distance; with 75K-120K
 *     keys this makes the long, flat softmax rows of real long videos.
 *
 * Magnitudes: the token-varying part of K and V has RMS 1 per entry (like
 * post-norm activations), Q has RMS WL_Q_SCALE; offsets and outliers come on
 * top.
 *
 * Determinism: every random draw comes from a splitmix64 stream keyed by
 * (seed, purpose, batch index, head index) and is consumed in a fixed order
 * that does not depend on the float knobs.  So the bytes of slice (b, h)
 * depend only on the seed, b, h, the grid and head_dim - not on the number
 * of threads, batches or heads.  Changing an offset or the outlier scale
 * changes only that term of the data (everything else stays bit-identical),
 * and changing a correlation refilters the same innovations, which makes
 * ablations clean.  Only v_outlier_fraction moves which tokens are outliers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "workload_random.h" /* the random streams and the deterministic elementary functions */

#define WL_LATENT 16          /* latent factors per token */
#define WL_SEGMENTS 24        /* competing region fields per clip */
#define WL_SEGMENT_SHARE 0.7  /* share of the latent variance that is the region prototype */
#define WL_NOISE_SHARE 0.25   /* share of each entry's variance that is i.i.d. noise */
#define WL_QK_SHARED 0.5      /* correlation of the Q and K projection matrices */
#define WL_Q_SCALE 1.25       /* RMS of Q's entries: sets how peaked softmax is */
#define WL_BLOB_TOKENS 32     /* outlier tokens per blob (the blob count follows) */
#define WL_MAX_BLOBS 16
#define WL_PARAM_MAX 1.0e6f   /* larger offsets/scales could overflow float */



/* ---- validation ----------------------------------------------------------- */

static int wl_finite_in(float x, float lo, float hi) { return isfinite(x) && x >= lo && x <= hi; }

static vcattn_status wl_validate(const vcattn_workload_params *p, int64_t *seq) {
    if (p->batch <= 0 || p->heads <= 0 || p->frames <= 0 || p->height <= 0 || p->width <= 0 ||
        p->head_dim <= 0)
        return VCATTN_STATUS_BAD_SHAPE;
    if (p->head_dim != 64 && p->head_dim != 128) return VCATTN_STATUS_UNSUPPORTED_HEAD_DIM;
    int64_t s, count;
    if (!vc_mul_i64(p->frames, p->height, &s) || !vc_mul_i64(s, p->width, &s))
        return VCATTN_STATUS_SIZE_OVERFLOW;
    vcattn_status st = vc_count4(p->batch, p->heads, s, p->head_dim, sizeof(float), &count);
    if (st != VCATTN_STATUS_SUCCESS) return st;
    /* scratch: B*S*(WL_LATENT + 1) + S*(WL_SEGMENTS + 4) floats, less than
     * the B*H*S*D floats checked above since D >= 64 */
    if (!wl_finite_in(p->spatial_correlation, 0.0f, 1.0f) ||
        !wl_finite_in(p->temporal_correlation, 0.0f, 1.0f) ||
        !wl_finite_in(p->v_outlier_fraction, 0.0f, 1.0f) ||
        !wl_finite_in(p->k_channel_offset, 0.0f, WL_PARAM_MAX) ||
        !wl_finite_in(p->v_outlier_scale, 0.0f, WL_PARAM_MAX) ||
        !wl_finite_in(p->v_channel_offset, 0.0f, WL_PARAM_MAX) || p->v_outlier_channels < 0 ||
        (int64_t)p->v_outlier_channels > p->head_dim)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    /* long-video extensions */
    if (!wl_finite_in(p->q_channel_offset, 0.0f, WL_PARAM_MAX) ||
        !wl_finite_in(p->qk_offset_alignment, -1.0f, 1.0f) ||
        !wl_finite_in(p->v_frame_token_scale, 0.0f, WL_PARAM_MAX) ||
        !wl_finite_in(p->head_scale_min, 0.0f, 100.0f) ||
        !wl_finite_in(p->head_scale_max, 0.0f, 100.0f))
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->sink_head_every < 0 || p->sink_head_every > 1024 || p->sink_extra_tokens < 0 ||
        p->sink_extra_tokens > VC_WORKLOAD_SINK_MAX_EXTRA || !wl_finite_in(p->sink_logit, 0.0f, 50.0f) ||
        !wl_finite_in(p->sink_v_scale, 0.0f, 1000.0f))
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->sink_head_every > 0 && p->frames + p->sink_extra_tokens > s)
        return VCATTN_STATUS_INVALID_ARGUMENT; /* more sinks than tokens */
    if ((p->head_scale_min == 0.0f) != (p->head_scale_max == 0.0f) ||
        p->head_scale_min > p->head_scale_max ||
        (p->head_scale_min != 0.0f && p->head_scale_min < 1e-3f))
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (!(p->rope_theta == 0.0f || wl_finite_in(p->rope_theta, 2.0f, 1.0e9f)))
        return VCATTN_STATUS_INVALID_ARGUMENT;
    int64_t rope_sum = 0;
    for (int a = 0; a < 3; ++a) {
        if (p->rope_dims[a] < 0 || p->rope_dims[a] % 2) return VCATTN_STATUS_INVALID_ARGUMENT;
        rope_sum += p->rope_dims[a];
    }
    if (rope_sum > p->head_dim || (p->rope_theta != 0.0f && rope_sum == 0))
        return VCATTN_STATUS_INVALID_ARGUMENT;
    *seq = s;
    return VCATTN_STATUS_SUCCESS;
}

/* ---- per batch item: latent field and outlier tokens ----------------------- */

/* x_0 = e_0, x_i = rho x_{i-1} + sqrt(1 - rho^2) e_i over `n` steps of
 * `len` contiguous floats, `step` floats apart: a stationary AR(1) that keeps
 * unit variance and gives correlation rho^distance. */
static void wl_ar1(float *z, int64_t n, int64_t step, int64_t len, float rho, float keep) {
    for (int64_t i = 1; i < n; ++i) {
        float *cur = z + i * step;
        const float *prev = cur - step;
        for (int64_t j = 0; j < len; ++j) cur[j] = rho * prev[j] + keep * cur[j];
    }
}

/* Unit-variance white noise smoothed along x, y (rho_s) and t (rho_t);
 * z holds `per_token` independent fields, token-major. */
static void wl_smooth_noise(const vcattn_workload_params *p, uint64_t *rng, float *z,
                            int64_t per_token) {
    const int64_t T = p->frames, H = p->height, W = p->width, n = per_token;
    for (int64_t i = 0; i < T * H * W * n; ++i) z[i] = (float)wl_normal(rng);
    float rs = p->spatial_correlation, rt = p->temporal_correlation;
    float ks = (float)sqrt(1.0 - (double)rs * rs), kt = (float)sqrt(1.0 - (double)rt * rt);
    for (int64_t r = 0; r < T * H; ++r) wl_ar1(z + r * W * n, W, n, n, rs, ks);    /* along x */
    for (int64_t t = 0; t < T; ++t) wl_ar1(z + t * H * W * n, H, W * n, W * n, rs, ks); /* y */
    wl_ar1(z, T, H * W * n, H * W * n, rt, kt);                                  /* along t */
}

/* z (S, WL_LATENT) of batch item b: a region prototype plus a smooth field.
 * Regions: each token takes the argmax of WL_SEGMENTS smooth fields, which
 * cuts the clip into irregular, coherent regions (objects, background); a
 * region can reappear far away, so tokens far apart can share content. */
static void wl_latent_field(const vcattn_workload_params *p, int64_t b, float *z, float *seg) {
    const int64_t S = p->frames * p->height * p->width, L = WL_LATENT, G = WL_SEGMENTS;
    uint64_t rng = wl_stream(p->seed, WL_STREAM_FIELD, b, 0);
    float proto[WL_SEGMENTS * WL_LATENT];
    for (int64_t i = 0; i < G * L; ++i) proto[i] = (float)wl_normal(&rng);
    wl_smooth_noise(p, &rng, z, L);
    wl_smooth_noise(p, &rng, seg, G);
    const float a = (float)sqrt(WL_SEGMENT_SHARE), c = (float)sqrt(1.0 - WL_SEGMENT_SHARE);
    for (int64_t s = 0; s < S; ++s) {
        const float *g = seg + s * G;
        int64_t best = 0;
        for (int64_t i = 1; i < G; ++i)
            if (g[i] > g[best]) best = i;
        float *zs = z + s * L;
        for (int64_t l = 0; l < L; ++l) zs[l] = a * proto[best * L + l] + c * zs[l];
    }
}

typedef struct {
    double score;
    int64_t index;
} wl_ranked;

static int wl_rank_cmp(const void *a, const void *b) {
    const wl_ranked *x = (const wl_ranked *)a, *y = (const wl_ranked *)b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* mag[s] = 0 for ordinary tokens, the outlier magnitude factor (in
 * [0.75, 1.25]) for the n_out tokens nearest to a few random blobs. */
static void wl_outlier_tokens(const vcattn_workload_params *p, int64_t b, int64_t seq,
                              wl_ranked *rank, float *mag) {
    memset(mag, 0, sizeof(float) * (size_t)seq);
    int64_t n_out = (int64_t)floor((double)p->v_outlier_fraction * (double)seq + 0.5);
    if (n_out > seq) n_out = seq;
    if (n_out <= 0) return;
    uint64_t rng = wl_stream(p->seed, WL_STREAM_BLOBS, b, 0);
    int nb = (int)((n_out + WL_BLOB_TOKENS - 1) / WL_BLOB_TOKENS);
    if (nb > WL_MAX_BLOBS) nb = WL_MAX_BLOBS;
    /* Each blob: a centre, a drift per frame (a moving highlight), and
     * inverse radii; time is stretched so blobs persist over a few frames. */
    double c[WL_MAX_BLOBS][3], vel[WL_MAX_BLOBS][2], inv_r[WL_MAX_BLOBS][3];
    for (int i = 0; i < nb; ++i) {
        c[i][0] = wl_uniform(&rng) * (double)p->frames;
        c[i][1] = wl_uniform(&rng) * (double)p->height;
        c[i][2] = wl_uniform(&rng) * (double)p->width;
        vel[i][0] = wl_uniform(&rng) - 0.5;
        vel[i][1] = wl_uniform(&rng) - 0.5;
        inv_r[i][0] = 1.0 / (1.5 + 2.5 * wl_uniform(&rng));
        inv_r[i][1] = 1.0 / (1.0 + 1.5 * wl_uniform(&rng));
        inv_r[i][2] = 1.0 / (1.0 + 1.5 * wl_uniform(&rng));
    }
    int64_t s = 0;
    for (int64_t t = 0; t < p->frames; ++t)
        for (int64_t y = 0; y < p->height; ++y)
            for (int64_t x = 0; x < p->width; ++x, ++s) {
                double best = INFINITY;
                for (int i = 0; i < nb; ++i) {
                    double dt = ((double)t + 0.5 - c[i][0]);
                    double dy = ((double)y + 0.5 - c[i][1] - vel[i][0] * dt) * inv_r[i][1];
                    double dx = ((double)x + 0.5 - c[i][2] - vel[i][1] * dt) * inv_r[i][2];
                    dt *= inv_r[i][0];
                    double d = dt * dt + dy * dy + dx * dx;
                    if (d < best) best = d;
                }
                /* ragged edges: a token-level jitter of the distance */
                rank[s].score = best * (1.0 + 0.5 * wl_uniform(&rng));
                rank[s].index = s;
            }
    qsort(rank, (size_t)seq, sizeof *rank, wl_rank_cmp);
    for (int64_t i = 0; i < n_out; ++i) mag[rank[i].index] = 1.0f; /* mark */
    /* magnitudes in sequence order, so they do not depend on the sort */
    for (int64_t i = 0; i < seq; ++i)
        if (mag[i] != 0.0f) mag[i] = (float)(0.75 + 0.5 * wl_uniform(&rng));
}

/* ---- per (batch, head): projections, offsets, outliers --------------------- */

typedef struct {
    const vcattn_workload_params *p;
    int64_t seq;
    const float *z;   /* (B, S, WL_LATENT) */
    const float *mag; /* (B, S) */
    float *q, *k, *v;
    /* RoPE tables (NULL without RoPE): cos/sin per (position, pair) of each
     * axis, rope_cs[a] = {cos..., sin...} of (n_a positions) x (rope_dims[a]/2) */
    const float *rope_cs[3];
} wl_ctx;

/* Any long-video extension on?  (All off: wl_head writes exactly what it
 * wrote before they existed.) */
static int wl_extras_on(const vcattn_workload_params *p) {
    return p->rope_theta != 0.0f || p->q_channel_offset != 0.0f || p->head_scale_min != 0.0f ||
           p->v_frame_token_scale != 0.0f || p->sink_head_every != 0 || p->sink_v_scale != 0.0f;
}

/* cos/sin of pos * theta^(-2i/dims) for pos in [0, n), i in [0, dims/2):
 * Wan's and HunyuanVideo's per-axis frequencies (rope_params /
 * get_1d_rotary_pos_embed).  cs: 2 * n * (dims/2) floats. */
static void wl_rope_table(double theta, int dims, int64_t n, float *cs) {
    const int pairs = dims / 2;
    const double lt = wl_log2(theta);
    for (int i = 0; i < pairs; ++i) {
        double w = wl_exp2(-(double)(2 * i) / (double)dims * lt);
        for (int64_t x = 0; x < n; ++x) {
            double sn, c;
            wl_sincos((double)x * w, &sn, &c);
            cs[x * pairs + i] = (float)c;
            cs[n * pairs + x * pairs + i] = (float)sn;
        }
    }
}

/* Rotate the adjacent pairs (2j, 2j+1) of one token row: the first
 * rope_dims[0]/2 pairs by the t band, then y, then x; channels past the
 * bands stay as they are.  (Wan's rope_apply / HunyuanVideo's
 * apply_rotary_emb with real cos/sin: x' = x cos - y sin, y' = x sin + y cos.) */
static void wl_rope_row(const wl_ctx *c, float *row, const int64_t pos[3]) {
    const vcattn_workload_params *p = c->p;
    const int64_t n[3] = {p->frames, p->height, p->width};
    int64_t ch = 0;
    for (int a = 0; a < 3; ++a) {
        const int pairs = p->rope_dims[a] / 2;
        const float *cs = c->rope_cs[a] + pos[a] * pairs, *sn = c->rope_cs[a] + n[a] * pairs + pos[a] * pairs;
        for (int i = 0; i < pairs; ++i, ch += 2) {
            float x = row[ch], y = row[ch + 1];
            row[ch] = x * cs[i] - y * sn[i];
            row[ch + 1] = x * sn[i] + y * cs[i];
        }
    }
}

/* Per-channel gains (1 + n/8)^2, n ~ N(0,1): positive, median 1, log-std
 * about 0.25 (like a log-normal, without libm), scaled to RMS 1: real
 * channels differ in spread, which matters for per-channel scales. */
static void wl_gains(uint64_t *rng, float *g, int64_t d) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) {
        double a = 1.0 + 0.125 * wl_normal(rng);
        g[i] = (float)(a * a);
        ss += (double)g[i] * g[i];
    }
    float norm = (float)(1.0 / sqrt(ss / (double)d)); /* RMS 1 over channels */
    for (int64_t i = 0; i < d; ++i) g[i] *= norm;
}

static double wl_head_scale(const vcattn_workload_params *p, double u) {
    if (p->head_scale_min == 0.0f) return 1.0;
    return (double)p->head_scale_min *
           wl_exp2(u * wl_log2((double)p->head_scale_max / (double)p->head_scale_min));
}

double vc_workload_head_scale(const vcattn_workload_params *p, int64_t b, int64_t h) {
    uint64_t rng = wl_stream(p->seed, WL_STREAM_EXTRA, b, h); /* its first draw */
    return wl_head_scale(p, wl_uniform(&rng));
}

/* The long-video terms of slice (b, h), on top of the base tensors, from
 * their own stream (so the base draws are untouched):
 *   Q <- g_h (Q + q_off), g_h = per-head scale, log-uniform in
 *        [head_scale_min, head_scale_max]; q_off = q_channel_offset x
 *        (a K_unit + sqrt(1 - a^2) n), a = qk_offset_alignment;
 *   V[first token of each frame] += v_frame_token_scale x w_h, w_h ~ N(0, 1)^D;
 *   Q, K <- 3-D RoPE at the token's (t, y, x).
 * Draw order (fixed, whatever the knobs): u for g_h, D normals for q_off,
 * D normals for w_h. */
static void wl_head_extras(const wl_ctx *c, int64_t b, int64_t h, const double *koff_unit,
                           float *q, float *k, float *v) {
    const vcattn_workload_params *p = c->p;
    const int64_t D = p->head_dim, S = c->seq, HW = p->height * p->width;
    uint64_t rng = wl_stream(p->seed, WL_STREAM_EXTRA, b, h);
    const double g = wl_head_scale(p, wl_uniform(&rng));
    float qoff[128], wv[128];
    const double a = p->qk_offset_alignment, a_own = sqrt(1.0 - a * a);
    for (int64_t d = 0; d < D; ++d)
        qoff[d] = (float)(p->q_channel_offset * (a * koff_unit[d] + a_own * wl_normal(&rng)));
    for (int64_t d = 0; d < D; ++d) wv[d] = (float)(p->v_frame_token_scale * wl_normal(&rng));
    const float gf = (float)g;
    if (p->head_scale_min != 0.0f || p->q_channel_offset != 0.0f)
        for (int64_t s = 0; s < S; ++s)
            for (int64_t d = 0; d < D; ++d) q[s * D + d] = gf * (q[s * D + d] + qoff[d]);
    if (p->v_frame_token_scale != 0.0f)
        for (int64_t t = 0; t < p->frames; ++t)
            for (int64_t d = 0; d < D; ++d) v[t * HW * D + d] += wv[d];
    if (p->sink_head_every != 0 || p->sink_v_scale != 0.0f) vc_workload_head_sinks(p, b, h, S, g, WL_Q_SCALE, q, k, v);
    if (p->rope_theta != 0.0f) {
        int64_t s = 0, pos[3];
        for (pos[0] = 0; pos[0] < p->frames; ++pos[0])
            for (pos[1] = 0; pos[1] < p->height; ++pos[1])
                for (pos[2] = 0; pos[2] < p->width; ++pos[2], ++s) {
                    wl_rope_row(c, q + s * D, pos);
                    wl_rope_row(c, k + s * D, pos);
                }
    }
}

static void wl_head(void *vctx, int64_t task, int worker) {
    (void)worker;
    const wl_ctx *c = (const wl_ctx *)vctx;
    const vcattn_workload_params *p = c->p;
    const int64_t D = p->head_dim, L = WL_LATENT, S = c->seq;
    const int64_t b = task / p->heads, h = task % p->heads;

    float aq[WL_LATENT * 128], ak[WL_LATENT * 128], av[WL_LATENT * 128];
    float gq[128], gk[128], gv[128], koff[128], voff[128], vout[128];
    uint64_t rng = wl_stream(p->seed, WL_STREAM_HEAD, b, h);
    /* Entries N(0, 1/L) give unit-variance projections of a unit-variance z. */
    const double inv_sqrt_l = 1.0 / sqrt((double)L);
    for (int64_t i = 0; i < L * D; ++i) aq[i] = (float)(wl_normal(&rng) * inv_sqrt_l);
    const double shared = WL_QK_SHARED, own = sqrt(1.0 - WL_QK_SHARED * WL_QK_SHARED);
    for (int64_t i = 0; i < L * D; ++i)
        ak[i] = (float)(shared * aq[i] + own * wl_normal(&rng) * inv_sqrt_l);
    for (int64_t i = 0; i < L * D; ++i) av[i] = (float)(wl_normal(&rng) * inv_sqrt_l);
    wl_gains(&rng, gq, D);
    wl_gains(&rng, gk, D);
    wl_gains(&rng, gv, D);
    double koff_unit[128]; /* the unit draws, for the Q offset's alignment */
    for (int64_t i = 0; i < D; ++i) {
        koff_unit[i] = wl_normal(&rng);
        koff[i] = (float)(p->k_channel_offset * koff_unit[i]);
    }
    for (int64_t i = 0; i < D; ++i) voff[i] = (float)(p->v_channel_offset * wl_normal(&rng));
    /* Outlier channels: signs for all channels, then a partial Fisher-Yates
     * shuffle picks v_outlier_channels of them (drawn last, so the count does
     * not disturb the draws above). */
    float sign[128];
    int32_t order[128];
    for (int64_t i = 0; i < D; ++i) sign[i] = (wl_next(&rng) >> 63) ? -1.0f : 1.0f;
    for (int64_t i = 0; i < D; ++i) order[i] = (int32_t)i;
    for (int64_t i = 0; i < p->v_outlier_channels; ++i) {
        int64_t j = i + (int64_t)(wl_uniform(&rng) * (double)(D - i));
        if (j >= D) j = D - 1;
        int32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (int64_t i = 0; i < D; ++i) vout[i] = 0.0f;
    for (int64_t i = 0; i < p->v_outlier_channels; ++i)
        vout[order[i]] = sign[order[i]] * p->v_outlier_scale;

    uint64_t nq = wl_stream(p->seed, WL_STREAM_NOISE_Q, b, h);
    uint64_t nk = wl_stream(p->seed, WL_STREAM_NOISE_K, b, h);
    uint64_t nv = wl_stream(p->seed, WL_STREAM_NOISE_V, b, h);
    const float sig = (float)sqrt(1.0 - WL_NOISE_SHARE), noi = (float)sqrt(WL_NOISE_SHARE);
    for (int64_t i = 0; i < D; ++i) gq[i] *= (float)WL_Q_SCALE;

    const int64_t off = (b * p->heads + h) * S * D;
    float *q = c->q + off, *k = c->k + off, *v = c->v + off;
    const float *zb = c->z + b * S * L, *magb = c->mag + b * S;
    float eq[128], ek[128], ev[128];
    for (int64_t s = 0; s < S; ++s) {
        const float *zs = zb + s * L;
        float *qs = q + s * D, *ks = k + s * D, *vs = v + s * D;
        for (int64_t d = 0; d < D; ++d) eq[d] = wl_fast_normal(&nq);
        for (int64_t d = 0; d < D; ++d) ek[d] = wl_fast_normal(&nk);
        for (int64_t d = 0; d < D; ++d) ev[d] = wl_fast_normal(&nv);
        const float m = magb[s]; /* 0 unless an outlier token */
        /* 16 channels at a time, so the accumulators stay in registers */
        for (int64_t d0 = 0; d0 < D; d0 += 16) {
            float accq[16] = {0}, acck[16] = {0}, accv[16] = {0};
            for (int64_t l = 0; l < L; ++l) {
                const float zl = zs[l];
                const float *aql = aq + l * D + d0, *akl = ak + l * D + d0, *avl = av + l * D + d0;
                for (int j = 0; j < 16; ++j) {
                    accq[j] += zl * aql[j];
                    acck[j] += zl * akl[j];
                    accv[j] += zl * avl[j];
                }
            }
            for (int j = 0; j < 16; ++j) {
                const int64_t d = d0 + j;
                qs[d] = gq[d] * (sig * accq[j] + noi * eq[d]);
                ks[d] = gk[d] * (sig * acck[j] + noi * ek[d]) + koff[d];
                vs[d] = gv[d] * (sig * accv[j] + noi * ev[d]) + voff[d] + m * vout[d];
            }
        }
    }
    if (wl_extras_on(p)) wl_head_extras(c, b, h, koff_unit, q, k, v);
}

/* ---- public ---------------------------------------------------------------- */

void vcattn_workload_params_init(vcattn_workload_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->batch = 1;
    p->heads = 2;
    p->frames = 8;
    p->height = 32;
    p->width = 32;
    p->head_dim = 128;
    p->seed = 1;
    p->spatial_correlation = 0.9f;
    p->temporal_correlation = 0.8f;
    p->k_channel_offset = 2.0f;
    p->v_outlier_fraction = 0.005f;
    p->v_outlier_scale = 20.0f;
    p->v_outlier_channels = 8;
    p->v_channel_offset = 0.5f;
}

vcattn_status vcattn_workload_generate(const vcattn_workload_params *p, float *q, float *k,
                                       float *v) {
    if (!p || !q || !k || !v) return VCATTN_STATUS_NULL_POINTER;
    int64_t seq = 0;
    vcattn_status st = wl_validate(p, &seq);
    if (st != VCATTN_STATUS_SUCCESS) return st;

    /* sizes below fit: B*S*(L+1) floats < B*H*S*D floats, checked above */
    const size_t bs = (size_t)p->batch * (size_t)seq;
    float *z = (float *)malloc(sizeof(float) * bs * WL_LATENT);
    float *mag = (float *)malloc(sizeof(float) * bs);
    wl_ranked *rank = (wl_ranked *)malloc(sizeof(wl_ranked) * (size_t)seq);
    float *seg = (float *)malloc(sizeof(float) * (size_t)seq * WL_SEGMENTS);
    if (!z || !mag || !rank || !seg) {
        free(z);
        free(mag);
        free(rank);
        free(seg);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < p->batch; ++b) {
        wl_latent_field(p, b, z + (size_t)b * (size_t)seq * WL_LATENT, seg);
        wl_outlier_tokens(p, b, seq, rank, mag + (size_t)b * (size_t)seq);
    }
    free(rank);
    free(seg);

    wl_ctx ctx = {p, seq, z, mag, q, k, v, {NULL, NULL, NULL}};
    float *rope = NULL;
    if (p->rope_theta != 0.0f) {
        const int64_t n[3] = {p->frames, p->height, p->width};
        size_t total = 0, at = 0;
        for (int a = 0; a < 3; ++a) total += 2u * (size_t)n[a] * (size_t)(p->rope_dims[a] / 2) + 1u;
        rope = (float *)malloc(sizeof(float) * total);
        if (!rope) {
            free(z);
            free(mag);
            return VCATTN_STATUS_OUT_OF_MEMORY;
        }
        for (int a = 0; a < 3; ++a) {
            ctx.rope_cs[a] = rope + at;
            wl_rope_table((double)p->rope_theta, p->rope_dims[a], n[a], rope + at);
            at += 2u * (size_t)n[a] * (size_t)(p->rope_dims[a] / 2) + 1u;
        }
    }
    vc_parallel_for(p->batch * p->heads, 0, wl_head, &ctx);
    free(rope);
    free(z);
    free(mag);
    return VCATTN_STATUS_SUCCESS;
}
