/* fuzz_cli.c - libFuzzer harness of the vcattn CLI's argument parsing.
 *
 * The first byte picks the subcommand (eval, numerics, workload); the rest,
 * split at NUL bytes, is its argv (each argument in a buffer of its exact
 * size, so ASan sees any read past one, and argv[argc] = NULL as in main).
 * Only the parse-only functions run (tools/cli_parse.h): no tensor is loaded
 * or generated.  What they print goes to memory streams, so that:
 *  - 0 (parsed): nothing printed, and the options are in their documented
 *    ranges (distinct methods, ascending distinct heads, positive sizes...);
 *  - VC_PARSE_HELP: --help or -h was given, and the usage went to stdout;
 *  - VC_EXIT_USAGE: a cause was printed on stderr, nothing on stdout;
 *  - parsing the same argv twice gives the same options (no hidden state). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_parse.h"
#include "vcattn.h"

#define REQUIRE(c)                                                                             \
    do {                                                                                       \
        if (!(c)) fuzz_fail(__LINE__, #c);                                                     \
    } while (0)

static FILE *g_real_stderr;

static void fuzz_fail(int line, const char *what) {
    fprintf(g_real_stderr ? g_real_stderr : stderr, "fuzz_cli.c:%d: invariant broken: %s\n", line, what);
    abort();
}

enum { MAX_ARGS = 64 };

typedef struct {
    int rc;
    long out_len, err_len;
} parse_result;

typedef int (*parse_fn)(int argc, char **argv, void *opts);

static int eval_parse(int argc, char **argv, void *o) { return vc_eval_parse(argc, argv, (vc_eval_options *)o); }
static int numerics_parse(int argc, char **argv, void *o) {
    return vc_numerics_parse(argc, argv, (vc_numerics_options *)o);
}
static int workload_parse(int argc, char **argv, void *o) {
    return vc_workload_parse(argc, argv, (vc_workload_options *)o);
}

/* Runs one parse with stdout and stderr captured (glibc's stdout/stderr are
 * plain variables; the harness is single-threaded). */
static parse_result run_parse(parse_fn fn, int argc, char **argv, void *opts) {
    static char out_buf[1 << 15], err_buf[1 << 15];
    parse_result r = {0, 0, 0};
    FILE *out = fmemopen(out_buf, sizeof out_buf, "w"), *err = fmemopen(err_buf, sizeof err_buf, "w");
    REQUIRE(out && err);
    FILE *saved_out = stdout, *saved_err = stderr;
    g_real_stderr = saved_err;
    stdout = out;
    stderr = err;
    r.rc = fn(argc, argv, opts);
    stdout = saved_out;
    stderr = saved_err;
    fflush(out);
    fflush(err);
    r.out_len = ftell(out);
    r.err_len = ftell(err);
    fclose(out);
    fclose(err);
    return r;
}

static int has_arg(int argc, char **argv, const char *a) {
    for (int i = 0; i < argc; ++i)
        if (!strcmp(argv[i], a)) return 1;
    return 0;
}

static int is_argv_string(const char *s, int argc, char **argv) {
    for (int i = 0; i < argc; ++i)
        if (s == argv[i]) return 1;
    return 0;
}

static void check_eval(const vc_eval_options *o, int argc, char **argv) {
    REQUIRE(o->method_count >= 1 && o->method_count <= VCATTN_METHOD_COUNT);
    for (int i = 0; i < o->method_count; ++i) {
        REQUIRE(vcattn_method_name((vcattn_method)o->methods[i]) != NULL);
        for (int j = 0; j < i; ++j) REQUIRE(o->methods[i] != o->methods[j]);
    }
    REQUIRE(o->head_count >= 0 && o->head_count <= VC_EVAL_MAX_SELECTED_HEADS);
    for (int64_t i = 0; i < o->head_count; ++i) {
        REQUIRE(o->heads[i] >= 0 && o->heads[i] <= (1 << 20));
        if (i) REQUIRE(o->heads[i] > o->heads[i - 1]);
    }
    for (int i = 0; i < 3; ++i) {
        REQUIRE(o->cube[i] >= 1 && o->cube[i] <= (1 << 20));
        if (o->have_grid) REQUIRE(o->grid[i] >= 1 && o->grid[i] <= (1 << 20));
        /* --npy: all three or none, each an argument that is not an option */
        REQUIRE((o->npy[i] != NULL) == (o->npy[0] != NULL));
        if (o->npy[i]) REQUIRE(is_argv_string(o->npy[i], argc, argv) && strncmp(o->npy[i], "--", 2) != 0);
    }
    REQUIRE(o->tv_stride >= 1 && o->tv_stride <= (1 << 30));
    REQUIRE(o->threads >= 0 && o->threads <= 1024 && o->km.num_threads == o->threads);
    REQUIRE(o->scale == 0.0 || (o->scale > 0.0 && isfinite(o->scale)));
    REQUIRE(o->query_rows >= 0 && o->query_rows <= VC_EVAL_MAX_SEQ);
    REQUIRE(o->km.clusters >= 1 && o->km.clusters <= (1 << 16));
    REQUIRE(o->km.iterations >= 1 && o->km.iterations <= 1000);
    REQUIRE(o->wl.heads >= 1 && o->wl.heads <= (int64_t)VC_EVAL_MAX_SEQ + 1);
    REQUIRE(o->wl.frames >= 1 && o->wl.height >= 1 && o->wl.width >= 1);
    REQUIRE(o->wl.frames <= VC_EVAL_MAX_SEQ && o->wl.height <= VC_EVAL_MAX_SEQ && o->wl.width <= VC_EVAL_MAX_SEQ);
    REQUIRE(o->wl.head_dim >= 1 && o->wl.head_dim <= (1 << 20));
    /* the built-in workload holds every selected head unless told otherwise */
    if (!o->npy[0] && !o->workload_heads_set && o->head_count)
        REQUIRE(o->heads[o->head_count - 1] < o->wl.heads);
}

