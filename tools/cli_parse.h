/* cli_parse.h - the parse-only half of each vcattn subcommand: argv in, the
 * options (or a usage status) out, no work done.  The subcommands call these
 * before they run; fuzz/fuzz_cli.c calls them alone.
 *
 * Return values: 0 parsed (run with the options); VC_PARSE_HELP: --help was
 * printed on stdout (the tool exits 0); VC_EXIT_USAGE: a usage error, whose
 * cause is printed on stderr.  They never exit and never read past argv[argc - 1]. */
#ifndef VCATTN_CLI_PARSE_H
#define VCATTN_CLI_PARSE_H

#include <stdint.h>

#include "vcattn.h"

#define VC_PARSE_HELP (-1)

/* Largest sequence the library takes (vcattn_attention_params_validate). */
#define VC_EVAL_MAX_SEQ INT32_MAX
/* Largest --threads (the library's limit on num_threads, src/params.c). */
#define VC_EVAL_MAX_THREADS 1024
/* Largest --heads list. */
#define VC_EVAL_MAX_SELECTED_HEADS 4096

typedef struct vc_eval_options {
    const char *npy[3];
    int64_t grid[3];
    int have_grid;
    int64_t cube[3];
    vcattn_workload_params wl;
    int workload_heads_set;
    int methods[VCATTN_METHOD_COUNT]; /* distinct */
    int method_count;
    vcattn_kmeans_params km;
    double scale; /* 0: the default 1/sqrt(D) */
    int json;
    int quiet;
    int64_t tv_stride;
    int threads;
    int64_t query_rows; /* 0: every row */
    int64_t heads[VC_EVAL_MAX_SELECTED_HEADS]; /* strictly ascending */
    int64_t head_count; /* 0: every head */
    int policy;          /* -1: none; else a vcattn_head_policy: the per-head recipes, as extra rows */
    int64_t policy_rows; /* query rows the policy measures per head */
    double policy_margin_db; /* over the host recipe, for the floor policy */
    double policy_stderrs;   /* standard errors of a recipe's measured gain it must clear too */
} vc_eval_options;

int vc_eval_parse(int argc, char **argv, vc_eval_options *o);

typedef struct vc_numerics_options {
    int json;
    int64_t samples; /* per doubling, [16, 1e8] */
} vc_numerics_options;

int vc_numerics_parse(int argc, char **argv, vc_numerics_options *o);

typedef struct vc_workload_options {
    const char *preset, *out; /* out NULL with write = 0 */
    vcattn_workload_params wl; /* the preset with --heads, --seed, --frames applied */
    int64_t stats_rows;
    int stats, write, quiet;
} vc_workload_options;

int vc_workload_parse(int argc, char **argv, vc_workload_options *o);

#endif
