/* ppath_analysis.c - the P path in isolation: what each way of turning the
 * scores into low-bit probabilities does to O, split into its parts
 * (docs/fidelity-analysis.md).
 *
 *   vcattn_ppath --preset NAME [--frames T] [--heads N] [--seed S]
 *                [--rows N] [--threads N] [--json PATH]
 *                [--running-max | --running-max-kmeans | --block-max-kmeans] [--simulate] [--quiet]
 *
 * For each head of the preset (BF16 Q, K, V as `vcattn workload` writes them)
 * and N query rows per head spread evenly through the sequence (default 256),
 * against every key, in FP64: the scores u_j = (s_j - max_j s_j) log2 e
 * (s = q.k / sqrt(D)), the exact p_j = 2^u_j, the exact V, and
 *     O = sum_j p_j V_j / sum_j p_j.
 * Q K^T and V are exact: only P is quantized.  Each P path gives a code per
 * key from u_j (softmax_numerics.h):
 *     exp-e4m3      vc_exp_then_cast_code(u + 8.807 - 8): e4m3(2^u x 448), the
 *                   row max stored minus log2 448 as SageAttention2 does
 *     expcast       vc_expcast_code(u): row max at code 120 (256)
 *     expcast-tail  vc_expcast_tail_code(u): row max at code 126 (448), tail line
 * and q_j = vc_e4m3_decode(code_j) / scale (scale = 2^8.807, 256, 448), and
 *     O_q = sum_j q_j V_j / sum_j q_j         (the row sum from the quantized
 *                                              P, as the V-Smooth kernels do)
 * Decomposition, by hybrid P's (the error vectors telescope exactly):
 *     T (tail)     p_j, but 0 where code_j = 0            e_tail  = O_T - O
 *     M (mantissa) T, with the deterministic map unrounded e_mant  = O_M - O_T
 *                  where code_j != 0: expcast(-tail): vc_e4m3_decode_linear
 *                  of the unrounded code (vc_expcast_code_linear,
 *                  vc_expcast_tail_code_linear); exp-e4m3: p_j itself (its
 *                  map is the exact exponential: no mantissa part)
 *     Q (full)     q_j                                     e_round = O_q - O_M
 *   each with its own row sum; e_tail + e_mant + e_round = O_q - O.
 *     R (row sum)  sum_j q_j V_j / (sum_j p_j)  (the exact row sum, as
 *                  sage2-8bit's l from the FP32 p): e_rowsum = O_R - O_q.
 * Reported per head: rel-L2 = |e|_F / |O|_F over the sampled rows (and PSNR
 * 20 log10(max|O| / RMSE) of O_q and O_R), the worst row's rel-L2 of O_q,
 * the mean relative row-sum deficit 1 - sum q / sum p, the mass below the
 * cut (the share of sum p in keys with code 0: mean and worst row), the
 * octave below the row max where the mean mass histogram peaks, and the
 * median row max probability (the head's sharpness).
 *
 * By default the codes are taken against the row's final max.  The kernels
 * code each 128-key block against the running max (earlier blocks get a lower
 * max, hence higher codes): --running-max does that with the blocks in
 * sequence order, --running-max-kmeans in the V-Smooth plan's order
 * (vcattn_vsmooth_plan_heads, default k-means).  --simulate also runs the
 * library's simulation with only p_format set (see below); it matches
 * --running-max.
 *
 * Exit codes: 0 success, 1 a library call or allocation failed, 2 bad usage. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "internal.h"
#include "numerics.h"
#include "tiling.h"
#include "vcattn.h"
#include "vcattn_research.h"

enum { NP = 3, P_EXP = 0, P_EC = 1, P_ECT = 2 };
static const char *const k_path[NP] = {"exp-e4m3", "expcast", "expcast-tail"};

/* error components per path, in this order */
enum { C_TOTAL, C_TAIL, C_MANT, C_ROUND, C_EXACTSUM, C_ROWSUM, NC };
static const char *const k_comp[NC] = {"total", "tail", "mantissa", "rounding", "exact_rowsum_total",
                                       "rowsum_component"};

#define OCT_BINS 48
#define GROUP 8 /* rows per task: K and V are streamed once per group */
#define DMAX 256

typedef struct {
    double o2, omax;            /* |O|^2, max |O| of the row */
    double err2[NP][NC];        /* |e|^2 per component */
    double cut_mass[NP];        /* share of the row's mass with code 0 */
    double sum_deficit[NP];     /* 1 - sum q / sum p */
    double pmax;                /* 1 / sum p */
    double hist[OCT_BINS];      /* mass per octave below the row max */
} row_result;

