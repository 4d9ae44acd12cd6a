/* workload_presets.c - the named long-video workload presets (docs/workload.md,
 * "Long-video presets"): grid, heads and RoPE layout of real models on top of the
 * generator's defaults. */
#include <string.h>

#include "internal.h"

/* Video presets (chosen before any method was run on them; docs/workload.md) */
#define WL_PRESET_Q_OFFSET 0.5f          /* Q channel-offset std: a quarter of K's 2.0 */
#define WL_PRESET_QK_ALIGN 0.5f          /* Q offset half aligned with K's: positional heads */
#define WL_PRESET_HEAD_SCALE_MIN 0.5f    /* per-head logit temperature, log-uniform over */
#define WL_PRESET_HEAD_SCALE_MAX 2.0f    /*   a factor 4 centred on the built-in's 1 */
#define WL_PRESET_FRAME_TOKEN_SCALE 20.0f /* first-of-frame V, like v_outlier_scale but dense */
/* Sink presets (chosen before any method was run on them; docs/workload.md, "Sink heads") */
#define WL_SINK_HEAD_EVERY 4      /* heads 2, 6, ... are sink heads */
#define WL_SINK_EXTRA_TOKENS 8    /* sinks besides the first token of every frame */
#define WL_SINK_LOGIT 9.0f        /* nats: ln(9600 / 12) + 2.3 - most of a row's mass */
#define WL_SINK_V_SCALE 15.0f     /* sink V norms 6-15x the typical */

typedef struct {
    const char *name;
    int64_t heads, frames, height, width;
    float rope_theta;
    int rope_dims[3];
    int sinks; /* sink heads and sink tokens instead of the frame-token V */
} wl_preset;

/* Grids: latent frames = (frames - 1) / 4 + 1 (causal 4x temporal VAE),
 * spatial = pixels / 8 (VAE) / 2 (1x2x2 patchify). */
static const wl_preset wl_presets[] = {
    /* Wan2.1/2.2 720p: 81 frames x 720 x 1280 -> 21 x 45 x 80; RoPE 44/42/42, theta 1e4 */
    {"video-long-wan720p", 4, 21, 45, 80, 10000.0f, {44, 42, 42}, 0},
    /* HunyuanVideo 720p: 129 frames x 720 x 1280 -> 33 x 45 x 80; RoPE 16/56/56, theta 256 */
    {"video-long-hunyuan720p", 4, 33, 45, 80, 256.0f, {16, 56, 56}, 0},
    /* a short clip: 13 frames x 768 x 800 through Wan's VAE/patchify -> 4 x 48 x 50 */
    {"video-9600", 8, 4, 48, 50, 10000.0f, {44, 42, 42}, 0},
    /* the same grids with sink heads */
    {"video-9600-sinks", 8, 4, 48, 50, 10000.0f, {44, 42, 42}, 1},
    {"video-long-wan720p-sinks", 4, 21, 45, 80, 10000.0f, {44, 42, 42}, 1},
};

const char *vcattn_workload_preset_name(int index) {
    if (index < 0 || index >= (int)(sizeof wl_presets / sizeof wl_presets[0])) return NULL;
    return wl_presets[index].name;
}

vcattn_status vcattn_workload_preset(const char *name, vcattn_workload_params *p) {
    if (!name || !p) return VCATTN_STATUS_NULL_POINTER;
    const wl_preset *w = NULL;
    for (size_t i = 0; i < sizeof wl_presets / sizeof wl_presets[0]; ++i)
        if (!strcmp(name, wl_presets[i].name)) w = &wl_presets[i];
    if (!w) return VCATTN_STATUS_INVALID_ARGUMENT;
    vcattn_workload_params_init(p);
    p->heads = w->heads;
    p->frames = w->frames;
    p->height = w->height;
    p->width = w->width;
    p->rope_theta = w->rope_theta;
    for (int a = 0; a < 3; ++a) p->rope_dims[a] = w->rope_dims[a];
    /* the physical settings shared by the video presets (docs/workload.md) */
    p->q_channel_offset = WL_PRESET_Q_OFFSET;
    p->qk_offset_alignment = WL_PRESET_QK_ALIGN;
    p->head_scale_min = WL_PRESET_HEAD_SCALE_MIN;
    p->head_scale_max = WL_PRESET_HEAD_SCALE_MAX;
    p->v_frame_token_scale = WL_PRESET_FRAME_TOKEN_SCALE;
    if (w->sinks) {
        p->v_frame_token_scale = 0.0f; /* the frame tokens are sinks here */
        p->sink_head_every = WL_SINK_HEAD_EVERY;
        p->sink_extra_tokens = WL_SINK_EXTRA_TOKENS;
        p->sink_logit = WL_SINK_LOGIT;
        p->sink_v_scale = WL_SINK_V_SCALE;
    }
    return VCATTN_STATUS_SUCCESS;
}
