/* vcattn - command-line tool: evaluate the low-bit methods on a built-in
 * video-DiT workload or on captured tensors, and print the ExpCast facts.
 *
 * Exit codes: 0 success, 1 a library call failed, 2 bad usage. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vcattn.h"

#define EXIT_USAGE 2

static const char *k_usage =
    "usage: vcattn <command> [options]\n"
    "\n"
    "commands:\n"
    "  eval       fidelity of each method against the FP64 reference\n"
    "  numerics   the ExpCast-FP8 facts measured on the shared numerics\n"
    "  workload   write a named synthetic workload preset as BF16 .npy (tools/workload_cmd.c)\n"
    "  version    print the version\n"
    "\n"
    "Run 'vcattn <command> --help' for the options of a command.\n";

static const char *k_eval_usage =
    "usage: vcattn eval [options]\n"
    "\n"
    "Runs the FP64 reference and the CPU simulation of each method (the kernel's\n"
    "tiling and rounding) and reports relative L2 error, cosine, PSNR, the error\n"
    "budget of eq. (2) (value path vs probability path), the mean per-row total\n"
    "variation of the probabilities, and the V block-energy share the block mean\n"
    "removes in sequence, 3-D cube and k-means (clustered) order.\n"
    "\n"
    "input (default: the built-in synthetic video-DiT workload, see docs/workload.md):\n"
    "  --npy Q.npy K.npy V.npy   captured tensors, (B,H,S,D) float32/float16/bfloat16\n"
    "  --grid T,H,W              token grid of the .npy sequence (enables cube order)\n"
    "  --heads N                 workload heads (default 2)\n"
    "  --frames T --height H --width W   workload grid (default 8 x 32 x 32 = 8192 tokens)\n"
    "  --head-dim D              64 or 128 (default 128)\n"
    "  --seed N                  workload seed (default 1)\n"
    "methods:\n"
    "  --methods a,b,...         from: fp8-naive, sage2-8bit, vsmooth-8bit,\n"
    "                            vsmooth-expcast-8bit, sage3-4bit, vsmooth-4bit,\n"
    "                            vsmooth-expcast-tail-8bit (default: all)\n"
    "  --clusters K              k-means clusters for V-Smooth (default 64)\n"
    "  --iterations N            k-means iterations (default 8)\n"
    "  --cube T,H,W              cube size of the static 3-D order (default 2,8,8)\n"
    "  --scale X                 softmax scale (default 1/sqrt(D))\n"
    "output:\n"
    "  --json                    one JSON object per method on stdout\n"
    "  --tv-stride N             rows sampled for the total variation (default 16)\n"
    "  --threads N               CPU threads (default: all cores)\n"
    "  --quiet                   no progress on stderr\n";

static const char *k_numerics_usage =
    "usage: vcattn numerics [--json] [--samples N]\n"
    "\n"
    "Measures, with the library's own E4M3 and ExpCast code, over u = (s - m) log2(e)\n"
    "spread uniformly in log2 within each doubling of the normal range:\n"
    "the share where the one-FMA ExpCast code equals FP32 exp + RNE cast, the largest\n"
    "code difference, the range of value(code)/exact, and the per-row total variation\n"
    "bound (sqrt(b) - sqrt(a)) / (sqrt(b) + sqrt(a)).  --samples: per doubling (100000).\n";

static int g_quiet;

static void progress(const char *fmt, ...) {
    if (g_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what, vcattn_status st) {
    fprintf(stderr, "vcattn: %s: %s\n", what, vcattn_status_string(st));
    return 1;
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "vcattn: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see 'vcattn eval --help')\n");
    return EXIT_USAGE;
}

/* Strict integer parse: the whole string, in [lo, hi]. */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_triple(const char *s, int64_t out[3]) {
    char buf[64];
    if (!s || strlen(s) >= sizeof buf) return 0;
    strcpy(buf, s);
    char *save = NULL, *tok = strtok_r(buf, ",x", &save);
    for (int i = 0; i < 3; ++i) {
        if (!tok || !parse_i64(tok, 1, 1 << 20, &out[i])) return 0;
        tok = strtok_r(NULL, ",x", &save);
    }
    return tok == NULL;
}

/* ---- vcattn numerics ------------------------------------------------------------ */