typedef struct {
    const float *q, *k, *v; /* one head, (S, D) */
    int64_t seq, dim, rows;
    double scale[NP];
    row_result *res;
    double *scratch; /* workers x GROUP x S scores */
    double *acc;     /* workers x GROUP x (1 + 3 NP) x D */
    int running;     /* 1: code against the running max of 128-key blocks, 2: the block-max scale */
    const int32_t *perm;   /* key order of the blocks (position -> key); NULL: sequence order */
    const int32_t *blk_of; /* key -> its block in that order */
} head_ctx;

static int64_t sampled_row(int64_t r, int64_t rows, int64_t S) { return (r * S) / rows + (S / rows) / 2; }

VC_HOT_LOOPS static void scores_group(const float *qrows, int g, const float *k, int64_t S, int64_t D,
                                      double scale, double *u) {
    double qd[GROUP][DMAX];
    for (int i = 0; i < g; ++i)
        for (int64_t d = 0; d < D; ++d) qd[i][d] = (double)qrows[i * D + d];
    for (int64_t j = 0; j < S; ++j) {
        double kd[DMAX];
        const float *kr = k + j * D;
        for (int64_t d = 0; d < D; ++d) kd[d] = (double)kr[d];
        for (int i = 0; i < g; ++i) {
            double s = 0.0;
            for (int64_t d = 0; d < D; ++d) s += qd[i][d] * kd[d];
            u[i * S + j] = s * scale;
        }
    }
}

/* acc[a * D + d] += w[a] * v[d] for the accumulators a with w[a] != 0 */
VC_HOT_LOOPS static void axpy_many(double *acc, const double *w, int n, const double *v, int64_t D) {
    for (int a = 0; a < n; ++a) {
        const double wa = w[a];
        if (wa == 0.0) continue;
        double *o = acc + a * D;
        for (int64_t d = 0; d < D; ++d) o[d] += wa * v[d];
    }
}

