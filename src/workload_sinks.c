/* workload_sinks.c - the sink heads of the synthetic workload (docs/workload.md, "Sink heads"):
 * a dozen or so tokens of massive V that take most of the softmax mass in every
 * sink_head_every-th head.  Called by workload.c for each (batch, head) slice, before RoPE. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "workload_random.h"

#define WL_SINK_PAIRS 2         /* lowest-frequency RoPE pairs per band that carry the sink score */
#define WL_SINK_V_LOW 0.4       /* a sink's V norm: uniform in [0.4, 1] x sink_v_scale */

/* The sink tokens of batch item b: the first token of every frame, then
 * sink_extra_tokens distinct others drawn from their own stream (shared by
 * every head, as massive activations live in the hidden state).  Returns the count. */
static int64_t wl_sink_tokens(const vcattn_workload_params *p, int64_t b, int64_t seq, int64_t *tok) {
    const int64_t HW = p->height * p->width;
    int64_t n = 0;
    for (int64_t t = 0; t < p->frames; ++t) tok[n++] = t * HW;
    uint64_t rng = wl_stream(p->seed, WL_STREAM_SINK_TOKENS, b, 0);
    while (n < p->frames + p->sink_extra_tokens) {
        int64_t s = (int64_t)(wl_uniform(&rng) * (double)seq);
        int dup = s >= seq;
        for (int64_t i = 0; i < n && !dup; ++i) dup = tok[i] == s;
        if (!dup) tok[n++] = s;
    }
    return n;
}

/* The channels that carry a sink head's score: the WL_SINK_PAIRS lowest-frequency
 * pairs of every RoPE band (they barely turn over the grid, so the score does not
 * depend on where the sink is), or the last channels without RoPE. */
static int wl_sink_channels(const vcattn_workload_params *p, int32_t *ch) {
    int n = 0;
    if (p->rope_theta == 0.0f) {
        for (int i = 0; i < 6 * WL_SINK_PAIRS; ++i) ch[n++] = (int32_t)(p->head_dim - 1 - i);
        return n;
    }
    int start = 0;
    for (int a = 0; a < 3; ++a) {
        const int pairs = p->rope_dims[a] / 2;
        for (int i = pairs - WL_SINK_PAIRS; i < pairs; ++i)
            if (i >= 0) {
                ch[n++] = start + 2 * i;
                ch[n++] = start + 2 * i + 1;
            }
        start += p->rope_dims[a];
    }
    return n;
}

/* A sink head (before RoPE): Q += g_h A u on every token and K += B u on the sink
 * tokens, u a random unit vector over the sink channels, A one Q std per channel,
 * B such that the sink keys score sink_logit nats above the rest (A B g_h / sqrt(D)).
 * Every head (sink or not): the sink tokens' V += m |V|_rms (w_h + e_s) / sqrt(2),
 * w_h and e_s random unit vectors (per head, per token), m uniform in
 * [WL_SINK_V_LOW, 1] x sink_v_scale. */
void vc_workload_head_sinks(const vcattn_workload_params *p, int64_t b, int64_t h, int64_t seq, double g,
                            double q_scale, float *q, float *k, float *v) {
    const int64_t D = p->head_dim;
    int64_t tok[4096 + VC_WORKLOAD_SINK_MAX_EXTRA];
    if (p->frames > 4096) return; /* grids past 4096 frames carry no sinks */
    const int64_t n = wl_sink_tokens(p, b, seq, tok);
    uint64_t rng = wl_stream(p->seed, WL_STREAM_SINK_HEAD, b, h);
    int32_t ch[6 * WL_SINK_PAIRS];
    const int nc = wl_sink_channels(p, ch);
    double u[6 * WL_SINK_PAIRS], un = 0.0;
    for (int i = 0; i < nc; ++i) {
        u[i] = wl_normal(&rng);
        un += u[i] * u[i];
    }
    const int sink = p->sink_head_every > 0 && h % p->sink_head_every == p->sink_head_every / 2;
    if (sink && un > 0.0 && p->sink_logit > 0.0f) {
        const double A = q_scale * sqrt((double)nc);
        const double B = (double)p->sink_logit * sqrt((double)D) / (g * A);
        for (int i = 0; i < nc; ++i) u[i] /= sqrt(un);
        for (int64_t s = 0; s < seq; ++s)
            for (int i = 0; i < nc; ++i) q[s * D + ch[i]] += (float)(g * A * u[i]);
        for (int64_t i = 0; i < n; ++i)
            for (int c = 0; c < nc; ++c) k[tok[i] * D + ch[c]] += (float)(B * u[c]);
    }
    if (p->sink_v_scale == 0.0f) return;
    double ss = 0.0;
    for (int64_t i = 0; i < seq * D; ++i) ss += (double)v[i] * v[i];
    const double rms = sqrt(ss / (double)seq); /* the typical V row norm */
    double w[128], wn = 0.0;
    for (int64_t d = 0; d < D; ++d) {
        w[d] = wl_normal(&rng);
        wn += w[d] * w[d];
    }
    uint64_t mag = wl_stream(p->seed, WL_STREAM_SINK_TOKENS, b, 1); /* m per token: every head */
    for (int64_t i = 0; i < n; ++i) {
        const double m = (WL_SINK_V_LOW + (1.0 - WL_SINK_V_LOW) * wl_uniform(&mag)) * p->sink_v_scale;
        double e[128], en = 0.0;
        for (int64_t d = 0; d < D; ++d) {
            e[d] = wl_normal(&rng);
            en += e[d] * e[d];
        }
        const double cw = m * rms / sqrt(2.0 * wn), ce = m * rms / sqrt(2.0 * en);
        for (int64_t d = 0; d < D; ++d) v[tok[i] * D + d] += (float)(cw * w[d] + ce * e[d]);
    }
}
