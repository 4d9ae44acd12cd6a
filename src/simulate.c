/* simulate.c - the CPU simulation of every low-bit method: one code path,
 * configured by vcattn_method_config flags.
 *
 * It follows the kernel's structure: per (batch, head) the K and V passes
 * (smoothing, V-Smooth permutation and block demean, quantization), then
 * 128-query tiles that walk the 128-key blocks with an online softmax, a
 * fresh accumulator per block folded into the running output (two-level
 * accumulation) and, for V-Smooth, the mean restore of eq. (6):
 *     O <- alpha*O + P_q R_q + r mu^T,   l <- alpha*l + r.
 *
 * Arithmetic: dot products accumulate in double (exact for INT8 codes, and
 * within rounding of the tensor core's FP32 accumulator otherwise).  Where the
 * kernel rounds a per-score quantity to FP32 (the scaled score, the running
 * max, exp2, the ExpCast bracket) the simulation rounds too, through R().
 * When nothing is quantized R() is the identity and the whole path is FP64:
 * that is how the tests show the permutation and the mean restore are exact.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "numerics.h"

#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453

/* ---- per-(batch, head) prepared operands ------------------------------------------ */

typedef struct {
    int64_t nblk;      /* key blocks (Skv rounded up to 128) */
    float *kt;         /* [nblk][D][128] K code values (or dequantized), transposed per block;
                          every value is exact in FP32 */
    float *kscale;     /* [nblk*128] per-key dequantization scale (1 when folded into kt) */
    float *ksm;        /* [nblk*128][D] smoothed, permuted K in FP32 (for Q smoothing's delta) */
    double *vq;        /* [nblk*128][D] V (or the residual) in channel-scale units */
    float *vqf;        /* vq in FP32 (exact: codes or dequantized codes) for the fast path */
    float *vexact;     /* [nblk*128][D] the exact permuted V (error budget) */
    double *mu;        /* [nblk][D] block means in channel-scale units (0 without V-Smooth) */
    double chan_scale[128];
    int k_exp;         /* NVFP4 K: the tensor scale's exponent (kscale = 2^k_exp), else 0 */
    int v_shift;       /* V held times 2^-v_shift (0 unless max|V| > 2^60: FP32 sums of P V stay finite) */
    double kmean[128]; /* K channel mean (0 without K smoothing) */
    const int32_t *perm; /* permuted position -> original token, NULL = identity */
} head_data;

typedef struct {
    const vcattn_attention_params *p;
    const vcattn_method_config *cfg;
    vcattn_sim_outputs *extra;
    head_data hd;
    int64_t b, h;
    int64_t tiles;
    int fp32_pipeline;   /* round per-score quantities like the kernel does */
    double sml2e;        /* softmax scale * log2(e), the score -> log2 factor */
    float p_log2_offset; /* subtracted from the row max (P's static scale) */
    double lse_log2_bias;
    /* query-row sampling (vcattn_simulate_attention_rows): task t computes
     * the listed rows rows[task_first[t] .. task_first[t+1]) (at most 128,
     * from at most task_sources tiles); outputs are indexed by list
     * position.  rows = NULL: task t is tile t, every row, outputs by
     * sequence position. */
    const int64_t *rows;
    int64_t n_out; /* output rows per (batch, head): n_rows, or seq_q */
    int64_t *task_first;
    int64_t task_sources; /* most source tiles a task spans (1 for a full run) */
    float q_nvfp4_scale; /* NVFP4 tensor scale of this head's (smoothed) Q */
    int q_exp;           /* its exponent (NVFP4 Q codes are held times 2^-q_exp), else 0 */
    /* set by a task whose FP32 scores or outputs are not finite (finite
     * inputs, scores beyond FP32): the run answers SCORE_OVERFLOW */
    atomic_int overflow;
    /* per-worker scratch */
    double **scratch;
    size_t scratch_doubles;
} sim_ctx;

static inline double R(const sim_ctx *c, double x) { return c->fp32_pipeline ? (double)(float)x : x; }

static inline int64_t orig_token(const head_data *hd, int64_t j) { return hd->perm ? hd->perm[j] : j; }

/* Q/K scale groups.  SageAttention2 "per_thread" on sm90: a Q scale covers
 * rows {16w+g, 16w+g+8} of each 64-row block (w = warp, g = lane/4, the rows
 * a thread owns in the wgmma accumulator); a K scale covers the keys
 * {8j+2t, 8j+2t+1} of a 128-key block (t = lane%4, the accumulator columns). */
static inline int64_t q_group_of_row(vcattn_qk_granularity g, int64_t row_in_tile) {
    if (g == VCATTN_QK_GRANULARITY_THREAD) {
        int64_t blk = row_in_tile / 64, r = row_in_tile % 64;
        return blk * 32 + (r / 16) * 8 + (r % 8);
    }
    return 0;
}

static inline int64_t k_group_of_key(vcattn_qk_granularity g, int64_t key_in_block) {
    return g == VCATTN_QK_GRANULARITY_THREAD ? (key_in_block % 8) / 2 : 0;
}

/* Quantizes rows[0..n) (each D floats, row i in group group_of[i]) of a Q
 * tile or a K block to code values `codes` (row-major [n][D]) and per-row
 * scales.  Rows >= valid are zero padding. */
