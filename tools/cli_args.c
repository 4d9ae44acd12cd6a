/* cli_args.c - argument parsing shared by the subcommands of the vcattn tool. */
#include "cli_args.h"

#include <errno.h>
#include <stdlib.h>

int vc_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0; /* strtoll saturates on overflow and says so only in errno */
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}