static void head_group(void *vctx, int64_t gi, int worker) {
    const head_ctx *c = (const head_ctx *)vctx;
    const int64_t S = c->seq, D = c->dim;
    const int64_t r0 = gi * GROUP;
    const int g = (int)(c->rows - r0 < GROUP ? c->rows - r0 : GROUP);
    enum { NACC = 1 + 3 * NP }; /* exact; per path: tail-zeroed-part, M, Q */
    double *u = c->scratch + (int64_t)worker * GROUP * S;
    double *acc = c->acc + (int64_t)worker * GROUP * NACC * D;
    float qrows[GROUP * DMAX];
    for (int i = 0; i < g; ++i)
        memcpy(qrows + i * D, c->q + sampled_row(r0 + i, c->rows, S) * D, sizeof(float) * (size_t)D);
    const double log2e = 1.4426950408889634;
    scores_group(qrows, g, c->k, S, D, log2e / sqrt((double)D), u);

    double mx[GROUP];
    for (int i = 0; i < g; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < S; ++j)
            if (u[i * S + j] > m) m = u[i * S + j];
        mx[i] = m;
        for (int64_t j = 0; j < S; ++j) u[i * S + j] -= m;
    }
    memset(acc, 0, sizeof(double) * (size_t)(GROUP * NACC * D));
    double zA[GROUP] = {0}, zT[NP][GROUP], zM[NP][GROUP], zQ[NP][GROUP];
    for (int pth = 0; pth < NP; ++pth)
        for (int i = 0; i < GROUP; ++i) zT[pth][i] = zM[pth][i] = zQ[pth][i] = 0.0;
    row_result *res = c->res + r0;
    for (int i = 0; i < g; ++i) memset(&res[i], 0, sizeof res[i]);
    const float exp_shift = VC_SAGE2_P_LOG2_OFFSET - 8.0f; /* vc_exp_then_cast_code scales by 2^8 */

    /* --running-max: key j of block b is coded against mrun_b = the max of u
     * over blocks 0..b (sequence order), u_j - mrun_b >= u_j, and its value
     * scaled back by 2^mrun_b (the kernel's alpha); else mrun_b = 0 */
    const int64_t nblk = (S + VC_BLOCK_K - 1) / VC_BLOCK_K;
    double *mrun = (double *)malloc(sizeof(double) * (size_t)(GROUP * nblk));
    if (!mrun) {
        for (int i = 0; i < g; ++i) res[i].o2 = NAN;
        return;
    }
    /* running == 2: the block-max scale (softmax_numerics.h), m_b = max(blockmax_b, m_{b-1} - d) */
    const double descent = (double)vc_blockmax_descent(nblk);
    for (int i = 0; i < g; ++i) {
        double m = -INFINITY, mb = -INFINITY;
        for (int64_t b = 0; b < nblk; ++b) {
            double bm = -INFINITY;
            for (int64_t pos = b * VC_BLOCK_K; pos < S && pos < (b + 1) * VC_BLOCK_K; ++pos) {
                const int64_t j = c->perm ? c->perm[pos] : pos;
                if (u[i * S + j] > bm) bm = u[i * S + j];
            }
            if (bm > m) m = bm;
            mb = fmax(bm, mb - descent);
            mrun[i * nblk + b] = c->running == 2 ? mb : c->running ? m : 0.0;
        }
    }
    double vd[DMAX];
    for (int64_t j = 0; j < S; ++j) {
        const float *vr = c->v + j * D;
        for (int64_t d = 0; d < D; ++d) vd[d] = (double)vr[d];
        for (int i = 0; i < g; ++i) {
            const double uj = u[i * S + j], p = exp2(uj);
            const double sh = mrun[i * nblk + c->blk_of[j]], ue = uj - sh, back = exp2(sh);
            const float uf = (float)ue;
            double w[NACC];
            w[0] = p;
            zA[i] += p;
            int bin = (int)(-uj);
            if (bin >= OCT_BINS) bin = OCT_BINS - 1;
            res[i].hist[bin] += p;
            for (int pth = 0; pth < NP; ++pth) {
                uint8_t code;
                double lin;
                if (pth == P_EXP) {
                    code = vc_exp_then_cast_code(uf + exp_shift);
                    lin = p;
                } else if (pth == P_EC) {
                    code = vc_expcast_code(uf);
                    lin = vc_e4m3_decode_linear(vc_expcast_code_linear(ue)) * back / c->scale[pth];
                } else {
                    code = vc_expcast_tail_code(uf);
                    lin = vc_e4m3_decode_linear(vc_expcast_tail_code_linear(ue)) * back / c->scale[pth];
                }
                double *wp = w + 1 + 3 * pth;
                if (code == 0) {
                    wp[0] = p; /* the dropped part: O_T's numerator = exact - this */
                    wp[1] = wp[2] = 0.0;
                    zT[pth][i] += p;
                    res[i].cut_mass[pth] += p;
                } else {
                    const double qv = (double)vc_e4m3_decode(code) * back / c->scale[pth];
                    wp[0] = 0.0;
                    wp[1] = lin;
                    wp[2] = qv;
                    zM[pth][i] += lin;
                    zQ[pth][i] += qv;
                }
            }
            axpy_many(acc + (int64_t)i * NACC * D, w, NACC, vd, D);
        }
    }
    free(mrun);
    for (int i = 0; i < g; ++i) {
        const double *a = acc + (int64_t)i * NACC * D;
        row_result *rr = &res[i];
        const double za = zA[i];
        for (int64_t d = 0; d < D; ++d) {
            const double o = a[d] / za;
            rr->o2 += o * o;
            if (fabs(o) > rr->omax) rr->omax = fabs(o);
        }
        for (int pth = 0; pth < NP; ++pth) {
            const double *nt = a + (1 + 3 * pth) * D, *nm = nt + D, *nq = nm + D;
            const double zt = za - zT[pth][i], zm = zM[pth][i], zq = zQ[pth][i];
            for (int64_t d = 0; d < D; ++d) {
                const double o = a[d] / za;
                const double oT = (a[d] - nt[d]) / zt, oM = nm[d] / zm, oQ = nq[d] / zq, oR = nq[d] / za;
                const double e[NC] = {oQ - o, oT - o, oM - oT, oQ - oM, oR - o, oR - oQ};
                for (int k = 0; k < NC; ++k) rr->err2[pth][k] += e[k] * e[k];
            }
            rr->cut_mass[pth] /= za;
            rr->sum_deficit[pth] = 1.0 - zq / za;
        }
        rr->pmax = 1.0 / za;
        for (int b = 0; b < OCT_BINS; ++b) rr->hist[b] /= za;
        (void)mx;
    }
}

/* ---- per-head summary ----------------------------------------------------------- */

typedef struct {
    double g_h, pmax_median, peak_octave;
    double rel[NP][NC];
    double psnr_q[NP], psnr_r[NP];
    double worst_rel_q[NP];
    double cut_mean[NP], cut_worst[NP];
    double deficit_mean[NP];
    double hist[OCT_BINS];
    double o2, err2[NP][NC], omax; /* for the pooled line */
    double sim[4];                 /* --simulate rel-L2 (NAN when not run) */
    int64_t n;
} head_summary;

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double psnr(double omax, double err2, int64_t n) {
    const double rmse = sqrt(err2 / (double)n);
    return rmse > 0.0 ? 20.0 * log10(omax / rmse) : INFINITY;
}

