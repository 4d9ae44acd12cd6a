/* workload_cmd.c - `vcattn workload`: write a named synthetic workload preset
 * as BF16 .npy files (the format `vcattn eval --npy` and tests/gpu/
 * fidelity_long.py read), and optionally measure its softmax regime.
 *
 *   vcattn workload --preset NAME [--heads N] [--seed S] [--frames T] --out DIR
 *                   [--stats] [--stats-rows N] [--no-write] [--quiet]
 *
 * Files: DIR/q.npy, DIR/k.npy, DIR/v.npy, (B, H, S, D) '<u2' (bfloat16 bits,
 * round-to-nearest-even from the generator's float32), and DIR/grid.json
 * (preset, grid, heads, seed and every generator field).
 *
 * --stats: per head, over N query rows spread evenly through the sequence
 * (default 64), the softmax of the BF16 tensors in FP64 against all keys:
 * the mean and worst-row mass below 2^-15 and 2^-19 of the row max, the
 * octave (below the row max) where the mass histogram peaks, and the
 * median row max probability.  Table on stdout.
 *
 * Exit codes: 0 success, 1 a library call or file write failed, 2 bad usage. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_args.h"
#include "cli_parse.h"
#include "internal.h"
#include "vcattn.h"
#include "vcattn_research.h"

static const char *k_workload_usage =
    "usage: vcattn workload --preset NAME --out DIR [options]\n"
    "\n"
    "Generates a named synthetic video-DiT workload (docs/workload.md, \"Long-video\n"
    "presets\") and writes DIR/q.npy, DIR/k.npy, DIR/v.npy as (B,H,S,D) bfloat16\n"
    "stored as uint16 ('<u2', what `vcattn eval --npy` reads) and DIR/grid.json.\n"
    "\n"
    "  --preset NAME     video-long-wan720p | video-long-hunyuan720p | video-9600\n"
    "  --out DIR         output folder (created if missing)\n"
    "  --heads N         heads (default: the preset's); slice h does not depend on N\n"
    "  --seed S          seed (default 1)\n"
    "  --frames T        latent frames (default: the preset's), e.g. to measure the\n"
    "                    regime at fewer keys\n"
    "  --stats           print the softmax regime per head (tail mass, peak octave)\n"
    "  --stats-rows N    query rows sampled per head for --stats (default 64)\n"
    "  --no-write        do not write files (with --stats; --out not needed)\n"
    "  --quiet           no progress on stderr\n";

static int g_wl_quiet;

static void wl_progress(const char *fmt, const char *a, double x) {
    if (g_wl_quiet) return;
    fprintf(stderr, fmt, a, x);
    fflush(stderr);
}

static int wl_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "vcattn workload: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see 'vcattn workload --help')\n");
    return VC_EXIT_USAGE;
}

/* (B,H,S,D) bfloat16 bits as '<u2', .npy version 1.0, header padded to 64. */
static int wl_write_bf16(const char *path, const float *x, const int64_t shape[4]) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "vcattn workload: cannot open '%s' for writing: %s\n", path, strerror(errno));
        return 0;
    }
    char dict[256];
    int n = snprintf(dict, sizeof dict,
                     "{'descr': '<u2', 'fortran_order': False, 'shape': (%lld, %lld, %lld, %lld), }",
                     (long long)shape[0], (long long)shape[1], (long long)shape[2],
                     (long long)shape[3]);
    size_t total = 10 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    size_t hlen = padded - 10;
    pre[8] = (unsigned char)(hlen & 0xFF);
    pre[9] = (unsigned char)(hlen >> 8);
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 10 + (size_t)n; ok && i < padded - 1; ++i) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    const int64_t count = shape[0] * shape[1] * shape[2] * shape[3];
    enum { CHUNK = 1 << 16 };
    static unsigned char buf[2 * CHUNK];
    for (int64_t i = 0; ok && i < count; i += CHUNK) {
        int64_t m = count - i < CHUNK ? count - i : CHUNK;
        for (int64_t j = 0; j < m; ++j) {
            uint32_t u;
            memcpy(&u, &x[i + j], 4); /* already BF16-rounded: the low half is zero */
            buf[2 * j] = (unsigned char)((u >> 16) & 0xFF);
            buf[2 * j + 1] = (unsigned char)(u >> 24);
        }
        ok = fwrite(buf, 2, (size_t)m, f) == (size_t)m;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "vcattn workload: write to '%s' failed\n", path);
    return ok;
}

