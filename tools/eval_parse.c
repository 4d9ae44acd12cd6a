/* eval_parse.c - `vcattn eval`'s usage text and its parse-only function
 * (cli_parse.h): argv in, the options or a usage status out, no work done. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_parse.h"
#include "vcattn.h"

static const char *k_eval_usage =
    "usage: vcattn eval [options]\n"
    "\n"
    "Runs the FP64 reference and the CPU simulation of each method (the kernel's\n"
    "tiling and rounding) and reports, per head and over all evaluated heads:\n"
    "rel_l2, cosine, psnr_db, the error budget of eq. (2) (value_rel_l2,\n"
    "probability_rel_l2, value_error_share), mean_row_tv (mean per-row total\n"
    "variation of the probabilities), and the V block-energy share the block mean\n"
    "removes in sequence, 3-D cube and k-means (clustered) order.\n"
    "\n"
    "input (default: the built-in synthetic video-DiT workload, see docs/workload.md):\n"
    "  --npy Q.npy K.npy V.npy   captured tensors, (B,H,S,D) float32/float16/bfloat16;\n"
    "                            K and V alike, Q may have another S (Sq != Skv)\n"
    "  --grid T,H,W              token grid of the K/V sequence (enables cube order)\n"
    "  --workload-heads N        heads of the built-in workload (default 2, or enough\n"
    "                            for the --heads selection)\n"
    "  --frames T --height H --width W   workload grid (default 8 x 32 x 32 = 8192 tokens;\n"
    "                            T*H*W at most 2147483647)\n"
    "  --head-dim D              64 or 128 (default 128)\n"
    "  --seed N                  workload and k-means seed (default 1)\n"
    "what to evaluate:\n"
    "  --heads LIST              heads to evaluate, like 0,5,17 or 0-3,8 (default: all)\n"
    "  --query-rows N            N query rows per head, one in each of N equal strata\n"
    "                            of the sequence at a fixed hashed offset (rows that\n"
    "                            cannot line up with frames), each exactly over all keys (the\n"
    "                            same outputs as those rows of a full run); N >= Sq:\n"
    "                            every row (the default)\n"
    "methods:\n"
    "  --methods a,b,...         from: fp8-naive, sage2-8bit, vsmooth-8bit,\n"
    "                            vsmooth-expcast-8bit, sage3-4bit, vsmooth-4bit,\n"
    "                            vsmooth-blockmax-8bit,\n"
    "                            vsmooth-split-blockmax-8bit (default: all)\n"
    "  --clusters K              k-means clusters for V-Smooth, 1..65536 (default 64)\n"
    "  --iterations N            k-means iterations, 1..1000 (default 8)\n"
    "  --cube T,H,W              cube size of the static 3-D order (default 2,8,8)\n"
    "  --scale X                 softmax scale, a finite number > 0 (default 1/sqrt(D))\n"
    "  --policy P                floor | fastest | faithful: also run every listed method\n"
    "                            that has an exact sibling with per-head recipes (k-means\n"
    "                            or sequence order, the method's or the exact P), chosen\n"
    "                            per head as a vcattn.Plan does (docs/method.md, \"Per-head\n"
    "                            recipes\"); rows \"METHOD+policy\", and per head the\n"
    "                            recipe, its measured gain over sage2-8bit and that gain's\n"
    "                            standard error\n"
    "  --policy-rows N           query rows the policy measures per head, 1..2^30\n"
    "                            (default 512; under floor, a head whose method as\n"
    "                            designed does not reach the floor is measured again\n"
    "                            on 4x as many, marked * in the report)\n"
    "  --policy-margin DB        the floor policy's margin over sage2-8bit, dB, -10..10,\n"
    "                            besides two standard errors of each recipe's measured\n"
    "                            gain (default 0)\n"
    "output:\n"
    "  --json                    one JSON object per method on stdout, with a \"heads\"\n"
    "                            array (schema: docs/eval-json.md); printed at the end\n"
    "  --tv-stride N             mean_row_tv over every N-th evaluated row, 1..2^30\n"
    "                            (default 16)\n"
    "  --threads N               CPU threads, 0..1024 (default 0: all cores)\n"
    "  --quiet                   no progress on stderr (progress: per head, with the\n"
    "                            elapsed time and an estimate of the time left)\n"
    "\n"
    "Exit codes: 0 success, 1 a library call or an input failed, 2 bad usage.\n";

#define MAX_SEQ VC_EVAL_MAX_SEQ
#define MAX_SELECTED_HEADS VC_EVAL_MAX_SELECTED_HEADS
typedef vc_eval_options eval_options;

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
        /* a method named twice would be evaluated twice, and an eighth name
         * would have been dropped silently: refuse it instead */
        for (int j = 0; j < o->method_count; ++j)
            if (o->methods[j] == (int)m) {
                fprintf(stderr, "vcattn: method '%s' is listed twice\n", tok);
                return 0;
            }
        o->methods[o->method_count++] = (int)m;
    }
    return o->method_count > 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* "0,5,17" or with ranges "0-3,8": head indices, sorted; 0 on a syntax error,
 * a duplicate or more than MAX_SELECTED_HEADS heads. */
