/* cli_args.h - what the subcommands of the vcattn tool share: argument parsing,
 * error messages, the clock, and the subcommands themselves. */
#ifndef VCATTN_CLI_ARGS_H
#define VCATTN_CLI_ARGS_H

#include <stdint.h>

#include "vcattn.h"

#define VC_EXIT_USAGE 2 /* exit codes: 0 success, 1 a library call failed, 2 bad usage */

/* Strict integer parse: the whole string, no overflow, in [lo, hi]; 1 on success. */
int vc_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* An integer option: `val` parsed strictly into [lo, hi]; on failure prints
 * "vcattn: <name> wants <what> in [lo, hi], got '<val>'" and the --help pointer
 * on stderr (the range says what is valid; INT64_MAX as hi prints ">= lo").
 * Returns 0 on success, VC_EXIT_USAGE on failure. */
int vc_cli_int_option(const char *command, const char *name, const char *what, const char *val, int64_t lo,
                      int64_t hi, int64_t *out);
/* "vcattn: <what>: <status string>" on stderr; returns 1. */
int vc_cli_fail(const char *what, vcattn_status st);
/* "vcattn: <fmt with arg>" and "(see 'vcattn <command> --help')" on stderr; returns VC_EXIT_USAGE. */
int vc_cli_usage_error(const char *command, const char *fmt, const char *arg);
/* Monotonic seconds, for progress and timings. */
double vc_cli_now_seconds(void);

/* the subcommands */
int vc_cmd_eval(int argc, char **argv);
int vc_cmd_numerics(int argc, char **argv);
int vcattn_cmd_workload(int argc, char **argv);

#endif