static int cmd_numerics(int argc, char **argv) {
    int json = 0;
    int64_t samples = 100000;
    for (int i = 0; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_numerics_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--samples") && i + 1 < argc) {
            if (!parse_i64(argv[++i], 16, 100000000, &samples))
                return usage_error("--samples wants an integer in [16, 1e8], got '%s'", argv[i]);
        } else {
            fprintf(stderr, "vcattn numerics: unknown option '%s'\n%s", argv[i], k_numerics_usage);
            return EXIT_USAGE;
        }
    }
    vcattn_expcast_facts f;
    vcattn_status st = vcattn_expcast_measure(samples, &f);
    if (st) return fail("expcast_measure", st);
    if (json) {
        printf("{\"beta\": %.4f, \"agree_share\": %.6f, \"max_code_diff\": %d, \"ratio_min\": %.6f, "
               "\"ratio_max\": %.6f, \"row_tv_bound\": %.6f, \"samples_per_doubling\": %lld}\n",
               f.beta, f.agree_share, f.max_code_diff, f.ratio_min, f.ratio_max, f.row_tv_bound,
               (long long)samples);
    } else {
        printf("ExpCast-FP8: code = clip[0,120](RNE(8*(u+8) + 56 + beta)), beta = %.2f\n", f.beta);
        printf("  direct code == FP32 exp + RNE cast on   %.1f%% of each doubling (paper: 79.6%%)\n",
               100.0 * f.agree_share);
        printf("  largest code difference                 %d (paper: 1)\n", f.max_code_diff);
        printf("  value(code) / exact value in            [%.4f, %.4f] (paper: [0.9290, 1.0746])\n",
               f.ratio_min, f.ratio_max);
        printf("  per-row total variation bound           %.2f%% + underflow tail (paper: 3.64%%)\n",
               100.0 * f.row_tv_bound);
    }
    return 0;
}

/* ---- vcattn eval ------------------------------------------------------------------ */

typedef struct {
    const char *npy[3];
    int64_t grid[3];
    int have_grid;
    int64_t cube[3];
    vcattn_workload_params wl;
    int methods[VCATTN_METHOD_COUNT];
    int method_count;
    vcattn_kmeans_params km;
    double scale;
    int json;
    int64_t tv_stride;
    int threads;
} eval_options;

static int parse_methods(const char *list, eval_options *o) {
    char buf[512];
    if (strlen(list) >= sizeof buf) return 0;
    strcpy(buf, list);
    o->method_count = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        vcattn_method m;
        if (vcattn_method_from_name(tok, &m) != VCATTN_STATUS_SUCCESS) {
            fprintf(stderr, "vcattn: unknown method '%s'\n", tok);
            return 0;
        }
        if (o->method_count < VCATTN_METHOD_COUNT) o->methods[o->method_count++] = (int)m;
    }
    return o->method_count > 0;
}