static int parse_heads(const char *list, eval_options *o) {
    const char *s = list;
    o->head_count = 0;
    for (;;) {
        char *end;
        if (*s < '0' || *s > '9') return 0;
        long long a = strtoll(s, &end, 10), b = a;
        if (*end == '-') {
            if (end[1] < '0' || end[1] > '9') return 0;
            b = strtoll(end + 1, &end, 10);
        }
        if (a < 0 || b < a || b > (1 << 20) || b - a >= MAX_SELECTED_HEADS - o->head_count) return 0;
        for (long long h = a; h <= b; ++h) o->heads[o->head_count++] = h;
        if (*end == '\0') break;
        if (*end != ',') return 0;
        s = end + 1;
    }
    qsort(o->heads, (size_t)o->head_count, sizeof o->heads[0], cmp_i64);
    for (int64_t i = 1; i < o->head_count; ++i)
        if (o->heads[i] == o->heads[i - 1]) return 0;
    return 1;
}

/* Exactly three integers in [1, 2^20] separated by ',' or 'x' (no empty
 * fields, no sign, nothing after). */
static int parse_triple(const char *s, int64_t out[3]) {
    if (!s) return 0;
    for (int i = 0; i < 3; ++i) {
        if (*s < '0' || *s > '9') return 0;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (v < 1 || v > (1 << 20)) return 0;
        out[i] = v;
        if (i < 2 && *end != ',' && *end != 'x') return 0;
        if (i == 2 && *end != '\0') return 0;
        s = end + 1;
    }
    return 1;
}

/* The options that take a value (the flags and --npy are handled before). */
static int takes_value(const char *a) {
    static const char *const k_names[] = {"--grid", "--cube", "--methods", "--heads", "--query-rows",
                                          "--workload-heads", "--frames", "--height", "--width", "--head-dim",
                                          "--seed", "--clusters", "--iterations", "--tv-stride", "--threads",
                                          "--scale", "--policy", "--policy-rows", "--policy-margin"};
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; ++i)
        if (!strcmp(a, k_names[i])) return 1;
    return 0;
}