static void quantize_qk_rows(const vcattn_method_config *cfg, const float *rows, int64_t n,
                             int64_t D, const int64_t *group_of, int64_t groups, float *codes,
                             float *row_scale, float nvfp4_tensor_scale) {
    float amax[64];
    for (int64_t g = 0; g < groups; ++g) amax[g] = 0.0f;
    if (cfg->qk_format == VCATTN_QK_FORMAT_INT8 || cfg->qk_format == VCATTN_QK_FORMAT_E4M3)
        for (int64_t i = 0; i < n; ++i)
            for (int64_t d = 0; d < D; ++d)
                amax[group_of[i]] = fmaxf(amax[group_of[i]], fabsf(rows[i * D + d]));
    for (int64_t i = 0; i < n; ++i) {
        const float *x = rows + i * D;
        float *out = codes + i * D;
        float a = amax[group_of[i]];
        switch (cfg->qk_format) {
        case VCATTN_QK_FORMAT_INT8: {
            /* per_thread (Triton) and per-block share the formula */
            float s = vc_int8_sage_scale(a);
            for (int64_t d = 0; d < D; ++d) out[d] = (float)vc_int8_sage_quantize(x[d], s);
            row_scale[i] = s;
            break;
        }
        case VCATTN_QK_FORMAT_E4M3: {
            if (!vc_scale_pair_fp32_ok(a, VC_E4M3_MAX)) {
                /* subnormal (or near-FLT_MAX) rows: the scale pair in FP64 */
                const double inv_d = VC_E4M3_MAX / (double)a;
                for (int64_t d = 0; d < D; ++d) out[d] = vc_e4m3_round((float)(x[d] * inv_d));
                row_scale[i] = (float)((double)a / VC_E4M3_MAX);
                break;
            }
            float inv = a > 0.0f ? VC_E4M3_MAX / a : 1.0f;
            for (int64_t d = 0; d < D; ++d) out[d] = vc_e4m3_round(x[d] * inv);
            row_scale[i] = a > 0.0f ? a / VC_E4M3_MAX : 1.0f;
            break;
        }
        case VCATTN_QK_FORMAT_NVFP4: {
            /* SageAttention3: 16 along D, E4M3 block scales under the FP32
             * tensor scale (numerics.h: scale-invariant) */
            /* held divided by the tensor scale's power of two (exact), which
             * goes into the row scale: the FP32 score sums stay finite for
             * any finite Q, K whose scores fit FP32 */
            float deq[VC_NVFP4_BLOCK];
            const int e = ilogbf(nvfp4_tensor_scale);
            for (int64_t d0 = 0; d0 < D; d0 += VC_NVFP4_BLOCK) {
                (void)vc_nvfp4_quantize_block(x + d0, VC_NVFP4_BLOCK, 1, nvfp4_tensor_scale, NULL, deq);
                for (int d = 0; d < VC_NVFP4_BLOCK; ++d) out[d0 + d] = ldexpf(deq[d], -e);
            }
            row_scale[i] = ldexpf(1.0f, e);
            break;
        }
        case VCATTN_QK_FORMAT_FP32:
        default:
            for (int64_t d = 0; d < D; ++d) out[d] = x[d];
            row_scale[i] = 1.0f;
            break;
        }
    }
}

/* ---- the K and V passes ------------------------------------------------------------ */

static void head_data_free(head_data *hd) {
    free(hd->kt);
    free(hd->kscale);
    free(hd->ksm);
    free(hd->vq);
    free(hd->vexact);
    free(hd->vqf);
    free(hd->mu);
    memset(hd, 0, sizeof *hd);
}

