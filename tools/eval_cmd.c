/* eval_cmd.c - `vcattn eval`: every method against the FP64 reference, on the
 * built-in workload or captured tensors, all rows or sampled rows, per head. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "cli_parse.h"
#include "eval_policy.h"
#include "vcattn.h"

/* The options and their parsing: eval_parse.c (cli_parse.h). */
#define MAX_SEQ VC_EVAL_MAX_SEQ
#define MAX_SELECTED_HEADS VC_EVAL_MAX_SELECTED_HEADS
typedef vc_eval_options eval_options;

static int g_quiet;

static void progress(const char *fmt, ...) {
    if (g_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

/* ---- vcattn eval ------------------------------------------------------------------ */

typedef struct {
    int64_t B, H, Sq, Skv, D;
    float *q, *k, *v;
} tensors;

static void tensors_free(tensors *t) {
    vcattn_free(t->q);
    vcattn_free(t->k);
    vcattn_free(t->v);
}

/* a * b, or -1 past int64 (operands >= 0) */
static int64_t mul_or_neg(int64_t a, int64_t b) {
    if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a)) return -1;
    return a * b;
}

/* Index of the first NaN/Inf of a contiguous (B, H, S, D) tensor, or -1. */
static int64_t first_non_finite(const float *x, const int64_t shape[4]) {
    int64_t n = shape[0] * shape[1] * shape[2] * shape[3]; /* the loader checked the count */
    for (int64_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return i;
    return -1;
}

static int load_inputs(eval_options *o, tensors *t) {
    memset(t, 0, sizeof *t);
    if (o->npy[0]) {
        int64_t shapes[3][4];
        float **dst[3] = {&t->q, &t->k, &t->v};
        for (int i = 0; i < 3; ++i) {
            vcattn_npy_error err;
            vcattn_status st = vcattn_npy_load_ex(o->npy[i], dst[i], shapes[i], &err);
            if (st) {
                /* the message names the file, the cause and the fix */
                fprintf(stderr, "vcattn: %s\n", err.message[0] ? err.message : vcattn_status_string(st));
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
        /* the library answers NON_FINITE without saying where: name the tensor and the element */
        static const char *const names[3] = {"Q", "K", "V"};
        for (int i = 0; i < 3; ++i) {
            int64_t at = first_non_finite(*dst[i], shapes[i]);
            if (at < 0) continue;
            const int64_t *sh = shapes[i];
            int64_t d = at % sh[3], s = at / sh[3] % sh[2], h = at / sh[3] / sh[2] % sh[1],
                    b = at / sh[3] / sh[2] / sh[1];
            float x = (*dst[i])[at];
            fprintf(stderr, "vcattn: %s (%s) has %s at element (%lld, %lld, %lld, %lld) of (%lld, %lld, %lld, %lld); "
                    "attention needs finite Q, K and V: find where the capture went non-finite, or replace the "
                    "values (e.g. np.nan_to_num)\n", names[i], o->npy[i], isnan(x) ? "NaN" : x > 0 ? "+Inf" : "-Inf",
                    (long long)b, (long long)h, (long long)s, (long long)d, (long long)sh[0], (long long)sh[1],
                    (long long)sh[2], (long long)sh[3]);
            return 1;
        }
        t->B = shapes[0][0];
        t->H = shapes[0][1];
        t->Sq = shapes[0][2];
        t->Skv = shapes[1][2];
        t->D = shapes[0][3];
        /* the token grid describes the key/value sequence (the V statistics) */
        if (o->have_grid && o->grid[0] * o->grid[1] * o->grid[2] != t->Skv) {
            fprintf(stderr, "vcattn: --grid %lldx%lldx%lld = %lld tokens does not match the K/V sequence "
                    "length %lld\n", (long long)o->grid[0], (long long)o->grid[1], (long long)o->grid[2],
                    (long long)(o->grid[0] * o->grid[1] * o->grid[2]), (long long)t->Skv);
            return 1;
        }
        return 0;
    }
    int64_t S = mul_or_neg(mul_or_neg(o->wl.frames, o->wl.height), o->wl.width);
    if (S < 0 || S > MAX_SEQ) {
        fprintf(stderr, "vcattn: --frames x --height x --width = %lld x %lld x %lld tokens is more than "
                "the library's sequence limit of %d tokens; choose a smaller grid\n",
                (long long)o->wl.frames, (long long)o->wl.height, (long long)o->wl.width, MAX_SEQ);
        return VC_EXIT_USAGE;
    }
    int64_t n = mul_or_neg(mul_or_neg(mul_or_neg(o->wl.batch, o->wl.heads), S), o->wl.head_dim);
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(float) / 3) {
        fprintf(stderr, "vcattn: the workload (%lld heads x %lld tokens x D %lld) does not fit in memory "
                "addressing; use fewer --workload-heads or a smaller grid\n",
                (long long)o->wl.heads, (long long)S, (long long)o->wl.head_dim);
        return VC_EXIT_USAGE;
    }
    t->B = o->wl.batch;
    t->H = o->wl.heads;
    t->Sq = t->Skv = S;
    t->D = o->wl.head_dim;
    o->grid[0] = o->wl.frames;
    o->grid[1] = o->wl.height;
    o->grid[2] = o->wl.width;
    o->have_grid = 1;
    t->q = (float *)malloc((size_t)n * sizeof(float));
    t->k = (float *)malloc((size_t)n * sizeof(float));
    t->v = (float *)malloc((size_t)n * sizeof(float));
    if (!t->q || !t->k || !t->v) return vc_cli_fail("workload", VCATTN_STATUS_OUT_OF_MEMORY);
    vcattn_status st = vcattn_workload_generate(&o->wl, t->q, t->k, t->v);
    if (st) return vc_cli_fail("workload", st);
    return 0;
}

static const char *k_order_names[3] = {"sequence", "cube", "clustered"};

/* A signed JSON number, or null where it is not finite (a standard error with one row of many). */
static const char *json_signed(char *buf, size_t n, double x, int digits) {
    if (!isfinite(x)) return "null";
    snprintf(buf, n, "%.*g", digits, x);
    return buf;
}

/* A JSON number, or null for what was not measured (< 0) or is not finite. */
static const char *json_num(char *buf, size_t n, double x, int digits) {
    return x < 0.0 ? "null" : json_signed(buf, n, x, digits);
}

/* Sums behind the fidelity metrics and the error budget (the formulas of
 * src/metrics.c), so that one head's numbers and the overall ones (all
 * evaluated heads' rows pooled) come from one code path. */
typedef struct {
    double err2, ref2, out2, dot, peak, max_err, val2, prob2, tv_sum;
    int64_t n, tv_n;
} metric_sums;

static int sums_add(metric_sums *s, const float *ref, const float *out, const float *pqv, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        double r = ref[i], o = out[i], e = pqv[i], d = o - r;
        if (!isfinite(r) || !isfinite(o) || !isfinite(e)) return 0;
        s->err2 += d * d;
        s->ref2 += r * r;
        s->out2 += o * o;
        s->dot += r * o;
        s->peak = fmax(s->peak, fabs(r));
        s->max_err = fmax(s->max_err, fabs(d));
        s->val2 += (e - o) * (e - o);  /* P_q (V - V_q) */
        s->prob2 += (r - e) * (r - e); /* (P - P_q) V */
    }
    s->n += n;
    return 1;
}

static void sums_merge(metric_sums *into, const metric_sums *s) {
    into->err2 += s->err2;
    into->ref2 += s->ref2;
    into->out2 += s->out2;
    into->dot += s->dot;
    into->peak = fmax(into->peak, s->peak);
    into->max_err = fmax(into->max_err, s->max_err);
    into->val2 += s->val2;
    into->prob2 += s->prob2;
    into->tv_sum += s->tv_sum;
    into->n += s->n;
    into->tv_n += s->tv_n;
}

typedef struct {
    double rel_l2, cosine, psnr_db, max_abs_error, value_error_share, value_rel_l2,
        probability_rel_l2, mean_row_tv;
} metric_values;

static metric_values sums_finish(const metric_sums *s) {
    metric_values m;
    m.rel_l2 = s->ref2 > 0.0 ? sqrt(s->err2 / s->ref2) : (s->err2 > 0.0 ? INFINITY : 0.0);
    m.cosine = s->ref2 > 0.0 && s->out2 > 0.0 ? s->dot / sqrt(s->ref2 * s->out2) : (s->ref2 == s->out2 ? 1.0 : 0.0);
    double rmse = sqrt(s->err2 / (double)s->n);
    m.psnr_db = rmse > 0.0 ? 20.0 * log10(s->peak / rmse) : INFINITY;
    m.max_abs_error = s->max_err;
    double denom = s->ref2 > 0.0 ? sqrt(s->ref2) : 1.0;
    m.value_rel_l2 = sqrt(s->val2) / denom;
    m.probability_rel_l2 = sqrt(s->prob2) / denom;
    m.value_error_share = s->val2 + s->prob2 > 0.0 ? s->val2 / (s->val2 + s->prob2) : 0.0;
    m.mean_row_tv = s->tv_n > 0 ? s->tv_sum / (double)s->tv_n : -1.0;
    return m;
}

static void print_json_metrics(const metric_values *m) {
    char nb[32];
    printf("\"rel_l2\": %.6g, \"cosine\": %.9f, \"psnr_db\": %s, \"max_abs_error\": %.6g, "
           "\"value_error_share\": %.4f, \"value_rel_l2\": %.6g, \"probability_rel_l2\": %.6g, ",
           m->rel_l2, m->cosine, json_num(nb, sizeof nb, m->psnr_db, 6), m->max_abs_error,
           m->value_error_share, m->value_rel_l2, m->probability_rel_l2);
    printf("\"mean_row_tv\": %s", json_num(nb, sizeof nb, m->mean_row_tv, 6));
}

static void print_table_row(const char *method, const char *head, const metric_values *m) {
    printf("%-34s %5s %9.5f %10.7f %8.2f %18.1f%% %12.5f %18.5f %10.2f%%\n", method, head, m->rel_l2,
           m->cosine, m->psnr_db, 100.0 * m->value_error_share, m->value_rel_l2, m->probability_rel_l2,
           100.0 * m->mean_row_tv);
}

static void print_head_list(FILE *f, const int64_t *heads, int64_t n) {
    for (int64_t i = 0; i < n; ++i) fprintf(f, "%s%lld", i ? "," : "", (long long)heads[i]);
}

int vc_cmd_eval(int argc, char **argv) {
    eval_options o;
    int rc = vc_eval_parse(argc, argv, &o);
    if (rc == VC_PARSE_HELP) return 0;
    if (rc) return rc;
    g_quiet = o.quiet;
    tensors t;
    double t0 = vc_cli_now_seconds();
    if ((rc = load_inputs(&o, &t))) {
        tensors_free(&t);
        return rc;
    }
    const int64_t B = t.B, H = t.H, Sq = t.Sq, Skv = t.Skv, D = t.D;
    /* which heads: --heads, else all of them */
    if (o.head_count == 0) {
        if (H > MAX_SELECTED_HEADS) {
            fprintf(stderr, "vcattn: the input has %lld heads, more than the %d one run evaluates; "
                    "choose some with --heads\n", (long long)H, MAX_SELECTED_HEADS);
            tensors_free(&t);
            return VC_EXIT_USAGE;
        }
        for (int64_t h = 0; h < H; ++h) o.heads[o.head_count++] = h;
    } else if (o.heads[o.head_count - 1] >= H) {
        fprintf(stderr, "vcattn: --heads names head %lld, but the input has %lld heads (0..%lld)\n",
                (long long)o.heads[o.head_count - 1], (long long)H, (long long)(H - 1));
        tensors_free(&t);
        return VC_EXIT_USAGE;
    }
    const int64_t nh = o.head_count;
    /* which query rows: --query-rows n, one in each of n strata (vcattn_stratified_rows: evenly
     * strided rows line up with the frames of some layers); n >= Sq means every row */
    const int sampled = o.query_rows > 0 && o.query_rows < Sq;
    const int64_t nr = sampled ? o.query_rows : Sq;
    const int64_t ntv = (nr + o.tv_stride - 1) / o.tv_stride; /* row TV samples per (batch, head) */

    const int64_t hs[3] = {H * Sq * D, Sq * D, D};   /* strides of Q (and of the full output) */
    const int64_t ks[3] = {H * Skv * D, Skv * D, D}; /* of K and V */
    const int64_t per_head = B * nr * D;             /* evaluated output values of one head */
    const int nm = o.method_count;
    /* --policy: the listed methods with an exact sibling run again with per-head recipes,
     * as rows nm.. (name "METHOD+policy") */
    int pm[VCATTN_METHOD_COUNT], np = 0;
    static const char *const k_recipe_names[VCATTN_RECIPE_COUNT] = {"k-means", "sequence", "k-means+exact-P",
                                                                    "sequence+exact-P"};
    for (int mi = 0; mi < nm && o.policy >= 0; ++mi) {
        vcattn_method_config c, e;
        vcattn_method_config_get((vcattn_method)o.methods[mi], &c);
        if (vcattn_method_exact_p(&c, &e) == VCATTN_STATUS_SUCCESS) pm[np++] = o.methods[mi];
    }
    if (o.policy >= 0 && np == 0) {
        fprintf(stderr, "vcattn: --policy needs a method with an exact sibling among --methods (a V-Smooth method "
                        "whose P is E4M3, ExpCast or the split, e.g. vsmooth-split-blockmax-8bit)\n");
        tensors_free(&t);
        return VC_EXIT_USAGE;
    }
    const int nrows_all = nm + np;
    const int64_t npr = o.policy_rows < Sq ? o.policy_rows : Sq;
    /* heads where the method as designed (recipe 0) does not reach the floor are measured again
     * on more rows (FLOOR only) */
    const int64_t npr2 = o.policy == VCATTN_HEAD_POLICY_FLOOR ? vcattn_head_policy_recheck_rows(npr, Sq) : 0;
    int64_t *prows = np ? (int64_t *)malloc((size_t)(npr + npr2) * sizeof(int64_t)) : NULL;
    int64_t *prows2 = prows ? prows + npr : NULL;
    int32_t *ident = np ? (int32_t *)malloc((size_t)(B * Skv) * sizeof(int32_t)) : NULL;
    uint8_t *recipe = np ? (uint8_t *)calloc((size_t)(np * nh * B), 1) : NULL;
    /* per head, the chosen recipe's measured gain over sage2-8bit and its standard error (dB) */
    double *rgain = np ? (double *)malloc((size_t)(2 * np * nh * B) * sizeof(double)) : NULL;
    double *rse = rgain ? rgain + np * nh * B : NULL;
    uint8_t *exact = np ? (uint8_t *)malloc((size_t)B) : NULL;
    uint8_t *rechecked = np ? (uint8_t *)calloc((size_t)(np * nh * B), 1) : NULL; /* per (method, head, b) */
    float *ref = (float *)malloc((size_t)per_head * sizeof(float));
    float *out = (float *)malloc((size_t)per_head * sizeof(float));
    float *pqv = (float *)malloc((size_t)per_head * sizeof(float));
    int64_t *rows = sampled ? (int64_t *)malloc((size_t)nr * sizeof(int64_t)) : NULL;
    int32_t *perm = (int32_t *)malloc((size_t)(B * Skv) * sizeof(int32_t));
    int32_t *cube = o.have_grid ? (int32_t *)malloc((size_t)Skv * sizeof(int32_t)) : NULL;
    double *tv = (double *)malloc((size_t)(B * ntv) * sizeof(double));
    metric_sums *hsum = (metric_sums *)calloc((size_t)(nrows_all * nh), sizeof(metric_sums));
    double *secs = (double *)calloc((size_t)nrows_all, sizeof(double));
    if (!ref || !out || !pqv || (sampled && !rows) || !perm || (o.have_grid && !cube) || !tv || !hsum || !secs ||
        (np && (!prows || !ident || !recipe || !rgain || !exact || !rechecked))) {
        rc = vc_cli_fail("eval", VCATTN_STATUS_OUT_OF_MEMORY);
        goto done;
    }
    vcattn_status st;
    if (sampled && (st = vcattn_stratified_rows(Sq, nr, rows))) { rc = vc_cli_fail("stratified_rows", st); goto done; }
    if (np && (st = vcattn_stratified_rows(Sq, npr, prows))) { rc = vc_cli_fail("stratified_rows", st); goto done; }
    if (np && npr2 && (st = vcattn_stratified_rows(Sq, npr2, prows2))) { rc = vc_cli_fail("stratified_rows", st); goto done; }
    for (int64_t i = 0; np && i < B * Skv; ++i) ident[i] = (int32_t)(i % Skv);

    progress("vcattn eval: %s, B=%lld H=%lld Sq=%lld Skv=%lld D=%lld\n",
             o.npy[0] ? "captured tensors" : "synthetic video-DiT workload", (long long)B, (long long)H,
             (long long)Sq, (long long)Skv, (long long)D);
    if (sampled) progress("  %lld query rows per head (one in each of %lld strata of %lld rows), each over all %lld keys\n",
                          (long long)nr, (long long)nr, (long long)Sq, (long long)Skv);

    /* V statistics: the block-energy share in three orders, averaged over the evaluated heads */
    double share_sum[3] = {0.0, 0.0, 0.0};
    int have_share[3] = {Skv >= 128, Skv >= 128 && cube != NULL, Skv >= 128};
    if (cube && (st = vcattn_cube_permutation(o.grid[0], o.grid[1], o.grid[2], o.cube[0], o.cube[1], o.cube[2], cube))) {
        rc = vc_cli_fail("cube_permutation", st);
        goto done;
    }

    double t_heads = vc_cli_now_seconds();
    for (int64_t hi = 0; hi < nh; ++hi) {
        const int64_t h = o.heads[hi];
        const float *qh = t.q + h * hs[1], *kh = t.k + h * ks[1], *vh = t.v + h * ks[1];
        double th = vc_cli_now_seconds(), ts;
        progress("head %lld (%lld/%lld):", (long long)h, (long long)(hi + 1), (long long)nh);

        /* this head of every batch item, as a (B, 1, S, D) view; the output is (B, 1, nr, D) */
        vcattn_attention_params p;
        vcattn_attention_params_init(&p, B, 1, Sq, Skv, D, qh, kh, vh, ref);
        memcpy(p.q_stride, hs, sizeof hs);
        memcpy(p.k_stride, ks, sizeof ks);
        memcpy(p.v_stride, ks, sizeof ks);
        p.o_stride[0] = nr * D;
        p.o_stride[1] = nr * D;
        p.o_stride[2] = D;
        p.softmax_scale = o.scale;
        p.num_threads = o.threads;
        ts = vc_cli_now_seconds();
        st = sampled ? vcattn_reference_attention_rows(&p, rows, nr) : vcattn_reference_attention(&p);
        if (st) { progress("\n"); rc = vc_cli_fail("reference", st); goto done; }
        progress(" reference %.1f s", vc_cli_now_seconds() - ts);

        ts = vc_cli_now_seconds();
        /* the plan this head gets in a whole-tensor call (its own seed stream) */
        st = vcattn_vsmooth_plan_heads(vh, B, 1, h, Skv, D, ks, &o.km, perm, NULL, NULL);
        if (st) { progress("\n"); rc = vc_cli_fail("vsmooth_plan", st); goto done; }
        progress(", k-means %.1f s", vc_cli_now_seconds() - ts);
        if (Skv >= 128) {
            double s[3] = {0.0, 0.0, 0.0};
            st = vcattn_block_energy_share(vh, B, 1, Skv, D, ks, NULL, 0, &s[0]);
            if (!st && cube) st = vcattn_block_energy_share(vh, B, 1, Skv, D, ks, cube, 0, &s[1]);
            if (!st) st = vcattn_block_energy_share(vh, B, 1, Skv, D, ks, perm, Skv, &s[2]);
            if (st) { progress("\n"); rc = vc_cli_fail("block_energy_share", st); goto done; }
            for (int i = 0; i < 3; ++i) share_sum[i] += s[i];
        }

        for (int mi = 0; mi < nm; ++mi) {
            vcattn_method m = (vcattn_method)o.methods[mi];
            vcattn_method_config cfg;
            vcattn_method_config_get(m, &cfg);
            p.o = out;
            vcattn_sim_outputs extra = {pqv, tv, o.tv_stride, NULL};
            ts = vc_cli_now_seconds();
            st = sampled ? vcattn_simulate_attention_rows(&p, &cfg, perm, rows, nr, &extra)
                         : vcattn_simulate_attention(&p, &cfg, perm, &extra);
            if (st) { progress("\n"); rc = vc_cli_fail(vcattn_method_name(m), st); goto done; }
            double dt = vc_cli_now_seconds() - ts;
            secs[mi] += dt;
            progress(", %s %.1f s", vcattn_method_name(m), dt);
            metric_sums *s = &hsum[mi * nh + hi];
            if (!sums_add(s, ref, out, pqv, per_head)) {
                /* finite inputs; the simulation reports what it cannot answer, so this is a bug */
                progress("\n");
                fprintf(stderr, "vcattn: %s: the output or the reference is not finite (finite inputs)\n", vcattn_method_name(m));
                rc = 1;
                goto done;
            }
            for (int64_t i = 0; i < B * ntv; ++i) s->tv_sum += tv[i];
            s->tv_n = B * ntv;
        }
        /* the per-head recipes: measured on --policy-rows rows, chosen, then evaluated like a method */
        for (int pi = 0; pi < np; ++pi) {
            vcattn_method m = (vcattn_method)pm[pi];
            vcattn_method_config cfg;
            vcattn_method_config_get(m, &cfg);
            ts = vc_cli_now_seconds();
            const int64_t at = (pi * nh + hi) * B;
            uint8_t *rec = recipe + at;
            st = vc_eval_head_recipes(&p, m, perm, prows, npr, prows2, npr2, (vcattn_head_policy)o.policy,
                                      o.policy_margin_db, o.policy_stderrs, rec, rgain + at, rse + at, rechecked + at);
            if (st) { progress("\n"); rc = vc_cli_fail("head_recipes", st); goto done; }
            /* one (batch, head) view per batch item: its order from the plan or the identity */
            for (int64_t b = 0; b < B; ++b) exact[b] = (rec[b] & VCATTN_RECIPE_EXACT_P) != 0;
            int32_t *order = (int32_t *)malloc((size_t)(B * Skv) * sizeof(int32_t));
            if (!order) { progress("\n"); rc = vc_cli_fail("eval", VCATTN_STATUS_OUT_OF_MEMORY); goto done; }
            for (int64_t b = 0; b < B; ++b)
                memcpy(order + b * Skv, (rec[b] & VCATTN_RECIPE_SEQUENCE ? ident : perm) + b * Skv,
                       (size_t)Skv * sizeof(int32_t));
            p.o = out;
            vcattn_sim_outputs extra = {pqv, tv, o.tv_stride, NULL};
            st = vcattn_simulate_attention_heads(&p, &cfg, order, exact, sampled ? rows : NULL, nr, &extra);
            free(order);
            if (st) { progress("\n"); rc = vc_cli_fail(vcattn_method_name(m), st); goto done; }
            double dt = vc_cli_now_seconds() - ts;
            secs[nm + pi] += dt;
            progress(", %s+policy %.1f s (%s)", vcattn_method_name(m), dt, k_recipe_names[rec[0]]);
            metric_sums *s = &hsum[(nm + pi) * nh + hi];
            if (!sums_add(s, ref, out, pqv, per_head)) {
                progress("\n");
                fprintf(stderr, "vcattn: %s+policy: the output or the reference is not finite (finite inputs)\n",
                        vcattn_method_name(m));
                rc = 1;
                goto done;
            }
            for (int64_t i = 0; i < B * ntv; ++i) s->tv_sum += tv[i];
            s->tv_n = B * ntv;
        }
        double elapsed = vc_cli_now_seconds() - t_heads;
        progress("; head %.1f s, elapsed %.1f s, about %.0f s left\n", vc_cli_now_seconds() - th, vc_cli_now_seconds() - t0,
                 elapsed / (double)(hi + 1) * (double)(nh - hi - 1));
    }

    /* ---- results: all at the end, so that an error never leaves partial JSON ---- */
    double share[3];
    for (int i = 0; i < 3; ++i) share[i] = have_share[i] ? share_sum[i] / (double)nh : -1.0;
    if (o.json) {
        char nb[3][32];
        for (int mi = 0; mi < nrows_all; ++mi) {
            metric_sums all;
            memset(&all, 0, sizeof all);
            for (int64_t hi = 0; hi < nh; ++hi) sums_merge(&all, &hsum[mi * nh + hi]);
            metric_values mv = sums_finish(&all);
            if (mi < nm)
                printf("{\"method\": \"%s\", ", vcattn_method_name((vcattn_method)o.methods[mi]));
            else
                printf("{\"method\": \"%s+policy\", \"policy\": \"%s\", \"policy_rows\": %lld, "
                       "\"policy_recheck_rows\": %lld, ", vcattn_method_name((vcattn_method)pm[mi - nm]),
                       o.policy == 0 ? "floor" : o.policy == 1 ? "fastest" : "faithful", (long long)npr,
                       (long long)npr2);
            print_json_metrics(&mv);
            printf(", \"block_energy_share_sequence\": %s, \"block_energy_share_cube\": %s, "
                   "\"block_energy_share_clustered\": %s, \"seconds\": %.2f, "
                   "\"shape\": [%lld, %lld, %lld, %lld], \"seq_kv\": %lld, \"query_rows\": %lld, "
                   "\"query_row_rule\": \"%s\", \"row_tv_rows\": %lld, \"evaluated_heads\": [",
                   json_num(nb[0], 32, share[0], 4), json_num(nb[1], 32, share[1], 4),
                   json_num(nb[2], 32, share[2], 4), secs[mi], (long long)B, (long long)H, (long long)Sq,
                   (long long)D, (long long)Skv, (long long)nr, sampled ? "stratified" : "all",
                   (long long)ntv);
            print_head_list(stdout, o.heads, nh);
            printf("], \"heads\": [");
            for (int64_t hi = 0; hi < nh; ++hi) {
                metric_values hv = sums_finish(&hsum[mi * nh + hi]);
                printf("%s{\"head\": %lld, ", hi ? ", " : "", (long long)o.heads[hi]);
                if (mi >= nm) {
                    const int64_t at = ((mi - nm) * nh + hi) * B;
                    char nbuf[32];
                    printf("\"recipes\": [");
                    for (int64_t b = 0; b < B; ++b) printf("%s\"%s\"", b ? ", " : "", k_recipe_names[recipe[at + b]]);
                    printf("], \"recipe_gain_db\": [");
                    for (int64_t b = 0; b < B; ++b)
                        printf("%s%s", b ? ", " : "", json_signed(nbuf, sizeof nbuf, rgain[at + b], 4));
                    printf("], \"recipe_stderr_db\": [");
                    for (int64_t b = 0; b < B; ++b)
                        printf("%s%s", b ? ", " : "", json_signed(nbuf, sizeof nbuf, rse[at + b], 4));
                    printf("], \"recipe_rechecked\": [");
                    for (int64_t b = 0; b < B; ++b) printf("%s%s", b ? ", " : "", rechecked[at + b] ? "true" : "false");
                    printf("], ");
                }
                print_json_metrics(&hv);
                printf("}");
            }
            printf("]}\n");
        }
    } else {
        printf("evaluated: heads ");
        print_head_list(stdout, o.heads, nh);
        printf(" of %lld; ", (long long)H);
        if (sampled)
            printf("%lld of %lld query rows per head (one per stratum, vcattn_stratified_rows), each over all %lld keys\n",
                   (long long)nr, (long long)Sq, (long long)Skv);
        else
            printf("all %lld query rows per head, over all %lld keys\n", (long long)Sq, (long long)Skv);
        printf("mean_row_tv over %lld evaluated rows per head and batch item (--tv-stride %lld)\n",
               (long long)ntv, (long long)o.tv_stride);
        printf("V block-energy share removed by the 128-token block mean:");
        for (int i = 0; i < 3; ++i)
            if (share[i] >= 0.0) printf(" %s %.1f%%", k_order_names[i], 100.0 * share[i]);
            else printf(" %s n/a", k_order_names[i]);
        printf("\n\n%-34s %5s %9s %10s %8s %19s %12s %18s %11s\n", "method", "head", "rel_l2", "cosine",
               "psnr_db", "value_error_share", "value_rel_l2", "probability_rel_l2", "mean_row_tv");
        for (int mi = 0; mi < nrows_all; ++mi) {
            char pname[64];
            snprintf(pname, sizeof pname, "%s+policy", vcattn_method_name((vcattn_method)pm[mi < nm ? 0 : mi - nm]));
            const char *name = mi < nm ? vcattn_method_name((vcattn_method)o.methods[mi]) : pname;
            metric_sums all;
            memset(&all, 0, sizeof all);
            for (int64_t hi = 0; hi < nh; ++hi) {
                sums_merge(&all, &hsum[mi * nh + hi]);
                if (nh > 1) {
                    char hb[24];
                    snprintf(hb, sizeof hb, "%lld", (long long)o.heads[hi]);
                    metric_values hv = sums_finish(&hsum[mi * nh + hi]);
                    print_table_row(name, hb, &hv);
                }
            }
            metric_values mv = sums_finish(&all);
            print_table_row(name, "all", &mv);
        }
        for (int pi = 0; pi < np; ++pi) {
            printf("\n%s+policy (%s, %lld rows measured per head", vcattn_method_name((vcattn_method)pm[pi]),
                   o.policy == 0 ? "floor" : o.policy == 1 ? "fastest" : "faithful", (long long)npr);
            if (npr2) printf("; %lld for a head whose method as designed did not reach the floor, marked *", (long long)npr2);
            printf("): recipe per head (its gain over sage2-8bit on those rows, dB, and that gain's standard error)");
            for (int64_t hi = 0; hi < nh; ++hi)
                for (int64_t b = 0; b < B; ++b) {
                    const int64_t at = (pi * nh + hi) * B + b;
                    if (B > 1)
                        printf("%s%lld/b%lld %s", hi + b ? ", " : " ", (long long)o.heads[hi], (long long)b,
                               k_recipe_names[recipe[at]]);
                    else
                        printf("%s%lld %s", hi ? ", " : " ", (long long)o.heads[hi], k_recipe_names[recipe[at]]);
                    printf("%s (%+.2f, se %.2f)", rechecked[at] ? "*" : "", rgain[at], rse[at]);
                }
            printf("\n");
        }
    }
    fflush(stdout);
    progress("done in %.1f s\n", vc_cli_now_seconds() - t0);
done:
    free(ref);
    free(out);
    free(pqv);
    free(rows);
    free(perm);
    free(cube);
    free(tv);
    free(hsum);
    free(secs);
    free(prows);
    free(ident);
    free(recipe);
    free(rgain);
    free(rechecked);
    free(exact);
    tensors_free(&t);
    return rc;
}