int vc_eval_parse(int argc, char **argv, eval_options *o) {
    memset(o, 0, sizeof *o);
    vcattn_workload_params_init(&o->wl);
    vcattn_kmeans_params_init(&o->km);
    o->cube[0] = 2;
    o->cube[1] = 8;
    o->cube[2] = 8;
    o->tv_stride = 16;
    o->policy = -1;
    vcattn_head_policy_defaults(&o->policy_rows, &o->policy_margin_db, &o->policy_stderrs);
    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) o->methods[m] = m;
    o->method_count = VCATTN_METHOD_COUNT;
    for (int i = 0; i < argc; ++i) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        int rc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(k_eval_usage, stdout);
            return VC_PARSE_HELP;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (!strcmp(a, "--npy")) {
            /* three file names, none of them an option: "--npy q k --json"
             * must not read "--json" as V */
            int got = 0;
            while (got < 3 && i + 1 + got < argc && strncmp(argv[i + 1 + got], "--", 2) != 0) ++got;
            if (got < 3) {
                fprintf(stderr, "vcattn: --npy needs three files, Q.npy K.npy V.npy; got %d%s%s%s\n"
                        "(see 'vcattn eval --help')\n", got,
                        i + 1 + got < argc ? " before '" : "", i + 1 + got < argc ? argv[i + 1 + got] : "",
                        i + 1 + got < argc ? "'" : "");
                return VC_EXIT_USAGE;
            }
            for (int k = 0; k < 3; ++k) o->npy[k] = argv[++i];
        } else if (a[0] != '-') {
            /* a word where an option belongs: not "an option without its value" */
            return vc_cli_usage_error("eval", "unexpected argument '%s': vcattn eval takes only options "
                                      "(captured tensors go after --npy)", a);
        } else if (!takes_value(a)) {
            return vc_cli_usage_error("eval", "unknown option '%s'", a);
        } else if (!val) {
            return vc_cli_usage_error("eval", "option '%s' needs a value", a);
        } else if (!strcmp(a, "--grid")) {
            if (!parse_triple(val, o->grid))
                return vc_cli_usage_error("eval", "--grid wants three positive integers T,H,W in [1, 1048576] "
                                   "(e.g. 21,45,80), got '%s'", val);
            o->have_grid = 1;
            ++i;
        } else if (!strcmp(a, "--cube")) {
            if (!parse_triple(val, o->cube))
                return vc_cli_usage_error("eval", "--cube wants three positive integers T,H,W in [1, 1048576] "
                                   "(e.g. 2,8,8), got '%s'", val);
            ++i;
        } else if (!strcmp(a, "--methods")) {
            if (!parse_methods(val, o))
                return vc_cli_usage_error("eval", "bad --methods list '%s': distinct names separated by ',' "
                                          "(vcattn eval --help lists them)", val);
            ++i;
        } else if (!strcmp(a, "--heads")) {
            if (!parse_heads(val, o))
                return vc_cli_usage_error("eval", "--heads wants distinct head indices in [0, 1048576] (at most "
                                          "4096 of them), like 0,5,17 or 0-3,8, got '%s'", val);
            ++i;
        } else if (!strcmp(a, "--query-rows")) {
            if ((rc = vc_cli_int_option("eval", a, "a row count", val, 1, MAX_SEQ, &o->query_rows))) return rc;
            ++i;
        } else if (!strcmp(a, "--workload-heads") || !strcmp(a, "--frames") || !strcmp(a, "--height") ||
                   !strcmp(a, "--width")) {
            if ((rc = vc_cli_int_option("eval", a, "an integer", val, 1, MAX_SEQ, &n))) return rc;
            if (!strcmp(a, "--workload-heads")) {
                o->wl.heads = n;
                o->workload_heads_set = 1;
            } else if (!strcmp(a, "--frames")) o->wl.frames = n;
            else if (!strcmp(a, "--height")) o->wl.height = n;
            else o->wl.width = n;
            ++i;
        } else if (!strcmp(a, "--head-dim")) {
            /* any size parses; the library answers UNSUPPORTED_HEAD_DIM (exit 1) for other than 64, 128 */
            if (!vc_cli_parse_i64(val, 1, 1 << 20, &n))
                return vc_cli_usage_error("eval", "--head-dim wants 64 or 128, got '%s'", val);
            o->wl.head_dim = n;
            ++i;
        } else if (!strcmp(a, "--seed")) {
            if ((rc = vc_cli_int_option("eval", a, "an integer", val, 0, INT64_MAX, &n))) return rc;
            o->wl.seed = (uint64_t)n;
            o->km.seed = (uint64_t)n;
            ++i;
        } else if (!strcmp(a, "--clusters")) {
            if ((rc = vc_cli_int_option("eval", a, "a k-means cluster count", val, 1, 1 << 16, &n))) return rc;
            o->km.clusters = (int)n;
            ++i;
        } else if (!strcmp(a, "--iterations")) {
            if ((rc = vc_cli_int_option("eval", a, "a k-means iteration count", val, 1, 1000, &n))) return rc;
            o->km.iterations = (int)n;
            ++i;
        } else if (!strcmp(a, "--tv-stride")) {
            if ((rc = vc_cli_int_option("eval", a, "a row stride", val, 1, 1 << 30, &o->tv_stride))) return rc;
            ++i;
        } else if (!strcmp(a, "--threads")) {
            if ((rc = vc_cli_int_option("eval", a, "a thread count (0: all cores)", val, 0, VC_EVAL_MAX_THREADS,
                                        &n)))
                return rc;
            o->threads = (int)n;
            ++i;
        } else if (!strcmp(a, "--policy")) {
            static const char *const k_policies[VCATTN_HEAD_POLICY_COUNT] = {"floor", "fastest", "faithful"};
            o->policy = -1;
            for (int k = 0; k < VCATTN_HEAD_POLICY_COUNT; ++k)
                if (!strcmp(val, k_policies[k])) o->policy = k;
            if (o->policy < 0)
                return vc_cli_usage_error("eval", "--policy wants floor, fastest or faithful, got '%s'", val);
            ++i;
        } else if (!strcmp(a, "--policy-rows")) {
            if ((rc = vc_cli_int_option("eval", a, "a row count", val, 1, 1 << 30, &o->policy_rows))) return rc;
            ++i;
        } else if (!strcmp(a, "--policy-margin")) {
            char *end;
            o->policy_margin_db = strtod(val, &end);
            if (end == val || *end || !(o->policy_margin_db >= -10.0 && o->policy_margin_db <= 10.0))
                return vc_cli_usage_error("eval", "--policy-margin wants a number of dB in -10..10, got '%s'", val);
            ++i;
        } else if (!strcmp(a, "--scale")) {
            char *end;
            o->scale = strtod(val, &end);
            if (end == val || *end || !(o->scale > 0.0) || !isfinite(o->scale))
                return vc_cli_usage_error("eval", "--scale wants a finite number > 0 (e.g. 0.0884 for "
                                          "1/sqrt(128)), got '%s'", val);
            ++i;
        } else {
            return vc_cli_usage_error("eval", "unknown option '%s'", a);
        }
    }
    o->km.num_threads = o->threads;
    /* the workload holds every selected head unless told its head count */
    if (!o->npy[0] && !o->workload_heads_set && o->head_count > 0 && o->heads[o->head_count - 1] >= o->wl.heads)
        o->wl.heads = o->heads[o->head_count - 1] + 1;
    return 0;
}