static int parse_eval(int argc, char **argv, eval_options *o) {
    memset(o, 0, sizeof *o);
    vcattn_workload_params_init(&o->wl);
    vcattn_kmeans_params_init(&o->km);
    o->cube[0] = 2;
    o->cube[1] = 8;
    o->cube[2] = 8;
    o->tv_stride = 16;
    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) o->methods[m] = m;
    o->method_count = VCATTN_METHOD_COUNT;
    for (int i = 0; i < argc; ++i) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(k_eval_usage, stdout);
            return -1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--quiet")) {
            g_quiet = 1;
        } else if (!strcmp(a, "--npy")) {
            if (i + 3 >= argc) return usage_error("--npy wants three files: Q.npy K.npy V.npy%s", "");
            for (int k = 0; k < 3; ++k) o->npy[k] = argv[++i];
        } else if (!val) {
            return usage_error("option '%s' needs a value (or is unknown)", a);
        } else if (!strcmp(a, "--grid")) {
            if (!parse_triple(val, o->grid)) return usage_error("--grid wants T,H,W, got '%s'", val);
            o->have_grid = 1;
            ++i;
        } else if (!strcmp(a, "--cube")) {
            if (!parse_triple(val, o->cube)) return usage_error("--cube wants T,H,W, got '%s'", val);
            ++i;
        } else if (!strcmp(a, "--methods")) {
            if (!parse_methods(val, o)) return usage_error("bad --methods list '%s'", val);
            ++i;
        } else if (!strcmp(a, "--heads") || !strcmp(a, "--frames") || !strcmp(a, "--height") ||
                   !strcmp(a, "--width") || !strcmp(a, "--head-dim")) {
            if (!parse_i64(val, 1, 1 << 20, &n)) return usage_error("bad size '%s'", val);
            if (!strcmp(a, "--heads")) o->wl.heads = n;
            else if (!strcmp(a, "--frames")) o->wl.frames = n;
            else if (!strcmp(a, "--height")) o->wl.height = n;
            else if (!strcmp(a, "--width")) o->wl.width = n;
            else o->wl.head_dim = n;
            ++i;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_i64(val, 0, INT64_MAX, &n)) return usage_error("bad --seed '%s'", val);
            o->wl.seed = (uint64_t)n;
            o->km.seed = (uint64_t)n;
            ++i;
        } else if (!strcmp(a, "--clusters")) {
            if (!parse_i64(val, 1, 1 << 16, &n)) return usage_error("bad --clusters '%s'", val);
            o->km.clusters = (int)n;
            ++i;
        } else if (!strcmp(a, "--iterations")) {
            if (!parse_i64(val, 1, 1000, &n)) return usage_error("bad --iterations '%s'", val);
            o->km.iterations = (int)n;
            ++i;
        } else if (!strcmp(a, "--tv-stride")) {
            if (!parse_i64(val, 1, 1 << 30, &o->tv_stride)) return usage_error("bad --tv-stride '%s'", val);
            ++i;
        } else if (!strcmp(a, "--threads")) {
            if (!parse_i64(val, 0, 1024, &n)) return usage_error("bad --threads '%s'", val);
            o->threads = (int)n;
            ++i;
        } else if (!strcmp(a, "--scale")) {
            char *end;
            o->scale = strtod(val, &end);
            if (*end || !(o->scale > 0.0)) return usage_error("bad --scale '%s'", val);
            ++i;
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    o->km.num_threads = o->threads;
    return 0;
}

typedef struct {
    int64_t B, H, S, D;
    float *q, *k, *v;
} tensors;

static void tensors_free(tensors *t) {
    vcattn_free(t->q);
    vcattn_free(t->k);
    vcattn_free(t->v);
}

static int load_inputs(eval_options *o, tensors *t) {
    memset(t, 0, sizeof *t);
    if (o->npy[0]) {
        int64_t shapes[3][4];
        float **dst[3] = {&t->q, &t->k, &t->v};
        for (int i = 0; i < 3; ++i) {
            vcattn_status st = vcattn_npy_load(o->npy[i], dst[i], shapes[i]);
            if (st) {
                fprintf(stderr, "vcattn: %s: %s\n", o->npy[i], vcattn_status_string(st));
                return 1;
            }
        }
        if (memcmp(shapes[1], shapes[2], sizeof shapes[1]) != 0 || shapes[0][0] != shapes[1][0] ||
            shapes[0][1] != shapes[1][1] || shapes[0][3] != shapes[1][3]) {
            fprintf(stderr, "vcattn: shapes disagree: Q (%lld,%lld,%lld,%lld), K (%lld,%lld,%lld,%lld), "
                    "V (%lld,%lld,%lld,%lld); K and V must match, Q may differ in S only\n",
                    (long long)shapes[0][0], (long long)shapes[0][1], (long long)shapes[0][2], (long long)shapes[0][3],
                    (long long)shapes[1][0], (long long)shapes[1][1], (long long)shapes[1][2], (long long)shapes[1][3],
                    (long long)shapes[2][0], (long long)shapes[2][1], (long long)shapes[2][2], (long long)shapes[2][3]);
            return 1;
        }
        t->B = shapes[0][0];
        t->H = shapes[0][1];
        t->S = shapes[1][2];
        t->D = shapes[0][3];
        if (shapes[0][2] != t->S) {
            fprintf(stderr, "vcattn: eval needs self-attention inputs (Sq == Skv) for the V "
                    "statistics; got Sq %lld, Skv %lld\n", (long long)shapes[0][2], (long long)t->S);
            return 1;
        }
        if (o->have_grid && o->grid[0] * o->grid[1] * o->grid[2] != t->S) {
            fprintf(stderr, "vcattn: --grid %lldx%lldx%lld does not multiply to S = %lld\n",
                    (long long)o->grid[0], (long long)o->grid[1], (long long)o->grid[2], (long long)t->S);
            return 1;
        }
        return 0;
    }
    t->B = o->wl.batch;
    t->H = o->wl.heads;
    t->S = o->wl.frames * o->wl.height * o->wl.width;
    t->D = o->wl.head_dim;
    o->grid[0] = o->wl.frames;
    o->grid[1] = o->wl.height;
    o->grid[2] = o->wl.width;
    o->have_grid = 1;
    size_t n = (size_t)(t->B * t->H * t->S * t->D);
    t->q = (float *)malloc(n * sizeof(float));
    t->k = (float *)malloc(n * sizeof(float));
    t->v = (float *)malloc(n * sizeof(float));
    if (!t->q || !t->k || !t->v) return fail("workload", VCATTN_STATUS_OUT_OF_MEMORY);
    vcattn_status st = vcattn_workload_generate(&o->wl, t->q, t->k, t->v);
    if (st) return fail("workload", st);
    return 0;
}

