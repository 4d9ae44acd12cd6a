/* cli_args.h - argument parsing shared by the subcommands of the vcattn tool. */
#ifndef VCATTN_CLI_ARGS_H
#define VCATTN_CLI_ARGS_H

#include <stdint.h>

/* Strict integer parse: the whole string, no overflow, in [lo, hi]; 1 on success. */
int vc_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