static int wl_write_grid(const char *path, const char *preset, const vcattn_workload_params *p) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "vcattn workload: cannot open '%s' for writing: %s\n", path, strerror(errno));
        return 0;
    }
    fprintf(f,
            "{\"preset\": \"%s\", \"grid\": [%lld, %lld, %lld], \"shape\": [%lld, %lld, %lld, %lld],\n"
            " \"dtype\": \"bfloat16 as <u2\", \"seed\": %llu,\n"
            " \"spatial_correlation\": %.9g, \"temporal_correlation\": %.9g,\n"
            " \"k_channel_offset\": %.9g, \"v_outlier_fraction\": %.9g, \"v_outlier_scale\": %.9g,\n"
            " \"v_outlier_channels\": %d, \"v_channel_offset\": %.9g,\n"
            " \"rope_theta\": %.9g, \"rope_dims\": [%d, %d, %d], \"q_channel_offset\": %.9g,\n"
            " \"qk_offset_alignment\": %.9g, \"head_scale_min\": %.9g, \"head_scale_max\": %.9g,\n"
            " \"v_frame_token_scale\": %.9g,\n \"head_scales\": [",
            preset, (long long)p->frames, (long long)p->height, (long long)p->width,
            (long long)p->batch, (long long)p->heads,
            (long long)(p->frames * p->height * p->width), (long long)p->head_dim,
            (unsigned long long)p->seed, p->spatial_correlation, p->temporal_correlation,
            p->k_channel_offset, p->v_outlier_fraction, p->v_outlier_scale, p->v_outlier_channels,
            p->v_channel_offset, p->rope_theta, p->rope_dims[0], p->rope_dims[1], p->rope_dims[2],
            p->q_channel_offset, p->qk_offset_alignment, p->head_scale_min, p->head_scale_max,
            p->v_frame_token_scale);
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t h = 0; h < p->heads; ++h)
            fprintf(f, "%s%.6f", b + h ? ", " : "", vc_workload_head_scale(p, b, h));
    fprintf(f, "]}\n");
    int ok = !ferror(f);
    if (fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "vcattn workload: write to '%s' failed\n", path);
    return ok;
}

/* ---- --stats -------------------------------------------------------------------- */

#define WL_OCT_BINS 48 /* octaves below the row max: [0,1), [1,2), ..., [47, inf) */

typedef struct {
    const float *q, *k; /* one head, (S, D) */
    int64_t seq, dim, rows;
    double *tail15, *tail19, *pmax; /* per sampled row */
    double *hist;                   /* rows x WL_OCT_BINS mass per octave */
} wl_stats_ctx;

static void wl_stats_row(void *vctx, int64_t r, int worker) {
    (void)worker;
    const wl_stats_ctx *c = (const wl_stats_ctx *)vctx;
    const int64_t S = c->seq, D = c->dim;
    const int64_t row = (r * S) / c->rows + (S / c->rows) / 2;
    const float *q = c->q + row * D;
    double *sc = (double *)malloc(sizeof(double) * (size_t)S);
    if (!sc) {
        c->tail15[r] = c->tail19[r] = c->pmax[r] = NAN;
        return;
    }
    const double scale = 1.0 / sqrt((double)D);
    double m = -INFINITY;
    for (int64_t j = 0; j < S; ++j) {
        const float *k = c->k + j * D;
        double s = 0.0;
        for (int64_t d = 0; d < D; ++d) s += (double)q[d] * (double)k[d];
        sc[j] = s * scale;
        if (sc[j] > m) m = sc[j];
    }
    double z = 0.0, t15 = 0.0, t19 = 0.0;
    double *h = c->hist + r * WL_OCT_BINS;
    for (int i = 0; i < WL_OCT_BINS; ++i) h[i] = 0.0;
    const double l15 = -15.0 * log(2.0), l19 = -19.0 * log(2.0);
    for (int64_t j = 0; j < S; ++j) {
        double u = sc[j] - m, e = exp(u);
        z += e;
        if (u < l15) t15 += e;
        if (u < l19) t19 += e;
        int bin = (int)(-u / log(2.0));
        if (bin >= WL_OCT_BINS) bin = WL_OCT_BINS - 1;
        h[bin] += e;
    }
    for (int i = 0; i < WL_OCT_BINS; ++i) h[i] /= z;
    c->tail15[r] = t15 / z;
    c->tail19[r] = t19 / z;
    c->pmax[r] = 1.0 / z;
    free(sc);
}