static vcattn_status head_data_alloc(head_data *hd, int64_t Skv, int64_t D) {
    memset(hd, 0, sizeof *hd);
    hd->nblk = (Skv + VC_BLOCK_K - 1) / VC_BLOCK_K;
    size_t keys = (size_t)hd->nblk * VC_BLOCK_K;
    hd->kt = (float *)calloc(keys * (size_t)D, sizeof(float));
    hd->kscale = (float *)calloc(keys, sizeof(float));
    hd->ksm = (float *)calloc(keys * (size_t)D, sizeof(float));
    hd->vq = (double *)calloc(keys * (size_t)D, sizeof(double));
    hd->vexact = (float *)calloc(keys * (size_t)D, sizeof(float));
    hd->vqf = (float *)calloc(keys * (size_t)D, sizeof(float));
    hd->mu = (double *)calloc((size_t)hd->nblk * (size_t)D, sizeof(double));
    if (!hd->kt || !hd->kscale || !hd->ksm || !hd->vq || !hd->vexact || !hd->vqf || !hd->mu) {
        head_data_free(hd);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    return VCATTN_STATUS_SUCCESS;
}

static void prepare_k(sim_ctx *c) {
    const vcattn_attention_params *p = c->p;
    const vcattn_method_config *cfg = c->cfg;
    head_data *hd = &c->hd;
    const int64_t D = p->head_dim, Skv = p->seq_kv;

    /* K smoothing: the channel mean over all tokens (softmax is shift-invariant
     * per row; the LSE gets q . mean back in the epilogue) */
    for (int64_t d = 0; d < D; ++d) hd->kmean[d] = 0.0;
    if (cfg->smooth_k) {
        for (int64_t j = 0; j < Skv; ++j) {
            const float *k = vc_row(p->k, p->k_stride, c->b, c->h, j);
            for (int64_t d = 0; d < D; ++d) hd->kmean[d] += k[d];
        }
        for (int64_t d = 0; d < D; ++d) hd->kmean[d] = (double)(float)(hd->kmean[d] / (double)Skv);
    }
    for (int64_t j = 0; j < Skv; ++j) {
        const float *k = vc_row(p->k, p->k_stride, c->b, c->h, orig_token(hd, j));
        for (int64_t d = 0; d < D; ++d) hd->ksm[j * D + d] = (float)(k[d] - hd->kmean[d]);
    }

    float ts = 1.0f;
    if (cfg->qk_format == VCATTN_QK_FORMAT_NVFP4) {
        float amax = 0.0f;
        for (int64_t i = 0; i < Skv * D; ++i) amax = fmaxf(amax, fabsf(hd->ksm[i]));
        ts = vc_nvfp4_tensor_scale(amax);
        hd->k_exp = ilogbf(ts);
    }
    int64_t group_of[VC_BLOCK_K];
    for (int64_t j = 0; j < VC_BLOCK_K; ++j) group_of[j] = k_group_of_key(cfg->qk_granularity, j);
    int64_t groups = cfg->qk_granularity == VCATTN_QK_GRANULARITY_THREAD ? 4 : 1;
    float codes[VC_BLOCK_K * 128];
    for (int64_t kb = 0; kb < hd->nblk; ++kb) {
        /* the zero padding past Skv is already in ksm (calloc) */
        quantize_qk_rows(cfg, hd->ksm + kb * VC_BLOCK_K * D, VC_BLOCK_K, D, group_of, groups, codes,
                         hd->kscale + kb * VC_BLOCK_K, ts);
        float *kt = hd->kt + kb * D * VC_BLOCK_K;
        for (int64_t j = 0; j < VC_BLOCK_K; ++j)
            for (int64_t d = 0; d < D; ++d) kt[d * VC_BLOCK_K + j] = codes[j * D + d];
    }
}

static void prepare_v(sim_ctx *c) {
    const vcattn_attention_params *p = c->p;
    const vcattn_method_config *cfg = c->cfg;
    head_data *hd = &c->hd;
    const int64_t D = p->head_dim, Skv = p->seq_kv;

    for (int64_t j = 0; j < Skv; ++j) {
        const float *v = vc_row(p->v, p->v_stride, c->b, c->h, orig_token(hd, j));
        for (int64_t d = 0; d < D; ++d) hd->vexact[j * D + d] = v[d];
    }
    /* V near FLT_MAX: the dequantizing formats (per-block E4M3, NVFP4) and the
     * P V sums in FP32 would overflow; hold V times a power of two (exact)
     * and give it back in the channel scale.  Ordinary V: no shift at all.
     * The per-channel E4M3 format holds V in channel-scale units already (and
     * its FP16 means would round differently under a shift): never shifted. */
    if (cfg->v_format != VCATTN_V_FORMAT_E4M3_PER_CHANNEL) {
        float vamax = 0.0f;
        for (int64_t i = 0; i < Skv * D; ++i) vamax = fmaxf(vamax, fabsf(hd->vexact[i]));
        hd->v_shift = vamax > 0x1p60f ? ilogbf(vamax) : 0;
        if (hd->v_shift)
            for (int64_t i = 0; i < Skv * D; ++i) hd->vexact[i] = ldexpf(hd->vexact[i], -hd->v_shift);
    }
    /* V-Smooth demean: each 128-token block subtracts its own mean (over its
     * valid tokens); vq holds the residual until it is quantized */
    double *x = hd->vq;
    for (int64_t i = 0; i < Skv * D; ++i) x[i] = hd->vexact[i];
    for (int64_t kb = 0; kb < hd->nblk; ++kb) {
        double *mu = hd->mu + kb * D;
        int64_t j0 = kb * VC_BLOCK_K, j1 = j0 + VC_BLOCK_K < Skv ? j0 + VC_BLOCK_K : Skv;
        for (int64_t d = 0; d < D; ++d) mu[d] = 0.0;
        if (!cfg->v_smooth) continue;
        for (int64_t j = j0; j < j1; ++j)
            for (int64_t d = 0; d < D; ++d) mu[d] += x[j * D + d];
        for (int64_t d = 0; d < D; ++d) mu[d] = R(c, mu[d] / (double)(j1 - j0));
        for (int64_t j = j0; j < j1; ++j)
            for (int64_t d = 0; d < D; ++d) x[j * D + d] = R(c, x[j * D + d] - mu[d]);
    }

    for (int64_t d = 0; d < D; ++d) hd->chan_scale[d] = 1.0;
    switch (cfg->v_format) {
    case VCATTN_V_FORMAT_E4M3_PER_CHANNEL:
        for (int64_t d = 0; d < D; ++d) {
            float amax = 0.0f, mu_amax = 0.0f, scale, inv;
            for (int64_t j = 0; j < Skv; ++j) amax = fmaxf(amax, fabsf((float)x[j * D + d]));
            for (int64_t kb = 0; kb < hd->nblk; ++kb) mu_amax = fmaxf(mu_amax, fabsf((float)hd->mu[kb * D + d]));
            if (!vc_scale_pair_fp32_ok(amax, VC_E4M3_MAX)) {
                /* subnormal channels: the same rule with the scale in FP64
                 * (amax / 448 would lose its bits, 448 / amax overflow) */
                double s = (double)amax / VC_E4M3_MAX;
                if (!(amax > 0.0f)) s = 1.0;
                if ((double)mu_amax > s * VC_FP16_MAX) s = (double)mu_amax / VC_FP16_MAX;
                hd->chan_scale[d] = s;
                for (int64_t j = 0; j < Skv; ++j) x[j * D + d] = vc_e4m3_round((float)((double)(float)x[j * D + d] / s));
                for (int64_t kb = 0; kb < hd->nblk; ++kb)
                    hd->mu[kb * D + d] = vc_fp16_round((float)((double)(float)hd->mu[kb * D + d] / s));
                continue;
            }
            vc_v_channel_scale(amax, mu_amax, &scale, &inv);
            hd->chan_scale[d] = scale;
            for (int64_t j = 0; j < Skv; ++j) x[j * D + d] = vc_e4m3_round((float)x[j * D + d] * inv);
            /* means stored divided by the channel scale, in 16 bits */
            for (int64_t kb = 0; kb < hd->nblk; ++kb)
                hd->mu[kb * D + d] = vc_fp16_round((float)hd->mu[kb * D + d] / scale);
        }
        break;
    case VCATTN_V_FORMAT_E4M3_PER_BLOCK:
        for (int64_t kb = 0; kb < hd->nblk; ++kb) {
            int64_t j0 = kb * VC_BLOCK_K, j1 = j0 + VC_BLOCK_K < Skv ? j0 + VC_BLOCK_K : Skv;
            float amax = 0.0f;
            for (int64_t j = j0; j < j1; ++j)
                for (int64_t d = 0; d < D; ++d) amax = fmaxf(amax, fabsf((float)x[j * D + d]));
            float inv = amax > 0.0f ? VC_E4M3_MAX / amax : 1.0f;
            float scale = amax > 0.0f ? amax / VC_E4M3_MAX : 1.0f;
            if (!vc_scale_pair_fp32_ok(amax, VC_E4M3_MAX)) {
                /* subnormal blocks: the scale pair in FP64 */
                const double sd = (double)amax / VC_E4M3_MAX;
                for (int64_t j = j0; j < j1; ++j)
                    for (int64_t d = 0; d < D; ++d)
                        x[j * D + d] = (double)vc_e4m3_round((float)((double)(float)x[j * D + d] / sd)) * sd;
            } else
            for (int64_t j = j0; j < j1; ++j)
                for (int64_t d = 0; d < D; ++d)
                    x[j * D + d] = (double)(vc_e4m3_round((float)x[j * D + d] * inv) * scale);
            /* the block's means in 16 bits, range-shifted (numerics.h) */
            float mu_amax = 0.0f;
            for (int64_t d = 0; d < D; ++d) mu_amax = fmaxf(mu_amax, fabsf((float)hd->mu[kb * D + d]));
            const int k = vc_fp16_range_exp(mu_amax);
            for (int64_t d = 0; d < D; ++d) hd->mu[kb * D + d] = vc_fp16_round_shifted((float)hd->mu[kb * D + d], k);
        }
        break;
    case VCATTN_V_FORMAT_NVFP4: {
        /* 16 consecutive tokens per channel share an E4M3 scale (V^T is K-major) */
        /* under one FP32 tensor scale (numerics.h): the (batch, head) slice's amax */
        int64_t keys = hd->nblk * VC_BLOCK_K;
        float col[VC_NVFP4_BLOCK], deq[VC_NVFP4_BLOCK], amax = 0.0f;
        for (int64_t i = 0; i < keys * D; ++i) amax = fmaxf(amax, fabsf((float)x[i]));
        const float ts = vc_nvfp4_tensor_scale(amax);
        for (int64_t d = 0; d < D; ++d)
            for (int64_t j0 = 0; j0 < keys; j0 += VC_NVFP4_BLOCK) {
                for (int i = 0; i < VC_NVFP4_BLOCK; ++i) col[i] = (float)x[(j0 + i) * D + d];
                (void)vc_nvfp4_quantize_block(col, VC_NVFP4_BLOCK, 1, ts, NULL, deq);
                for (int i = 0; i < VC_NVFP4_BLOCK; ++i) x[(j0 + i) * D + d] = deq[i];
            }
        /* the means in 16 bits, range-shifted by the slice's largest (numerics.h) */
        float mu_amax = 0.0f;
        for (int64_t i = 0; i < hd->nblk * D; ++i) mu_amax = fmaxf(mu_amax, fabsf((float)hd->mu[i]));
        const int k = vc_fp16_range_exp(mu_amax);
        for (int64_t i = 0; i < hd->nblk * D; ++i) hd->mu[i] = vc_fp16_round_shifted((float)hd->mu[i], k);
        break;
    }
    case VCATTN_V_FORMAT_FP32:
    default:
        break;
    }
    for (int64_t i = 0; i < hd->nblk * VC_BLOCK_K * D; ++i) hd->vqf[i] = (float)x[i];
    if (hd->v_shift)
        for (int64_t d = 0; d < D; ++d) hd->chan_scale[d] = ldexp(hd->chan_scale[d], hd->v_shift);
}

/* ---- one 128-query tile ---------------------------------------------------------------- */

typedef struct {
    float *qc;       /* [128][D] Q code values (exact in FP32) of the task's rows */
    float *qtile;    /* [128][D] one source tile's Q code values */
    double *s;       /* [128][128] block scores */
    double *o, *oe;  /* [128][D] running output, and P_q times exact V */
    double *pq;      /* [128] one row's quantized P */
    double *acc;     /* [D] */
    float *delta;    /* [sources][nblk*128] Q-smoothing score term per key, per source tile */
    float *pstore;   /* [128][nblk*128] quantized P of sampled rows (row_tv) */
    double *mstore;  /* [128][nblk] running max at each block (row_tv) */
} tile_scratch;

static size_t tile_scratch_doubles(int64_t D, int64_t nblk, int want_tv, int64_t sources) {
    size_t keys = (size_t)nblk * VC_BLOCK_K;
    size_t n = 128 * (size_t)D * 4 + 128 * 128 + 128 + (size_t)D + (size_t)sources * keys / 2 + 1;
    if (want_tv) n += 128 * keys / 2 + 1 + 128 * (size_t)nblk;
    return n;
}

static tile_scratch tile_scratch_carve(double *base, int64_t D, int64_t nblk, int want_tv,
                                       int64_t sources) {
    tile_scratch t;
    size_t keys = (size_t)nblk * VC_BLOCK_K;
    t.qc = (float *)base; /* 128*D doubles reserved: room to spare */
    t.qtile = (float *)(base + 128 * D);
    t.s = base + 2 * 128 * D;
    t.o = t.s + 128 * 128;
    t.oe = t.o + 128 * D;
    t.pq = t.oe + 128 * D;
    t.acc = t.pq + 128;
    t.delta = (float *)(t.acc + D);
    double *next = t.acc + D + (size_t)sources * keys / 2 + 1;
    t.pstore = want_tv ? (float *)next : NULL;
    t.mstore = want_tv ? next + 128 * keys / 2 + 1 : NULL;
    return t;
}

/* Exact softmax probabilities of one query row vs the simulated ones: the
 * row's total variation 0.5 * sum |p - p_q / l|. */
VC_HOT_LOOPS static double row_total_variation(const sim_ctx *c, int64_t row, const float *pstore,
                                               const double *mstore, double m_final, double l) {
    const vcattn_attention_params *p = c->p;
    const head_data *hd = &c->hd;
    const int64_t D = p->head_dim, Skv = p->seq_kv;
    const float *q = vc_row(p->q, p->q_stride, c->b, c->h, row);
    double scale = vc_softmax_scale(p), mx = -INFINITY, sum = 0.0, tv = 0.0;
    double *s = (double *)malloc(sizeof(double) * (size_t)Skv);
    if (!s) return NAN;
    /* 8 keys at a time: independent dot products, each over d in order */
    int64_t j = 0;
    for (; j + 8 <= Skv; j += 8) {
        const float *k[8];
        double dot[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        for (int u = 0; u < 8; ++u) k[u] = vc_row(p->k, p->k_stride, c->b, c->h, orig_token(hd, j + u));
        for (int64_t d = 0; d < D; ++d)
            for (int u = 0; u < 8; ++u) dot[u] += (double)q[d] * k[u][d];
        for (int u = 0; u < 8; ++u) {
            s[j + u] = dot[u] * scale;
            if (s[j + u] > mx) mx = s[j + u];
        }
    }
    for (; j < Skv; ++j) {
        const float *k = vc_row(p->k, p->k_stride, c->b, c->h, orig_token(hd, j));
        double dot = 0.0;
        for (int64_t d = 0; d < D; ++d) dot += (double)q[d] * k[d];
        s[j] = dot * scale;
        if (s[j] > mx) mx = s[j];
    }
    for (j = 0; j < Skv; ++j) sum += (s[j] = exp(s[j] - mx));
    for (j = 0; j < Skv; ++j) {
        double pe = s[j] / sum;
        double pqn = (double)pstore[j] * exp2(mstore[j / VC_BLOCK_K] - m_final) / l;
        tv += fabs(pe - pqn);
    }
    free(s);
    return 0.5 * tv;
}

/* Loads the 128-row Q tile at q0 into qraw (zero padding past Sq) and, with
 * Q smoothing (SageAttention3), subtracts the tile's mean (padding rows
 * included) into qm; the task adds its score term delta_j = mean . k_j back
 * before the softmax. */
static void q_tile_load(const sim_ctx *c, int64_t q0, float *qraw, float *qm) {
    const vcattn_attention_params *p = c->p;
    const int64_t D = p->head_dim, Sq = p->seq_q;
    const int64_t rows = Sq - q0 < VC_TILE_Q ? Sq - q0 : VC_TILE_Q;
    memset(qraw, 0, sizeof(float) * VC_TILE_Q * 128);
    for (int64_t i = 0; i < rows; ++i)
        memcpy(qraw + i * D, vc_row(p->q, p->q_stride, c->b, c->h, q0 + i), sizeof(float) * (size_t)D);
    if (!c->cfg->smooth_q) return;
    for (int64_t d = 0; d < D; ++d) {
        double s = 0.0;
        for (int64_t i = 0; i < VC_TILE_Q; ++i) s += qraw[i * D + d];
        qm[d] = (float)(s / VC_TILE_Q);
    }
    for (int64_t i = 0; i < VC_TILE_Q; ++i)
        for (int64_t d = 0; d < D; ++d) qraw[i * D + d] -= qm[d];
}

/* The NVFP4 tensor scale of one head's Q, as the tiles quantize it (smoothed). */
static float q_nvfp4_tensor_scale(const sim_ctx *c) {
    float qraw[VC_TILE_Q * 128], qm[128], amax = 0.0f;
    for (int64_t tile = 0; tile < c->tiles; ++tile) {
        q_tile_load(c, tile * VC_TILE_Q, qraw, qm);
        for (int64_t i = 0; i < VC_TILE_Q * c->p->head_dim; ++i) amax = fmaxf(amax, fabsf(qraw[i]));
    }
    return vc_nvfp4_tensor_scale(amax);
}

VC_HOT_LOOPS static void tile_task(void *vctx, int64_t task, int worker) {
    sim_ctx *c = (sim_ctx *)vctx;
    const vcattn_attention_params *p = c->p;
    const vcattn_method_config *cfg = c->cfg;
    const head_data *hd = &c->hd;
    const int64_t D = p->head_dim, Skv = p->seq_kv, Sq = p->seq_q, Nout = c->n_out;
    /* The rows this task computes, in slots i = 0..nsel-1: sequence row
     * seq_row[i], output row out_row[i], source tile src[i] (the 128-row
     * tile holding it).  A full run computes one tile, every row; a sampled
     * run packs the listed rows of several consecutive tiles into one task,
     * so each K/V block is read once for up to 128 rows. */
    int64_t seq_row[VC_TILE_Q], out_row[VC_TILE_Q], src_tile[VC_TILE_Q], nsel = 0, nsrc = 0;
    int src[VC_TILE_Q];
    if (c->rows) {
        for (int64_t k = c->task_first[task]; k < c->task_first[task + 1]; ++k, ++nsel) {
            seq_row[nsel] = c->rows[k];
            out_row[nsel] = k;
            if (nsrc == 0 || c->rows[k] / VC_TILE_Q != src_tile[nsrc - 1]) src_tile[nsrc++] = c->rows[k] / VC_TILE_Q;
            src[nsel] = (int)(nsrc - 1);
        }
    } else {
        src_tile[nsrc++] = task;
        for (int64_t r = task * VC_TILE_Q; r < Sq && nsel < VC_TILE_Q; ++r, ++nsel) {
            seq_row[nsel] = out_row[nsel] = r;
            src[nsel] = 0;
        }
    }
    const int want_tv = c->extra && c->extra->row_tv;
    tile_scratch t = tile_scratch_carve(c->scratch[worker], D, hd->nblk, want_tv, c->task_sources);
    int64_t keys = hd->nblk * VC_BLOCK_K;
    float qscale[VC_TILE_Q];

    /* ---- Q, per source tile: load (zero padding past Sq), smooth, quantize
     * the WHOLE tile, as a full run does (its scale groups and the Q mean
     * span the tile), then keep the code rows of this task's rows ---- */
    for (int64_t si = 0; si < nsrc; ++si) {
        const int64_t q0 = src_tile[si] * VC_TILE_Q;
        float *delta = t.delta + si * keys;
        float qraw[VC_TILE_Q * 128], qm[128];
        q_tile_load(c, q0, qraw, qm);
        for (int64_t j = 0; j < keys; ++j) delta[j] = 0.0f;
        if (cfg->smooth_q) {
            /* in the units of the scores: NVFP4 codes are held times 2^-(q_exp + k_exp) */
            const int dexp = -(c->q_exp + hd->k_exp);
            /* 8 keys at a time: independent sums (each still over d in order, so
             * the same bits) instead of one long dependency chain; this is per
             * tile, so with sampled rows it is paid for every tile touched */
            int64_t j = 0;
            for (; j + 8 <= Skv; j += 8) {
                double s8[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
                const float *k0 = hd->ksm + j * D;
                for (int64_t d = 0; d < D; ++d)
                    for (int u = 0; u < 8; ++u) s8[u] += (double)qm[d] * k0[u * D + d];
                for (int u = 0; u < 8; ++u) delta[j + u] = (float)R(c, ldexp(s8[u], dexp));
            }
            for (; j < Skv; ++j) {
                double s = 0.0;
                for (int64_t d = 0; d < D; ++d) s += (double)qm[d] * hd->ksm[j * D + d];
                delta[j] = (float)R(c, ldexp(s, dexp));
            }
        }
        int64_t group_of[VC_TILE_Q];
        for (int64_t i = 0; i < VC_TILE_Q; ++i) group_of[i] = q_group_of_row(cfg->qk_granularity, i);
        int64_t groups = cfg->qk_granularity == VCATTN_QK_GRANULARITY_THREAD ? 64 : 1;
        float tscale[VC_TILE_Q];
        quantize_qk_rows(cfg, qraw, VC_TILE_Q, D, group_of, groups, t.qtile, tscale, c->q_nvfp4_scale);
        for (int64_t i = 0; i < nsel; ++i)
            if (src[i] == si) {
                memcpy(t.qc + i * D, t.qtile + (seq_row[i] - q0) * D, sizeof(float) * (size_t)D);
                qscale[i] = tscale[seq_row[i] - q0];
            }
    }

    double m[VC_TILE_Q], l[VC_TILE_Q], cq[VC_TILE_Q];
    /* The quantized pipeline follows the kernel (src/cuda/attention/): the
     * row sum of the quantized P comes in 4 partials r_t (the 32 keys of
     * quad thread t, two 16-key tensor-core sums), l is kept as 4 partials
     * summed (l0 + l1) + (l2 + l3) at the end, and block kb's mean term
     * (sum_t split(alpha_{kb+1} r_t)) mu_kb rides in block kb+1's P V
     * accumulator; the last block's goes into O after the last fold. */
    const int quad = c->fp32_pipeline && cfg->rowsum_from_quantized_p;
    double l4[VC_TILE_Q][4], rprev[VC_TILE_Q][4];
    const double *mu_prev = NULL;
    for (int64_t i = 0; i < nsel; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0;
        cq[i] = R(c, (double)c->sml2e * qscale[i]);
        for (int q = 0; q < 4; ++q) l4[i][q] = rprev[i][q] = 0.0;
    }
    memset(t.o, 0, sizeof(double) * (size_t)(128 * D));
    memset(t.oe, 0, sizeof(double) * (size_t)(128 * D));

    for (int64_t kb = 0; kb < hd->nblk; ++kb) {
        const int64_t j0 = kb * VC_BLOCK_K;
        const int64_t nvalid = Skv - j0 < VC_BLOCK_K ? Skv - j0 : VC_BLOCK_K;
        const float *kt = hd->kt + kb * D * VC_BLOCK_K;
        const float *ks = hd->kscale + j0;
        const double *vq = hd->vq + j0 * D, *mu = hd->mu + kb * D;
        const float *vqf = hd->vqf + j0 * D, *ve = hd->vexact + j0 * D;

        /* S = Q K^T for the block (vectorized over keys).  The quantized path
         * accumulates in FP32 like the tensor core (exact for INT8 codes:
         * |sum| < 2^24); the exact path in FP64. */
        for (int64_t i = 0; i < nsel; ++i) {
            double *s = t.s + i * VC_BLOCK_K;
            const float *qr = t.qc + i * D;
            if (c->fp32_pipeline) {
                /* 32 keys at a time so the accumulators stay in registers
                 * (each still sums over d in order: the same bits) */
                for (int64_t jc = 0; jc < VC_BLOCK_K; jc += 32) {
                    float sf[32] = {0};
                    for (int64_t d = 0; d < D; ++d) {
                        const float qv = qr[d], *kr = kt + d * VC_BLOCK_K + jc;
                        for (int64_t j = 0; j < 32; ++j) sf[j] += qv * kr[j];
                    }
                    for (int64_t j = 0; j < 32; ++j) s[jc + j] = sf[j];
                }
            } else {
                for (int64_t j = 0; j < VC_BLOCK_K; ++j) s[j] = 0.0;
                for (int64_t d = 0; d < D; ++d) {
                    const double qv = qr[d];
                    const float *kr = kt + d * VC_BLOCK_K;
                    for (int64_t j = 0; j < VC_BLOCK_K; ++j) s[j] += qv * (double)kr[j];
                }
            }
        }

        for (int64_t i = 0; i < nsel; ++i) {
            const double *s = t.s + i * VC_BLOCK_K;
            const float *delta = t.delta + src[i] * keys;
            double tt[VC_BLOCK_K], cc[VC_BLOCK_K], sd[VC_BLOCK_K];
            double rowmax = -INFINITY;
            int finite = 1;
            for (int64_t j = 0; j < nvalid; ++j) {
                sd[j] = R(c, delta[j0 + j] + s[j]); /* the accumulator the kernel holds */
                cc[j] = R(c, cq[i] * ks[j]);          /* per (row group, key group) factor */
                tt[j] = R(c, sd[j] * cc[j]);          /* score in log2 units */
                if (tt[j] > rowmax) rowmax = tt[j];
                finite &= isfinite(tt[j]) && isfinite(cc[j]);
            }
            if (!finite) {
                /* finite inputs whose scores overflow FP32: no answer */
                atomic_store(&c->overflow, 1);
                return;
            }
            double m_new = fmax(m[i], R(c, rowmax - c->p_log2_offset));
            double alpha = m[i] == -INFINITY ? 0.0 : R(c, exp2(R(c, m[i] - m_new)));
            double lsum = 0.0, r = 0.0;
            double *pq = t.pq;
            switch (cfg->p_format) {
            case VCATTN_P_FORMAT_EXPCAST: {
                /* ONE fma per score: c = clip(RNE(8 * (t - m) + 120 + beta)) */
                /* evaluated as the kernel does: bracket + 128, rounded by the
                 * FP32 -> BF16 conversion (numerics.h, vc_expcast_code_biased) */
                for (int64_t j = 0; j < nvalid; ++j) {
                    const float a = 8.0f * (float)cc[j];
                    uint8_t code = vc_expcast_code_biased(
                        a <= VC_EXPCAST_MAGIC_MAX_A ? vc_expcast_biased_bracket(a, (float)sd[j], (float)m_new)
                                                    : vc_expcast_bracket_direct(tt[j] - m_new, VC_EXPCAST_BIASED_CONST));
                    pq[j] = vc_e4m3_decode(code);
                    lsum += R(c, exp2(R(c, tt[j] - m_new))) * VC_EXPCAST_P_SCALE;
                }
                break;
            }
            case VCATTN_P_FORMAT_EXPCAST_TAIL: {
                /* as EXPCAST with the row max at code 126 and the tail line
                 * (numerics.h, vc_expcast_tail_code_biased) */
                for (int64_t j = 0; j < nvalid; ++j) {
                    const float a = 8.0f * (float)cc[j];
                    uint8_t code = vc_expcast_tail_code_biased(
                        a <= VC_EXPCAST_MAGIC_MAX_A ? vc_expcast_tail_biased_bracket(a, (float)sd[j], (float)m_new)
                                                    : vc_expcast_bracket_direct(tt[j] - m_new, VC_EXPCAST_TAIL_BIASED_CONST));
                    pq[j] = vc_e4m3_decode(code);
                    lsum += R(c, exp2(R(c, tt[j] - m_new))) * VC_EXPCAST_TAIL_P_SCALE;
                }
                break;
            }
            case VCATTN_P_FORMAT_E4M3:
                for (int64_t j = 0; j < nvalid; ++j) {
                    double e = R(c, exp2(R(c, tt[j] - m_new)));
                    lsum += e;
                    pq[j] = vc_e4m3_round((float)e);
                }
                break;
            case VCATTN_P_FORMAT_NVFP4:
                /* SageAttention3's two levels: P~ = 2688 * 2^(t - m); per 16
                 * keys sf = max/6 (FP32), codes e2m1(P~ / sf), the MMA
                 * dequantizes with sf rounded to E4M3 */
                for (int64_t j = 0; j < nvalid; ++j) {
                    pq[j] = R(c, exp2(R(c, tt[j] - m_new)));
                    lsum += pq[j];
                }
                for (int64_t j = nvalid; j < VC_BLOCK_K; ++j) pq[j] = 0.0;
                for (int64_t g = 0; g < nvalid; g += VC_NVFP4_BLOCK) {
                    float mx = 0.0f;
                    for (int k = 0; k < VC_NVFP4_BLOCK; ++k) mx = fmaxf(mx, (float)pq[g + k]);
                    float sf = mx / VC_E2M1_MAX, sfq = vc_e4m3_round(sf);
                    for (int k = 0; k < VC_NVFP4_BLOCK; ++k)
                        pq[g + k] = sf > 0.0f ? vc_e2m1_round((float)pq[g + k] / sf) * sfq : 0.0f;
                }
                break;
            case VCATTN_P_FORMAT_FP32:
            default:
                for (int64_t j = 0; j < nvalid; ++j) {
                    pq[j] = R(c, exp2(R(c, tt[j] - m_new)));
                    lsum += pq[j];
                }
                break;
            }
            for (int64_t j = 0; j < nvalid; ++j) r += pq[j];
            r = R(c, r);
            double rt[4] = {0.0, 0.0, 0.0, 0.0};
            if (quad) {
                for (int q = 0; q < 4; ++q) {
                    double h[2] = {0.0, 0.0};
                    for (int half = 0; half < 2; ++half)
                        for (int64_t j = 32 * q + 16 * half; j < 32 * q + 16 * half + 16 && j < nvalid; ++j) h[half] += pq[j];
                    rt[q] = R(c, R(c, h[0]) + R(c, h[1]));
                    l4[i][q] = R(c, alpha * l4[i][q] + rt[q]);
                }
            } else {
                l[i] = R(c, alpha * l[i] + (cfg->rowsum_from_quantized_p ? r : R(c, lsum)));
            }

            /* P V for this block into a fresh accumulator, then one fold:
             * O = alpha*O + acc + r*mu   (mu = 0 without V-Smooth) */
            double *acc = t.acc, *o = t.o + i * D, *oe = t.oe + i * D;
            if (c->fp32_pipeline) {
                /* P_q V_q and P_q V in FP32, as the FP8 tensor core accumulates
                 * (quantized P and V codes are exact in FP32) */
                float af[128] = {0}, ef[128] = {0};
                for (int64_t j = 0; j < nvalid; ++j) {
                    const float w = (float)pq[j], *vr = vqf + j * D, *er = ve + j * D;
                    if (w == 0.0f) continue;
                    for (int64_t d = 0; d < D; ++d) af[d] += w * vr[d];
                    for (int64_t d = 0; d < D; ++d) ef[d] += w * er[d];
                }
                for (int64_t d = 0; d < D; ++d) {
                    acc[d] = af[d];
                    oe[d] = oe[d] * alpha + ef[d];
                }
            } else {
                for (int64_t d = 0; d < D; ++d) acc[d] = 0.0;
                for (int64_t d = 0; d < D; ++d) oe[d] *= alpha;
                for (int64_t j = 0; j < nvalid; ++j) {
                    const double w = pq[j], *vr = vq + j * D;
                    const float *er = ve + j * D;
                    if (w == 0.0) continue;
                    for (int64_t d = 0; d < D; ++d) acc[d] += w * vr[d];
                    for (int64_t d = 0; d < D; ++d) oe[d] += w * (double)er[d];
                }
            }
            if (quad) {
                /* the previous block's mean term, scaled by this block's
                 * alpha, in this block's accumulator (FP16-split partials:
                 * numerics.h, vc_rowsum_f16_split) */
                if (mu_prev) {
                    double sr = 0.0;
                    for (int q = 0; q < 4; ++q) sr += vc_rowsum_f16_split((float)((float)alpha * (float)rprev[i][q]));
                    for (int64_t d = 0; d < D; ++d) acc[d] = R(c, acc[d] + sr * mu_prev[d]);
                }
                for (int64_t d = 0; d < D; ++d) o[d] = R(c, alpha * o[d] + acc[d]);
                for (int q = 0; q < 4; ++q) rprev[i][q] = rt[q];
            } else {
                for (int64_t d = 0; d < D; ++d) o[d] = R(c, R(c, alpha * o[d] + R(c, acc[d])) + r * mu[d]);
            }
            if (want_tv) {
                float *ps = t.pstore + i * keys;
                for (int64_t j = 0; j < nvalid; ++j) ps[j0 + j] = (float)pq[j];
                t.mstore[i * hd->nblk + kb] = m_new;
            }
            m[i] = m_new;
        }
        mu_prev = mu;
    }
    if (quad)
        for (int64_t i = 0; i < nsel; ++i) {
            /* the last block's mean term on the CUDA cores; l's partials */
            const float s01 = vc_rowsum_f16_split((float)rprev[i][0]) + vc_rowsum_f16_split((float)rprev[i][1]);
            const float s23 = vc_rowsum_f16_split((float)rprev[i][2]) + vc_rowsum_f16_split((float)rprev[i][3]);
            const double sr = (double)(s01 + s23);
            for (int64_t d = 0; d < D; ++d) t.o[i * D + d] = R(c, t.o[i * D + d] + sr * mu_prev[d]);
            l[i] = (double)((float)l4[i][0] + (float)l4[i][1]) + (double)((float)l4[i][2] + (float)l4[i][3]);
            l[i] = R(c, l[i]);
        }

    /* ---- epilogue: normalize, channel scale, LSE ---- */
    for (int64_t i = 0; i < nsel; ++i) {
        const int64_t row = seq_row[i], orw = out_row[i];
        float *out = p->o + c->b * p->o_stride[0] + c->h * p->o_stride[1] + orw * p->o_stride[2];
        double inv_l = 1.0 / l[i];
        int finite = l[i] > 0.0 && isfinite(inv_l);
        for (int64_t d = 0; d < D; ++d) {
            out[d] = (float)(t.o[i * D + d] * inv_l * hd->chan_scale[d]);
            finite &= isfinite(out[d]);
        }
        if (!finite) atomic_store(&c->overflow, 1); /* never garbage silently */
        if (c->extra && c->extra->o_f64) {
            double *od = c->extra->o_f64 + ((c->b * p->heads + c->h) * Nout + orw) * D;
            for (int64_t d = 0; d < D; ++d) od[d] = t.o[i * D + d] * inv_l * hd->chan_scale[d];
        }
        if (c->extra && c->extra->o_pq_v) {
            float *oe = c->extra->o_pq_v + ((c->b * p->heads + c->h) * Nout + orw) * D;
            const double vs = ldexp(1.0, hd->v_shift);
            for (int64_t d = 0; d < D; ++d) oe[d] = (float)(t.oe[i * D + d] * inv_l * vs);
        }
        if (p->lse) {
            /* K smoothing shifted every score of the row by -q.mean(k): add it back */
            const float *q = vc_row(p->q, p->q_stride, c->b, c->h, row);
            double qk = 0.0;
            for (int64_t d = 0; d < D; ++d) qk += (double)q[d] * hd->kmean[d];
            double lse2 = m[i] + log2(l[i]) - c->lse_log2_bias;
            p->lse[(c->b * p->heads + c->h) * Nout + orw] = (float)(lse2 * LN2 + qk * vc_softmax_scale(p));
        }
        if (want_tv && orw % c->extra->tv_row_stride == 0) {
            int64_t nsamp = (Nout + c->extra->tv_row_stride - 1) / c->extra->tv_row_stride;
            c->extra->row_tv[(c->b * p->heads + c->h) * nsamp + orw / c->extra->tv_row_stride] =
                row_total_variation(c, row, t.pstore + i * keys, t.mstore + i * hd->nblk, m[i], l[i]);
        }
    }
}

/* ---- entry point -------------------------------------------------------------------- */

static vcattn_status check_config(const vcattn_method_config *cfg) {
    if ((unsigned)cfg->qk_format > VCATTN_QK_FORMAT_NVFP4 ||
        (unsigned)cfg->qk_granularity > VCATTN_QK_GRANULARITY_THREAD ||
        (unsigned)cfg->v_format > VCATTN_V_FORMAT_NVFP4 ||
        (unsigned)cfg->p_format > VCATTN_P_FORMAT_EXPCAST_TAIL)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (cfg->qk_format == VCATTN_QK_FORMAT_NVFP4 && cfg->qk_granularity != VCATTN_QK_GRANULARITY_BLOCK)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    return VCATTN_STATUS_SUCCESS;
}

static int perm_is_valid(const int32_t *perm, int64_t n, unsigned char *seen) {
    memset(seen, 0, (size_t)n);
    for (int64_t j = 0; j < n; ++j) {
        if (perm[j] < 0 || perm[j] >= n || seen[perm[j]]) return 0;
        seen[perm[j]] = 1;
    }
    return 1;
}

/* rows = NULL: every query row (n_rows unused); p already validated. */
static vcattn_status simulate_run(const vcattn_attention_params *p, const vcattn_method_config *config,
                                  const int32_t *perm, const int64_t *rows, int64_t n_rows,
                                  vcattn_sim_outputs *extra) {
    vcattn_status st = VCATTN_STATUS_SUCCESS;
    if (!config) return VCATTN_STATUS_NULL_POINTER;
    if ((st = check_config(config))) return st;
    if (extra && extra->row_tv && extra->tv_row_stride < 1) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (vc_has_non_finite(p->q, p->batch, p->heads, p->seq_q, p->head_dim, p->q_stride) ||
        vc_has_non_finite(p->k, p->batch, p->heads, p->seq_kv, p->head_dim, p->k_stride) ||
        vc_has_non_finite(p->v, p->batch, p->heads, p->seq_kv, p->head_dim, p->v_stride))
        return VCATTN_STATUS_NON_FINITE;

    sim_ctx c;
    memset(&c, 0, sizeof c);
    atomic_init(&c.overflow, 0);
    c.p = p;
    c.cfg = config;
    c.extra = extra;
    c.fp32_pipeline = !(config->qk_format == VCATTN_QK_FORMAT_FP32 && config->v_format == VCATTN_V_FORMAT_FP32 &&
                        config->p_format == VCATTN_P_FORMAT_FP32);
    c.p_log2_offset = config->p_format == VCATTN_P_FORMAT_E4M3    ? VC_SAGE2_P_LOG2_OFFSET
                      : config->p_format == VCATTN_P_FORMAT_NVFP4 ? VC_SAGE3_P_LOG2_OFFSET
                                                                  : 0.0f;
    c.lse_log2_bias = config->p_format == VCATTN_P_FORMAT_EXPCAST        ? log2(VC_EXPCAST_P_SCALE)
                      : config->p_format == VCATTN_P_FORMAT_EXPCAST_TAIL ? (double)VC_EXPCAST_TAIL_P_LOG2_SCALE
                                                                         : 0.0;
    c.tiles = (p->seq_q + VC_TILE_Q - 1) / VC_TILE_Q;
    c.n_out = p->seq_q;
    int64_t tasks = c.tiles;
    c.task_sources = 1;
    int workers = vc_thread_count(p->num_threads);
    if (rows) {
        /* Pack consecutive listed rows into tasks of up to 128 rows from up
         * to SIM_TASK_SOURCES tiles: each task reads every K/V block once for
         * all its rows (one tile's few sampled rows alone would make the run
         * memory-bound), yet there are enough tasks for every worker. */
        enum { SIM_TASK_SOURCES = 32 };
        int64_t pack = (n_rows + 4 * (int64_t)workers - 1) / (4 * (int64_t)workers);
        if (pack > VC_TILE_Q) pack = VC_TILE_Q;
        if (pack < 1) pack = 1;
        c.rows = rows;
        c.n_out = n_rows;
        c.task_sources = SIM_TASK_SOURCES;
        c.task_first = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n_rows + 1));
        if (!c.task_first) return VCATTN_STATUS_OUT_OF_MEMORY;
        tasks = 0;
        int64_t in_task = 0, sources = 0, last_tile = -1;
        for (int64_t i = 0; i < n_rows; ++i) {
            int64_t tile = rows[i] / VC_TILE_Q;
            int new_source = tile != last_tile;
            if (tasks == 0 || in_task == pack || (new_source && sources == SIM_TASK_SOURCES)) {
                c.task_first[tasks++] = i;
                in_task = 0;
                sources = 0;
                new_source = 1;
            }
            if (new_source) ++sources;
            last_tile = tile;
            ++in_task;
        }
        c.task_first[tasks] = n_rows;
    }
    c.sml2e = R(&c, vc_softmax_scale(p) * LOG2E);

    int want_tv = extra && extra->row_tv;
    int64_t nblk = (p->seq_kv + VC_BLOCK_K - 1) / VC_BLOCK_K;
    c.scratch_doubles = tile_scratch_doubles(p->head_dim, nblk, want_tv, c.task_sources);
    c.scratch = (double **)calloc((size_t)workers, sizeof(double *));
    unsigned char *seen = config->v_smooth && perm ? (unsigned char *)malloc((size_t)p->seq_kv) : NULL;
    if (!c.scratch || (config->v_smooth && perm && !seen)) {
        free(c.scratch);
        free(seen);
        free(c.task_first);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    for (int w = 0; w < workers && st == VCATTN_STATUS_SUCCESS; ++w) {
        c.scratch[w] = (double *)malloc(sizeof(double) * c.scratch_doubles);
        if (!c.scratch[w]) st = VCATTN_STATUS_OUT_OF_MEMORY;
    }

    for (int64_t b = 0; b < p->batch && st == VCATTN_STATUS_SUCCESS; ++b)
        for (int64_t h = 0; h < p->heads && st == VCATTN_STATUS_SUCCESS; ++h) {
            c.b = b;
            c.h = h;
            if ((st = head_data_alloc(&c.hd, p->seq_kv, p->head_dim))) break;
            if (config->v_smooth && perm) {
                c.hd.perm = perm + (b * p->heads + h) * p->seq_kv;
                if (!perm_is_valid(c.hd.perm, p->seq_kv, seen)) {
                    st = VCATTN_STATUS_INVALID_ARGUMENT;
                    head_data_free(&c.hd);
                    break;
                }
            }
            c.q_nvfp4_scale = config->qk_format == VCATTN_QK_FORMAT_NVFP4 ? q_nvfp4_tensor_scale(&c) : 1.0f;
            c.q_exp = config->qk_format == VCATTN_QK_FORMAT_NVFP4 ? ilogbf(c.q_nvfp4_scale) : 0;
            prepare_k(&c);
            prepare_v(&c);
            vc_parallel_for(tasks, workers, tile_task, &c);
            head_data_free(&c.hd);
            if (atomic_load(&c.overflow)) st = VCATTN_STATUS_SCORE_OVERFLOW;
        }

    for (int w = 0; w < workers; ++w) free(c.scratch[w]);
    free(c.scratch);
    free(seen);
    free(c.task_first);
    return st;
}

vcattn_status vcattn_simulate_attention(const vcattn_attention_params *p,
                                        const vcattn_method_config *config,
                                        const int32_t *perm, vcattn_sim_outputs *extra) {
    vcattn_status st = vcattn_attention_params_validate(p);
    if (st) return st;
    return simulate_run(p, config, perm, NULL, 0, extra);
}

vcattn_status vcattn_simulate_attention_rows(const vcattn_attention_params *p,
                                             const vcattn_method_config *config,
                                             const int32_t *perm, const int64_t *rows,
                                             int64_t n_rows, vcattn_sim_outputs *extra) {
    vcattn_status st = vc_rows_params_validate(p, rows, n_rows);
    if (st) return st;
    return simulate_run(p, config, perm, rows, n_rows, extra);
}