static void summarize(const row_result *res, int64_t rows, int64_t D, head_summary *h) {
    double *pm = (double *)malloc(sizeof(double) * (size_t)rows);
    memset(h->hist, 0, sizeof h->hist);
    h->o2 = h->omax = 0.0;
    memset(h->err2, 0, sizeof h->err2);
    memset(h->cut_mean, 0, sizeof h->cut_mean);
    memset(h->cut_worst, 0, sizeof h->cut_worst);
    memset(h->deficit_mean, 0, sizeof h->deficit_mean);
    memset(h->worst_rel_q, 0, sizeof h->worst_rel_q);
    for (int64_t r = 0; r < rows; ++r) {
        const row_result *rr = &res[r];
        h->o2 += rr->o2;
        if (rr->omax > h->omax) h->omax = rr->omax;
        for (int p = 0; p < NP; ++p) {
            for (int k = 0; k < NC; ++k) h->err2[p][k] += rr->err2[p][k];
            h->cut_mean[p] += rr->cut_mass[p] / (double)rows;
            if (rr->cut_mass[p] > h->cut_worst[p]) h->cut_worst[p] = rr->cut_mass[p];
            h->deficit_mean[p] += rr->sum_deficit[p] / (double)rows;
            const double rel = sqrt(rr->err2[p][C_TOTAL] / rr->o2);
            if (rel > h->worst_rel_q[p]) h->worst_rel_q[p] = rel;
        }
        for (int b = 0; b < OCT_BINS; ++b) h->hist[b] += rr->hist[b] / (double)rows;
        if (pm) pm[r] = rr->pmax;
    }
    h->n = rows * D;
    for (int p = 0; p < NP; ++p) {
        for (int k = 0; k < NC; ++k) h->rel[p][k] = sqrt(h->err2[p][k] / h->o2);
        h->psnr_q[p] = psnr(h->omax, h->err2[p][C_TOTAL], h->n);
        h->psnr_r[p] = psnr(h->omax, h->err2[p][C_EXACTSUM], h->n);
    }
    int peak = 0;
    for (int b = 1; b < OCT_BINS; ++b)
        if (h->hist[b] > h->hist[peak]) peak = b;
    h->peak_octave = peak + 0.5;
    if (pm) {
        qsort(pm, (size_t)rows, sizeof(double), cmp_double);
        h->pmax_median = pm[rows / 2];
        free(pm);
    } else {
        h->pmax_median = NAN;
    }
}

/* ---- output ------------------------------------------------------------------------ */

static void print_table(const char *preset, int64_t S, int64_t frames, int64_t rows, int running,
                        const head_summary *hs, int64_t nh, const head_summary *all) {
    printf("# P path in isolation: %s, %lld frames, %lld keys, %lld rows per head, FP64 scores and V, codes against the %s\n",
           preset, (long long)frames, (long long)S, (long long)rows,
           running == 3 ? "block-max scale (the split's ExpCast keys) of 128-key blocks in the k-means order"
           : running == 2 ? "running max of 128-key blocks in the k-means order"
           : running ? "running max of 128-key blocks in sequence order" : "row's final max");
    printf("# rel-L2 |e|/|O| of O_q (row sum from the quantized P) and its parts; exact-sum = O with the exact row sum\n");
    printf("%-4s %-6s %-8s %-5s %-13s %9s %9s %9s %9s %9s %9s %8s %8s %9s %9s %9s\n", "head", "g_h", "pmax_med",
           "peak", "path", "cut_mass", "cut_worst", "total", "tail", "mantissa", "rounding", "psnr", "psnr_xs",
           "exactsum", "rowsum_c", "deficit");
    for (int64_t h = 0; h <= nh; ++h) {
        const head_summary *s = h < nh ? &hs[h] : all;
        for (int p = 0; p < NP; ++p) {
            char hn[24], gh[24], pm[24], pk[24];
            if (h < nh) {
                snprintf(hn, sizeof hn, "%lld", (long long)h);
                snprintf(gh, sizeof gh, "%.3f", s->g_h);
                snprintf(pm, sizeof pm, "%.2e", s->pmax_median);
                snprintf(pk, sizeof pk, "%.1f", s->peak_octave);
            } else {
                snprintf(hn, sizeof hn, "all");
                gh[0] = pm[0] = pk[0] = '-';
                gh[1] = pm[1] = pk[1] = 0;
            }
            printf("%-4s %-6s %-8s %-5s %-13s %9.2e %9.2e %9.2e %9.2e %9.2e %9.2e %8.2f %8.2f %9.2e %9.2e %9.2e\n",
                   p == 0 ? hn : "", p == 0 ? gh : "", p == 0 ? pm : "", p == 0 ? pk : "", k_path[p],
                   s->cut_mean[p], s->cut_worst[p], s->rel[p][C_TOTAL], s->rel[p][C_TAIL], s->rel[p][C_MANT],
                   s->rel[p][C_ROUND], s->psnr_q[p], s->psnr_r[p], s->rel[p][C_EXACTSUM], s->rel[p][C_ROWSUM],
                   s->deficit_mean[p]);
        }
    }
    fflush(stdout);
}