static int wl_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int wl_stats(const vcattn_workload_params *p, const float *q, const float *k,
                    int64_t rows) {
    const int64_t S = p->frames * p->height * p->width, D = p->head_dim;
    if (rows > S) rows = S;
    double *buf = (double *)malloc(sizeof(double) * (size_t)rows * (3 + WL_OCT_BINS));
    if (!buf) {
        fprintf(stderr, "vcattn workload: out of memory for --stats\n");
        return 0;
    }
    printf("# softmax regime, %lld keys, %lld sampled rows per head (FP64 over the BF16 tensors)\n",
           (long long)S, (long long)rows);
    printf("%-5s %8s %12s %12s %12s %12s %10s %12s\n", "head", "g_h", "tail<2^-15", "worst<2^-15",
           "tail<2^-19", "worst<2^-19", "peak_oct", "median_pmax");
    for (int64_t h = 0; h < p->batch * p->heads; ++h) {
        wl_stats_ctx c = {q + h * S * D, k + h * S * D, S, D, rows, buf, buf + rows,
                          buf + 2 * rows, buf + 3 * rows};
        vc_parallel_for(rows, 0, wl_stats_row, &c);
        double m15 = 0, m19 = 0, w15 = 0, w19 = 0, hist[WL_OCT_BINS] = {0};
        for (int64_t r = 0; r < rows; ++r) {
            m15 += c.tail15[r] / (double)rows;
            m19 += c.tail19[r] / (double)rows;
            if (c.tail15[r] > w15) w15 = c.tail15[r];
            if (c.tail19[r] > w19) w19 = c.tail19[r];
            for (int i = 0; i < WL_OCT_BINS; ++i) hist[i] += c.hist[r * WL_OCT_BINS + i] / (double)rows;
        }
        int peak = 0;
        for (int i = 1; i < WL_OCT_BINS; ++i)
            if (hist[i] > hist[peak]) peak = i;
        qsort(c.pmax, (size_t)rows, sizeof(double), wl_cmp_double);
        printf("%-5lld %8.3f %12.3e %12.3e %12.3e %12.3e %10.1f %12.3e\n", (long long)h,
               vc_workload_head_scale(p, h / p->heads, h % p->heads), m15, w15, m19, w19,
               peak + 0.5, c.pmax[rows / 2]);
        printf("      mass per octave below the max [0,1) [1,2) ...:");
        for (int i = 0; i < 24; ++i) printf(" %.3f", hist[i]);
        printf("\n");
    }
    fflush(stdout);
    free(buf);
    return 1;
}

/* ---- the command ------------------------------------------------------------------ */

int vc_workload_parse(int argc, char **argv, vc_workload_options *o) {
    memset(o, 0, sizeof *o);
    int64_t heads = 0, seed = -1, frames = 0;
    o->stats_rows = 64;
    o->write = 1;
    for (int i = 0; i < argc; ++i) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(k_workload_usage, stdout);
            return VC_PARSE_HELP;
        } else if (!strcmp(a, "--preset") && val) {
            o->preset = val;
            ++i;
        } else if (!strcmp(a, "--out") && val) {
            o->out = val;
            ++i;
        } else if (!strcmp(a, "--heads") && val) {
            if (!vc_cli_parse_i64(val, 1, 4096, &heads)) return wl_usage("--heads wants an integer in [1, 4096], got '%s'", val);
            ++i;
        } else if (!strcmp(a, "--seed") && val) {
            if (!vc_cli_parse_i64(val, 0, INT64_MAX, &seed)) return wl_usage("--seed wants an integer >= 0, got '%s'", val);
            ++i;
        } else if (!strcmp(a, "--frames") && val) {
            if (!vc_cli_parse_i64(val, 1, 100000, &frames)) return wl_usage("--frames wants an integer in [1, 100000], got '%s'", val);
            ++i;
        } else if (!strcmp(a, "--stats-rows") && val) {
            if (!vc_cli_parse_i64(val, 1, 1000000, &o->stats_rows)) return wl_usage("--stats-rows wants an integer in [1, 1000000], got '%s'", val);
            o->stats = 1;
            ++i;
        } else if (!strcmp(a, "--stats")) {
            o->stats = 1;
        } else if (!strcmp(a, "--no-write")) {
            o->write = 0;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (a[0] != '-') {
            return wl_usage("unexpected argument '%s': vcattn workload takes only options", a);
        } else if (!strcmp(a, "--preset") || !strcmp(a, "--out") || !strcmp(a, "--heads") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--frames") || !strcmp(a, "--stats-rows")) {
            return wl_usage("option '%s' needs a value", a); /* a known option, last on the line */
        } else {
            return wl_usage("unknown option '%s'", a);
        }
    }
    if (!o->preset) return wl_usage("%s", "--preset NAME is required");
    if (o->write && !o->out) return wl_usage("%s", "--out DIR is required (or --no-write with --stats)");
    if (!o->write && !o->stats) return wl_usage("%s", "--no-write without --stats does nothing");
    if (vcattn_workload_preset(o->preset, &o->wl) != VCATTN_STATUS_SUCCESS) {
        fprintf(stderr, "vcattn workload: unknown preset '%s'; known:", o->preset);
        for (int i = 0; vcattn_workload_preset_name(i); ++i)
            fprintf(stderr, " %s", vcattn_workload_preset_name(i));
        fprintf(stderr, "\n");
        return VC_EXIT_USAGE;
    }
    if (heads) o->wl.heads = heads;
    if (seed >= 0) o->wl.seed = (uint64_t)seed;
    if (frames) o->wl.frames = frames;
    return 0;
}

