/* vcattn - command-line tool: the dispatch to its subcommands (eval_cmd.c,
 * numerics_cmd.c, workload_cmd.c; what they share is in cli_args.c).
 *
 * Exit codes: 0 success, 1 a library call failed, 2 bad usage. */
#include <stdio.h>
#include <string.h>

#include "cli_args.h"
#include "vcattn.h"

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

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(k_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? VC_EXIT_USAGE : 0;
    }
    if (!strcmp(argv[1], "eval")) return vc_cmd_eval(argc - 2, argv + 2);
    if (!strcmp(argv[1], "numerics")) return vc_cmd_numerics(argc - 2, argv + 2);
    if (!strcmp(argv[1], "workload")) return vcattn_cmd_workload(argc - 2, argv + 2);
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("vcattn %s\n", vcattn_version_string());
        return 0;
    }
    fprintf(stderr, "vcattn: unknown command '%s'\n%s", argv[1], k_usage);
    return VC_EXIT_USAGE;
}