static void json_num(FILE *f, double x) {
    if (isfinite(x))
        fprintf(f, "%.6g", x);
    else
        fprintf(f, "null");
}

static void json_head(FILE *f, const head_summary *s, int with_regime) {
    if (with_regime) {
        fprintf(f, "\"g_h\": ");
        json_num(f, s->g_h);
        fprintf(f, ", \"pmax_median\": ");
        json_num(f, s->pmax_median);
        fprintf(f, ", \"peak_octave\": %.1f, \"mass_per_octave\": [", s->peak_octave);
        for (int b = 0; b < 24; ++b) {
            fprintf(f, "%s", b ? ", " : "");
            json_num(f, s->hist[b]);
        }
        fprintf(f, "], ");
    }
    if (with_regime && isfinite(s->sim[0])) {
        fprintf(f, "\"simulate_rel_l2\": {\"exp-e4m3\": ");
        json_num(f, s->sim[0]);
        fprintf(f, ", \"exp-e4m3_fp32_rowsum\": ");
        json_num(f, s->sim[1]);
        fprintf(f, ", \"expcast\": ");
        json_num(f, s->sim[2]);
        fprintf(f, ", \"expcast-tail\": ");
        json_num(f, s->sim[3]);
        fprintf(f, "}, ");
    }
    fprintf(f, "\"paths\": {");
    for (int p = 0; p < NP; ++p) {
        fprintf(f, "%s\"%s\": {\"cut_mass_mean\": ", p ? ", " : "", k_path[p]);
        json_num(f, s->cut_mean[p]);
        fprintf(f, ", \"cut_mass_worst\": ");
        json_num(f, s->cut_worst[p]);
        fprintf(f, ", \"rowsum_deficit_mean\": ");
        json_num(f, s->deficit_mean[p]);
        fprintf(f, ", \"psnr_db\": ");
        json_num(f, s->psnr_q[p]);
        fprintf(f, ", \"psnr_db_exact_rowsum\": ");
        json_num(f, s->psnr_r[p]);
        fprintf(f, ", \"worst_row_rel_l2\": ");
        json_num(f, s->worst_rel_q[p]);
        fprintf(f, ", \"rel_l2\": {");
        for (int k = 0; k < NC; ++k) {
            fprintf(f, "%s\"%s\": ", k ? ", " : "", k_comp[k]);
            json_num(f, s->rel[p][k]);
        }
        fprintf(f, "}}");
    }
    fprintf(f, "}");
}

static int write_json(const char *path, const char *preset, const vcattn_workload_params *wp, int64_t S,
                      int64_t rows, int running, const head_summary *hs, int64_t nh, const head_summary *all, double secs) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "vcattn_ppath: cannot open '%s': %s\n", path, strerror(errno));
        return 0;
    }
    fprintf(f,
            "{\"tool\": \"vcattn_ppath\", \"preset\": \"%s\", \"grid\": [%lld, %lld, %lld], \"keys\": %lld,\n"
            " \"seed\": %llu, \"rows_per_head\": %lld, \"running_max\": %s, \"seconds\": %.1f,\n"
            " \"paths\": [\"exp-e4m3\", \"expcast\", \"expcast-tail\"],\n"
            " \"heads\": [\n",
            preset, (long long)wp->frames, (long long)wp->height, (long long)wp->width, (long long)S,
            (unsigned long long)wp->seed, (long long)rows, running == 3 ? "\"block-max-kmeans-order\"" : running == 2 ? "\"kmeans-order\"" : running ? "\"sequence-order\"" : "false", secs);
    for (int64_t h = 0; h < nh; ++h) {
        fprintf(f, "  {\"head\": %lld, ", (long long)h);
        json_head(f, &hs[h], 1);
        fprintf(f, "}%s\n", h + 1 < nh ? "," : "");
    }
    fprintf(f, " ],\n \"all_heads\": {");
    json_head(f, all, 0);
    fprintf(f, "}}\n");
    int ok = !ferror(f);
    if (fclose(f) != 0) ok = 0;
    return ok;
}