static void check_workload(const vc_workload_options *o) {
    vcattn_workload_params p;
    REQUIRE(o->preset && vcattn_workload_preset(o->preset, &p) == VCATTN_STATUS_SUCCESS);
    REQUIRE(!o->write || o->out);
    REQUIRE(o->write || o->stats);
    REQUIRE(o->stats_rows >= 1 && o->stats_rows <= 1000000);
    REQUIRE(o->wl.heads >= 1 && o->wl.heads <= 4096);
    REQUIRE(o->wl.frames >= 1 && o->wl.frames <= 100000);
    REQUIRE(o->wl.height == p.height && o->wl.width == p.width && o->wl.head_dim == p.head_dim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const int which = data[0] % 3;
    ++data;
    --size;
    /* argv: the rest split at NUL; each argument in its own exact-size buffer */
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && argc < MAX_ARGS; ++i) {
        if (i == size || data[i] == '\0') {
            if (i == size && i == start && argc > 0) break; /* no empty argument after a final NUL */
            size_t n = i - start;
            char *a = (char *)malloc(n + 1);
            REQUIRE(a != NULL);
            memcpy(a, data + start, n);
            a[n] = '\0';
            argv[argc++] = a;
            start = i + 1;
        }
    }
    argv[argc] = NULL;

    static vc_eval_options e1, e2;
    static vc_numerics_options n1, n2;
    static vc_workload_options w1, w2;
    static const parse_fn fns[3] = {eval_parse, numerics_parse, workload_parse};
    void *o1[3] = {&e1, &n1, &w1}, *o2[3] = {&e2, &n2, &w2};
    const size_t sizes[3] = {sizeof e1, sizeof n1, sizeof w1};
    /* garbage first: the parse must set every field it hands back */
    memset(o1[which], 0xA5, sizes[which]);
    memset(o2[which], 0x5A, sizes[which]);
    parse_result r = run_parse(fns[which], argc, argv, o1[which]);
    REQUIRE(r.rc == 0 || r.rc == VC_PARSE_HELP || r.rc == VC_EXIT_USAGE);
    if (r.rc == VC_PARSE_HELP) {
        REQUIRE(has_arg(argc, argv, "--help") || has_arg(argc, argv, "-h"));
        REQUIRE(r.out_len > 0 && r.err_len == 0);
    } else if (r.rc == VC_EXIT_USAGE) {
        REQUIRE(r.err_len > 0 && r.out_len == 0); /* the cause, on stderr */
    } else {
        REQUIRE(r.out_len == 0 && r.err_len == 0);
        if (which == 0) check_eval(&e1, argc, argv);
        if (which == 1) REQUIRE(n1.samples >= 16 && n1.samples <= 100000000 && (n1.json == 0 || n1.json == 1));
        if (which == 2) check_workload(&w1);
    }
    parse_result r2 = run_parse(fns[which], argc, argv, o2[which]);
    REQUIRE(r2.rc == r.rc && r2.out_len == r.out_len && r2.err_len == r.err_len);
    /* eval and workload clear their options first, so even padding matches */
    if (r.rc == 0 && which != 1) REQUIRE(memcmp(o1[which], o2[which], sizes[which]) == 0);
    if (r.rc == 0 && which == 1) REQUIRE(n1.json == n2.json && n1.samples == n2.samples);
    for (int i = 0; i < argc; ++i) free(argv[i]);
    return 0;
}