static const char *k_order_names[3] = {"sequence", "cube", "clustered"};

/* A JSON number, or null for what was not measured (< 0) or is not finite. */
static const char *json_num(char *buf, size_t n, double x, int digits) {
    if (!isfinite(x) || x < 0.0) return "null";
    snprintf(buf, n, "%.*g", digits, x);
    return buf;
}

static int cmd_eval(int argc, char **argv) {
    eval_options o;
    int rc = parse_eval(argc, argv, &o);
    if (rc == -1) return 0;
    if (rc) return rc;
    tensors t;
    double t0 = now_seconds();
    if ((rc = load_inputs(&o, &t))) {
        tensors_free(&t);
        return rc;
    }
    const int64_t n = t.B * t.H * t.S * t.D, rows = t.B * t.H * t.S;
    const int64_t vs[3] = {t.H * t.S * t.D, t.S * t.D, t.D};
    progress("vcattn eval: %s, B=%lld H=%lld S=%lld D=%lld\n", o.npy[0] ? "captured tensors" : "synthetic video-DiT workload",
             (long long)t.B, (long long)t.H, (long long)t.S, (long long)t.D);

    float *ref = (float *)malloc((size_t)n * sizeof(float));
    float *out = (float *)malloc((size_t)n * sizeof(float));
    float *pqv = (float *)malloc((size_t)n * sizeof(float));
    int32_t *perm = (int32_t *)malloc((size_t)rows * sizeof(int32_t));
    int32_t *cube = o.have_grid ? (int32_t *)malloc((size_t)t.S * sizeof(int32_t)) : NULL;
    int64_t nsamp = (t.S + o.tv_stride - 1) / o.tv_stride;
    double *tv = (double *)malloc((size_t)(t.B * t.H * nsamp) * sizeof(double));
    if (!ref || !out || !pqv || !perm || (o.have_grid && !cube) || !tv) {
        rc = fail("eval", VCATTN_STATUS_OUT_OF_MEMORY);
        goto done;
    }

    /* exact reference */
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, t.B, t.H, t.S, t.S, t.D, t.q, t.k, t.v, ref);
    p.softmax_scale = o.scale;
    p.num_threads = o.threads;
    double ts = now_seconds();
    progress("  reference (FP64) ... ");
    vcattn_status st = vcattn_reference_attention(&p);
    if (st) { rc = fail("reference", st); goto done; }
    progress("%.1f s\n", now_seconds() - ts);

    /* V-Smooth plan and the block-energy statistic in the three orders */
    ts = now_seconds();
    progress("  k-means plan (k=%d, %d iterations) ... ", o.km.clusters, o.km.iterations);
    st = vcattn_vsmooth_plan(t.v, t.B, t.H, t.S, t.D, vs, &o.km, perm, NULL, NULL);
    if (st) { rc = fail("vsmooth_plan", st); goto done; }
    progress("%.1f s\n", now_seconds() - ts);
    double share[3] = {-1.0, -1.0, -1.0};
    if (t.S >= 128) {
        st = vcattn_block_energy_share(t.v, t.B, t.H, t.S, t.D, vs, NULL, 0, &share[0]);
        if (!st && cube) {
            st = vcattn_cube_permutation(o.grid[0], o.grid[1], o.grid[2], o.cube[0], o.cube[1], o.cube[2], cube);
            if (!st) st = vcattn_block_energy_share(t.v, t.B, t.H, t.S, t.D, vs, cube, 0, &share[1]);
        }
        if (!st) st = vcattn_block_energy_share(t.v, t.B, t.H, t.S, t.D, vs, perm, t.S, &share[2]);
        if (st) { rc = fail("block_energy_share", st); goto done; }
    }

    if (!o.json) {
        printf("V block-energy share removed by the 128-token block mean:");
        for (int i = 0; i < 3; ++i)
            if (share[i] >= 0.0) printf(" %s %.1f%%", k_order_names[i], 100.0 * share[i]);
            else printf(" %s n/a", k_order_names[i]);
        printf("\n\n%-22s %9s %10s %9s %12s %10s %10s %9s\n", "method", "rel_l2", "cosine", "psnr_db",
               "value_share", "value_l2", "prob_l2", "row_tv");
    }
    for (int mi = 0; mi < o.method_count; ++mi) {
        vcattn_method m = (vcattn_method)o.methods[mi];
        vcattn_method_config cfg;
        vcattn_method_config_get(m, &cfg);
        p.o = out;
        vcattn_sim_outputs extra = {pqv, tv, o.tv_stride, NULL};
        ts = now_seconds();
        progress("  %-22s ... ", vcattn_method_name(m));
        st = vcattn_simulate_attention(&p, &cfg, perm, &extra);
        if (st) { rc = fail(vcattn_method_name(m), st); goto done; }
        double secs = now_seconds() - ts;
        progress("%.1f s\n", secs);
        vcattn_fidelity f;
        vcattn_error_budget eb;
        st = vcattn_fidelity_compare(ref, out, n, &f);
        if (!st) st = vcattn_error_budget_compute(ref, out, pqv, n, &eb);
        if (st) { rc = fail("metrics", st); goto done; }
        double tv_mean = 0.0;
        for (int64_t i = 0; i < t.B * t.H * nsamp; ++i) tv_mean += tv[i];
        tv_mean /= (double)(t.B * t.H * nsamp);
        if (o.json) {
            char nb[6][32];
            printf("{\"method\": \"%s\", \"rel_l2\": %.6g, \"cosine\": %.9f, \"psnr_db\": %s, "
                   "\"value_error_share\": %.4f, \"value_rel_l2\": %.6g, \"probability_rel_l2\": %.6g, "
                   "\"mean_row_tv\": %.6g, \"block_energy_share_sequence\": %s, "
                   "\"block_energy_share_cube\": %s, \"block_energy_share_clustered\": %s, "
                   "\"seconds\": %.2f, \"shape\": [%lld, %lld, %lld, %lld]}\n",
                   vcattn_method_name(m), f.rel_l2, f.cosine, json_num(nb[0], 32, f.psnr_db, 6), eb.value_share,
                   eb.value_rel_l2, eb.probability_rel_l2, tv_mean, json_num(nb[1], 32, share[0], 4),
                   json_num(nb[2], 32, share[1], 4), json_num(nb[3], 32, share[2], 4), secs, (long long)t.B,
                   (long long)t.H, (long long)t.S, (long long)t.D);
        } else {
            printf("%-22s %9.5f %10.7f %9.2f %11.1f%% %10.5f %10.5f %8.2f%%\n", vcattn_method_name(m),
                   f.rel_l2, f.cosine, f.psnr_db, 100.0 * eb.value_share, eb.value_rel_l2,
                   eb.probability_rel_l2, 100.0 * tv_mean);
        }
        fflush(stdout);
    }
    progress("done in %.1f s\n", now_seconds() - t0);
done:
    free(ref);
    free(out);
    free(pqv);
    free(perm);
    free(cube);
    free(tv);
    tensors_free(&t);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(k_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (!strcmp(argv[1], "eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(argv[1], "numerics")) return cmd_numerics(argc - 2, argv + 2);
    if (!strcmp(argv[1], "workload")) { extern int vcattn_cmd_workload(int, char **); return vcattn_cmd_workload(argc - 2, argv + 2); }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("vcattn %s\n", vcattn_version_string());
        return 0;
    }
    fprintf(stderr, "vcattn: unknown command '%s'\n%s", argv[1], k_usage);
    return EXIT_USAGE;
}