/* ---- --simulate: the same P formats through the library's kernel simulation ----------
 * vcattn_simulate_attention_rows with Q, K and V left in FP32 (qk_format and
 * v_format FP32) and only p_format set: the kernel's tiling, running max (in
 * sequence order) and FP32 rounding, against vcattn_reference_attention_rows
 * on the same rows; compare with --running-max.  The ExpCast formats evaluate
 * the bracket with the INT32-score magic (vc_expcast_int_bracket: the
 * float M + s), which rounds an FP32 score s to an integer; the kernels only
 * see INT8 scores, but with qk_format FP32 that rounding (0.5 x 0.1275 log2
 * units at D = 128) would swamp the P error.  So Q is multiplied by 1024 and
 * softmax_scale divided by 1024 (both exact): the same attention, scores
 * 1024 x finer against the integer grid. */
enum { NSIM = 4 };
static const char *const k_sim[NSIM] = {"exp-e4m3 (r from quantized P)", "exp-e4m3 (l from FP32 p)", "expcast",
                                        "expcast-tail"};
#define SIM_Q_GAIN 1024.0f

static int simulate_head(const float *q, const float *k, const float *v, int64_t S, int64_t D, int64_t rows,
                         int threads, double rel[NSIM]) {
    int64_t *list = (int64_t *)malloc(sizeof(int64_t) * (size_t)rows);
    float *ref = (float *)malloc(sizeof(float) * (size_t)(rows * D));
    float *out = (float *)malloc(sizeof(float) * (size_t)(rows * D));
    float *qs = (float *)malloc(sizeof(float) * (size_t)(S * D));
    int ok = list && ref && out && qs;
    if (ok) {
        for (int64_t r = 0; r < rows; ++r) list[r] = sampled_row(r, rows, S);
        for (int64_t i = 0; i < S * D; ++i) qs[i] = q[i] * SIM_Q_GAIN;
        vcattn_attention_params ap;
        vcattn_attention_params_init(&ap, 1, 1, S, S, D, qs, k, v, ref);
        ap.softmax_scale = 1.0 / ((double)SIM_Q_GAIN * sqrt((double)D));
        ap.o_stride[0] = ap.o_stride[1] = rows * D;
        ap.o_stride[2] = D;
        ap.num_threads = threads;
        ok = vcattn_reference_attention_rows(&ap, list, rows) == VCATTN_STATUS_SUCCESS;
        ap.o = out;
        for (int m = 0; ok && m < NSIM; ++m) {
            vcattn_method_config cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.qk_format = VCATTN_QK_FORMAT_FP32;
            cfg.v_format = VCATTN_V_FORMAT_FP32;
            cfg.p_format = m < 2 ? VCATTN_P_FORMAT_E4M3 : m == 2 ? VCATTN_P_FORMAT_EXPCAST : VCATTN_P_FORMAT_EXPCAST_TAIL;
            cfg.rowsum_from_quantized_p = m != 1;
            vcattn_fidelity f;
            ok = vcattn_simulate_attention_rows(&ap, &cfg, NULL, list, rows, NULL) == VCATTN_STATUS_SUCCESS &&
                 vcattn_fidelity_compare(ref, out, rows * D, &f) == VCATTN_STATUS_SUCCESS;
            rel[m] = ok ? f.rel_l2 : NAN;
        }
    }
    free(list);
    free(ref);
    free(out);
    free(qs);
    return ok;
}

/* ---- main --------------------------------------------------------------------------- */

static const char *k_usage =
    "usage: vcattn_ppath --preset NAME [--frames T] [--heads N] [--seed S] [--rows N]\n"
    "                    [--threads N] [--json PATH] [--running-max | --running-max-kmeans | --block-max-kmeans]\n"
    "                    [--simulate] [--quiet]\n"
    "The P path in isolation (docs/fidelity-analysis.md): per head, the error of O from\n"
    "quantizing P alone (exp-e4m3, expcast, expcast-tail), split into tail, mantissa,\n"
    "rounding and row-sum parts, over N sampled query rows (default 256) x every key.\n"
    "--running-max: code each 128-key block against the running max (sequence order),\n"
    "    as the kernels do, instead of the row's final max.\n"
    "--running-max-kmeans: the same, blocks in the V-Smooth plan's order\n"
    "    (vcattn_vsmooth_plan, default k-means: k = 64, 8 iterations).\n"
    "--block-max-kmeans: blocks in that order, each coded against the block-max scale\n"
    "    of the split's ExpCast keys (max(block max, previous - d), d = min(1, 80/blocks)).\n"
    "--simulate: also the library's simulation with only p_format set (FP32 Q, K, V).\n";

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "vcattn_ppath: %s%s%s\n%s", msg, arg ? " " : "", arg ? arg : "", k_usage);
    return 2;
}