int vcattn_cmd_workload(int argc, char **argv) {
    vc_workload_options o;
    int prc = vc_workload_parse(argc, argv, &o);
    if (prc == VC_PARSE_HELP) return 0;
    if (prc) return prc;
    g_wl_quiet = o.quiet;
    const char *preset = o.preset, *out = o.out;
    const int64_t stats_rows = o.stats_rows;
    const int stats = o.stats, write = o.write;
    vcattn_workload_params p = o.wl;
    vcattn_status st;

    const int64_t S = p.frames * p.height * p.width;
    const int64_t shape[4] = {p.batch, p.heads, S, p.head_dim};
    const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    float *q = (float *)malloc(sizeof(float) * (size_t)n);
    float *k = (float *)malloc(sizeof(float) * (size_t)n);
    float *v = (float *)malloc(sizeof(float) * (size_t)n);
    int rc = 0;
    if (!q || !k || !v) {
        fprintf(stderr, "vcattn workload: out of memory (3 x %lld floats)\n", (long long)n);
        rc = 1;
        goto done;
    }
    if (!g_wl_quiet)
        fprintf(stderr, "vcattn workload: %s, %lld heads x %lld x %lld x %lld = %lld tokens x %lld, seed %llu\n",
                preset, (long long)p.heads, (long long)p.frames, (long long)p.height,
                (long long)p.width, (long long)S, (long long)p.head_dim, (unsigned long long)p.seed);
    st = vcattn_workload_generate(&p, q, k, v);
    if (st != VCATTN_STATUS_SUCCESS) {
        fprintf(stderr, "vcattn workload: vcattn_workload_generate: %s\n", vcattn_status_string(st));
        rc = 1;
        goto done;
    }
    /* BF16, as the files hold it (and the stats see it) */
    if (vcattn_round_bf16(q, q, n) || vcattn_round_bf16(k, k, n) || vcattn_round_bf16(v, v, n)) {
        fprintf(stderr, "vcattn workload: vcattn_round_bf16 failed\n");
        rc = 1;
        goto done;
    }
    if (write) {
        if (mkdir(out, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "vcattn workload: cannot create '%s': %s\n", out, strerror(errno));
            rc = 1;
            goto done;
        }
        const char *names[3] = {"q.npy", "k.npy", "v.npy"};
        const float *data[3] = {q, k, v};
        size_t plen = strlen(out) + 16;
        char *path = (char *)malloc(plen);
        if (!path) {
            rc = 1;
            goto done;
        }
        for (int t = 0; t < 3 && rc == 0; ++t) {
            snprintf(path, plen, "%s/%s", out, names[t]);
            wl_progress("vcattn workload: writing %s%.0s\n", path, 0.0);
            if (!wl_write_bf16(path, data[t], shape)) rc = 1;
        }
        if (rc == 0) {
            snprintf(path, plen, "%s/grid.json", out);
            if (!wl_write_grid(path, preset, &p)) rc = 1;
        }
        free(path);
    }
    if (rc == 0 && stats) {
        wl_progress("vcattn workload: %s stats over %g rows per head\n", "softmax", (double)stats_rows);
        if (!wl_stats(&p, q, k, stats_rows)) rc = 1;
    }
done:
    free(q);
    free(k);
    free(v);
    return rc;
}
