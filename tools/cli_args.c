/* cli_args.c - what the subcommands of the vcattn tool share: argument parsing,
 * error messages, the clock. */
#define _POSIX_C_SOURCE 200809L
#include "cli_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int vc_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0; /* strtoll saturates on overflow and says so only in errno */
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int vc_cli_int_option(const char *command, const char *name, const char *what, const char *val, int64_t lo,
                      int64_t hi, int64_t *out) {
    if (vc_cli_parse_i64(val, lo, hi, out)) return 0;
    if (hi == INT64_MAX)
        fprintf(stderr, "vcattn: %s wants %s >= %lld, got '%s'\n", name, what, (long long)lo, val ? val : "");
    else
        fprintf(stderr, "vcattn: %s wants %s in [%lld, %lld], got '%s'\n", name, what, (long long)lo,
                (long long)hi, val ? val : "");
    fprintf(stderr, "(see 'vcattn %s --help')\n", command);
    return VC_EXIT_USAGE;
}

int vc_cli_fail(const char *what, vcattn_status st) {
    fprintf(stderr, "vcattn: %s: %s\n", what, vcattn_status_string(st));
    return 1;
}

int vc_cli_usage_error(const char *command, const char *fmt, const char *arg) {
    fprintf(stderr, "vcattn: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see 'vcattn %s --help')\n", command);
    return VC_EXIT_USAGE;
}

double vc_cli_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
