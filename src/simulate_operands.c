/* simulate_operands.c - the operands of the CPU simulation: the Q/K
 * quantizers and, per (batch, head), the K and V passes that the tile tasks
 * then read (smoothing, the V-Smooth permutation and block demean,
 * quantization).  The model is described at the top of simulate.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics.h"
#include "simulate_internal.h"

/* ---- the Q/K quantizer -------------------------------------------------------------- */

void vc_sim_quantize_qk_rows(const vcattn_method_config *cfg, const float *rows, int64_t n,
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

void vc_sim_head_data_free(head_data *hd) {
    free(hd->kt);
    free(hd->kscale);
    free(hd->ksm);
    free(hd->vq);
    free(hd->vexact);
    free(hd->vqf);
    free(hd->mu);
    memset(hd, 0, sizeof *hd);
}

vcattn_status vc_sim_head_data_alloc(head_data *hd, int64_t Skv, int64_t D) {
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
        vc_sim_head_data_free(hd);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    return VCATTN_STATUS_SUCCESS;
}

void vc_sim_prepare_k(sim_ctx *c) {
    const vcattn_attention_params *p = c->p;
    const vcattn_method_config *cfg = c->cfg;
    head_data *hd = &c->hd;
    const int64_t D = p->head_dim, Skv = c->skv;

    /* K smoothing: the channel mean over all tokens, the exact keys' too (softmax is
     * shift-invariant per row; the LSE gets q . mean back in the epilogue) */
    for (int64_t d = 0; d < D; ++d) hd->kmean[d] = 0.0;
    if (cfg->smooth_k) {
        for (int64_t j = 0; j < p->seq_kv; ++j) {
            const float *k = vc_row(p->k, p->k_stride, c->b, c->h, j);
            for (int64_t d = 0; d < D; ++d) hd->kmean[d] += k[d];
        }
        for (int64_t d = 0; d < D; ++d) hd->kmean[d] = (double)(float)(hd->kmean[d] / (double)p->seq_kv);
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
        vc_sim_quantize_qk_rows(cfg, hd->ksm + kb * VC_BLOCK_K * D, VC_BLOCK_K, D, group_of, groups, codes,
                         hd->kscale + kb * VC_BLOCK_K, ts);
        float *kt = hd->kt + kb * D * VC_BLOCK_K;
        for (int64_t j = 0; j < VC_BLOCK_K; ++j)
            for (int64_t d = 0; d < D; ++d) kt[d * VC_BLOCK_K + j] = codes[j * D + d];
    }
}

void vc_sim_prepare_v(sim_ctx *c) {
    const vcattn_attention_params *p = c->p;
    const vcattn_method_config *cfg = c->cfg;
    head_data *hd = &c->hd;
    const int64_t D = p->head_dim, Skv = c->skv;

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
    hd->ve_shift = hd->v_shift;
    if (cfg->v_format == VCATTN_V_FORMAT_E4M3_PER_CHANNEL) {
        /* vq has its copy: from here vexact only feeds o_pq_v, in FP32 sums
         * weighted by P_q (up to 448), which V near FLT_MAX would overflow */
        float vamax = 0.0f;
        for (int64_t i = 0; i < Skv * D; ++i) vamax = fmaxf(vamax, fabsf(hd->vexact[i]));
        hd->ve_shift = vamax > 0x1p60f ? ilogbf(vamax) : 0;
        if (hd->ve_shift)
            for (int64_t i = 0; i < Skv * D; ++i) hd->vexact[i] = ldexpf(hd->vexact[i], -hd->ve_shift);
    }
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

/* ---- Q tiles (the tasks quantize them; the NVFP4 tensor scale spans the head) ----- */

void vc_sim_q_tile_load(const sim_ctx *c, int64_t q0, float *qraw, float *qm) {
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

float vc_sim_q_nvfp4_tensor_scale(const sim_ctx *c) {
    float qraw[VC_TILE_Q * 128], qm[128], amax = 0.0f;
    for (int64_t tile = 0; tile < c->tiles; ++tile) {
        vc_sim_q_tile_load(c, tile * VC_TILE_Q, qraw, qm);
        for (int64_t i = 0; i < VC_TILE_Q * c->p->head_dim; ++i) amax = fmaxf(amax, fabsf(qraw[i]));
    }
    return vc_nvfp4_tensor_scale(amax);
}