int main(int argc, char **argv) {
    const char *preset = NULL, *json = NULL;
    int64_t frames = 0, heads = 0, seed = -1, rows = 256, threads = 0;
    int quiet = 0, simulate = 0, running = 0, kmeans_order = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(k_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--preset") && val) {
            preset = val;
            ++i;
        } else if (!strcmp(a, "--json") && val) {
            json = val;
            ++i;
        } else if (!strcmp(a, "--frames") && val) {
            if (!vc_cli_parse_i64(val, 1, 100000, &frames)) return usage_error("bad --frames", val);
            ++i;
        } else if (!strcmp(a, "--heads") && val) {
            if (!vc_cli_parse_i64(val, 1, 4096, &heads)) return usage_error("bad --heads", val);
            ++i;
        } else if (!strcmp(a, "--seed") && val) {
            if (!vc_cli_parse_i64(val, 0, INT64_MAX, &seed)) return usage_error("bad --seed", val);
            ++i;
        } else if (!strcmp(a, "--rows") && val) {
            if (!vc_cli_parse_i64(val, 1, 1000000, &rows)) return usage_error("bad --rows", val);
            ++i;
        } else if (!strcmp(a, "--threads") && val) {
            if (!vc_cli_parse_i64(val, 0, 1024, &threads)) return usage_error("bad --threads", val);
            ++i;
        } else if (!strcmp(a, "--running-max")) {
            running = 1;
        } else if (!strcmp(a, "--running-max-kmeans")) {
            running = kmeans_order = 1;
        } else if (!strcmp(a, "--block-max-kmeans")) {
            running = 2;
            kmeans_order = 1;
        } else if (!strcmp(a, "--simulate")) {
            simulate = 1;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else {
            return usage_error("unknown option or missing value:", a);
        }
    }
    if (!preset) return usage_error("--preset NAME is required", NULL);
    vcattn_workload_params wp;
    if (vcattn_workload_preset(preset, &wp) != VCATTN_STATUS_SUCCESS) return usage_error("unknown preset", preset);
    if (frames) wp.frames = frames;
    if (heads) wp.heads = heads;
    if (seed >= 0) wp.seed = (uint64_t)seed;
    const int64_t S = wp.frames * wp.height * wp.width, D = wp.head_dim, nh = wp.batch * wp.heads;
    if (D > DMAX) return usage_error("head_dim above 256", NULL);
    if (rows > S) rows = S;
    const int64_t n = nh * S * D;
    float *q = (float *)malloc(sizeof(float) * (size_t)n), *k = (float *)malloc(sizeof(float) * (size_t)n),
          *v = (float *)malloc(sizeof(float) * (size_t)n);
    const int workers = vc_thread_count((int)threads);
    enum { NACC = 1 + 3 * NP };
    double *scratch = (double *)malloc(sizeof(double) * (size_t)(workers * GROUP * S));
    double *accb = (double *)malloc(sizeof(double) * (size_t)(workers * GROUP * NACC * D));
    row_result *res = (row_result *)malloc(sizeof(row_result) * (size_t)rows);
    head_summary *hs = (head_summary *)calloc((size_t)nh, sizeof(head_summary));
    int32_t *perm = NULL, *blk_of = NULL;
    int rc = 0;
    if (!q || !k || !v || !scratch || !accb || !res || !hs) {
        fprintf(stderr, "vcattn_ppath: out of memory\n");
        rc = 1;
        goto done;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (vcattn_workload_generate(&wp, q, k, v) != VCATTN_STATUS_SUCCESS ||
        vcattn_round_bf16(q, q, n) != VCATTN_STATUS_SUCCESS || vcattn_round_bf16(k, k, n) != VCATTN_STATUS_SUCCESS ||
        vcattn_round_bf16(v, v, n) != VCATTN_STATUS_SUCCESS) {
        fprintf(stderr, "vcattn_ppath: generating the workload failed\n");
        rc = 1;
        goto done;
    }
    perm = kmeans_order ? (int32_t *)malloc(sizeof(int32_t) * (size_t)S) : NULL;
    blk_of = (int32_t *)malloc(sizeof(int32_t) * (size_t)S);
    if ((kmeans_order && !perm) || !blk_of) {
        fprintf(stderr, "vcattn_ppath: out of memory\n");
        rc = 1;
        goto done;
    }
    head_summary all;
    memset(&all, 0, sizeof all);
    for (int64_t h = 0; h < nh; ++h) {
        if (!quiet) {
            fprintf(stderr, "vcattn_ppath: %s, %lld keys, head %lld/%lld\n", preset, (long long)S, (long long)h + 1,
                    (long long)nh);
            fflush(stderr);
        }
        if (kmeans_order) {
            vcattn_kmeans_params kp;
            vcattn_kmeans_params_init(&kp);
            kp.num_threads = (int)threads;
            const int64_t vs[3] = {S * D, S * D, D};
            if (vcattn_vsmooth_plan_heads(v + h * S * D, 1, 1, h, S, D, vs, &kp, perm, NULL, NULL) !=
                VCATTN_STATUS_SUCCESS) {
                fprintf(stderr, "vcattn_ppath: vcattn_vsmooth_plan_heads failed\n");
                rc = 1;
                goto done;
            }
        }
        for (int64_t pos = 0; pos < S; ++pos) blk_of[perm ? perm[pos] : pos] = (int32_t)(pos / VC_BLOCK_K);
        head_ctx c = {q + h * S * D, k + h * S * D, v + h * S * D, S, D, rows,
                      {exp2((double)VC_SAGE2_P_LOG2_OFFSET), VC_EXPCAST_P_SCALE, VC_EXPCAST_TAIL_P_SCALE},
                      res, scratch, accb, running, perm, blk_of};
        if (vc_parallel_for((rows + GROUP - 1) / GROUP, (int)threads, head_group, &c) != 0) {
            fprintf(stderr, "vcattn_ppath: threads could not be created\n");
            rc = 1;
            goto done;
        }
        summarize(res, rows, D, &hs[h]);
        for (int m = 0; m < 4; ++m) hs[h].sim[m] = NAN;
        hs[h].g_h = vc_workload_head_scale(&wp, h / wp.heads, h % wp.heads);
        all.o2 += hs[h].o2;
        if (hs[h].omax > all.omax) all.omax = hs[h].omax;
        all.n += hs[h].n;
        for (int p = 0; p < NP; ++p) {
            for (int kk = 0; kk < NC; ++kk) all.err2[p][kk] += hs[h].err2[p][kk];
            all.cut_mean[p] += hs[h].cut_mean[p] / (double)nh;
            all.deficit_mean[p] += hs[h].deficit_mean[p] / (double)nh;
            if (hs[h].cut_worst[p] > all.cut_worst[p]) all.cut_worst[p] = hs[h].cut_worst[p];
            if (hs[h].worst_rel_q[p] > all.worst_rel_q[p]) all.worst_rel_q[p] = hs[h].worst_rel_q[p];
        }
    }
    for (int p = 0; p < NP; ++p) {
        for (int kk = 0; kk < NC; ++kk) all.rel[p][kk] = sqrt(all.err2[p][kk] / all.o2);
        all.psnr_q[p] = psnr(all.omax, all.err2[p][C_TOTAL], all.n);
        all.psnr_r[p] = psnr(all.omax, all.err2[p][C_EXACTSUM], all.n);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    print_table(preset, S, wp.frames, rows, running + kmeans_order, hs, nh, &all);
    if (simulate) {
        printf("# --simulate: vcattn_simulate_attention_rows, FP32 Q K V (Q x 1024, scale / 1024), only p_format;"
               " rel-L2 vs the reference (compare with --running-max)\n");
        printf("%-4s", "head");
        for (int m = 0; m < NSIM; ++m) printf(" | %s", k_sim[m]);
        printf("\n");
        for (int64_t h = 0; h < nh; ++h) {
            if (!simulate_head(q + h * S * D, k + h * S * D, v + h * S * D, S, D, rows, (int)threads, hs[h].sim)) {
                fprintf(stderr, "vcattn_ppath: the simulation failed\n");
                rc = 1;
                goto done;
            }
            printf("%-4lld", (long long)h);
            for (int m = 0; m < NSIM; ++m) printf(" | %9.3e", hs[h].sim[m]);
            printf("\n");
            fflush(stdout);
        }
    }
    if (!quiet) fprintf(stderr, "vcattn_ppath: %.1f s\n", secs);
    if (json && !write_json(json, preset, &wp, S, rows, running + kmeans_order, hs, nh, &all, secs)) {
        fprintf(stderr, "vcattn_ppath: writing '%s' failed\n", json);
        rc = 1;
    }
done:
    free(perm);
    free(blk_of);
    free(q);
    free(k);
    free(v);
    free(scratch);
    free(accb);
    free(res);
    free(hs);
    return rc;
}
