/* numerics_cmd.c - `vcattn numerics`: the ExpCast facts and the underflow tail
 * of each P path, measured on the shared numerics. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "cli_parse.h"
#include "vcattn.h"
#include "vcattn_research.h"
#include "numerics.h"
#include "tiling.h"

static const char *k_numerics_usage =
    "usage: vcattn numerics [--json] [--samples N]\n"
    "\n"
    "Measures, with the library's own E4M3 and ExpCast code, over u = (s - m) log2(e)\n"
    "spread uniformly in log2 within each doubling of the normal range:\n"
    "the share where the one-FMA ExpCast code equals FP32 exp + RNE cast, the largest\n"
    "code difference, the range of value(code)/exact, and the per-row total variation\n"
    "bound (sqrt(b) - sqrt(a)) / (sqrt(b) + sqrt(a)).  Then the underflow tail of each\n"
    "P path, the block-max scale's bounds, and the split P's two halves (their scales\n"
    "and per-key errors).  --samples: per doubling (100000; the tail and split facts\n"
    "use at most 1000).\n";

/* ---- vcattn numerics ------------------------------------------------------------ */

int vc_numerics_parse(int argc, char **argv, vc_numerics_options *o) {
    o->json = 0;
    o->samples = 100000;
    for (int i = 0; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_numerics_usage, stdout);
            return VC_PARSE_HELP;
        } else if (!strcmp(argv[i], "--json")) {
            o->json = 1;
        } else if (!strcmp(argv[i], "--samples")) {
            if (i + 1 >= argc) return vc_cli_usage_error("numerics", "option '%s' needs a value", argv[i]);
            int rc = vc_cli_int_option("numerics", "--samples", "a sample count per doubling", argv[++i], 16,
                                       100000000, &o->samples);
            if (rc) return rc;
        } else if (argv[i][0] != '-') {
            return vc_cli_usage_error("numerics", "unexpected argument '%s': vcattn numerics takes only options",
                                      argv[i]);
        } else {
            fprintf(stderr, "vcattn numerics: unknown option '%s'\n%s", argv[i], k_numerics_usage);
            return VC_EXIT_USAGE;
        }
    }
    return 0;
}

int vc_cmd_numerics(int argc, char **argv) {
    vc_numerics_options o;
    int rc = vc_numerics_parse(argc, argv, &o);
    if (rc == VC_PARSE_HELP) return 0;
    if (rc) return rc;
    const int json = o.json;
    const int64_t samples = o.samples;
    vcattn_expcast_facts f;
    vcattn_status st = vcattn_expcast_measure(samples, &f);
    if (st) return vc_cli_fail("expcast_measure", st);
    vcattn_expcast_tail_facts tf;
    if ((st = vcattn_expcast_tail_measure(samples < 1000 ? samples : 1000, &tf))) return vc_cli_fail("expcast_tail_measure", st);
    vcattn_split_facts sf;
    if ((st = vcattn_split_measure(samples < 1000 ? samples : 1000, &sf))) return vc_cli_fail("split_measure", st);
    /* the block-max scale (the split's and vsmooth-blockmax-8bit's): its descent per block for
     * typical key counts and the bounds it keeps (softmax_numerics.h) */
    static const int64_t keys[5] = {8192, 9600, 32760, 75600, 118800};
    double bm_d[5], bm_alpha[5], bm_total[5], bm_coef[5];
    int bm_floor[5];
    for (int i = 0; i < 5; ++i) {
        const int64_t blocks = (keys[i] + VC_BLOCK_K - 1) / VC_BLOCK_K;
        bm_d[i] = (double)vc_blockmax_descent(blocks);
        bm_alpha[i] = exp2(bm_d[i]);
        bm_total[i] = bm_d[i] * (double)blocks;
        /* the grouped V-Smooth restore's FP16 coefficient: a block's row sum (128 keys at
         * the top code, 256) times the alphas up to the block its group rides in, at most
         * 2^(8d), or 2^(7/8) where the group floor holds it (softmax_numerics.h) */
        bm_floor[i] = vc_blockmax_needs_group_floor((float)bm_d[i]);
        const double growth = bm_floor[i] ? (double)VC_BLOCKMAX_GROUP_FLOOR : (double)VC_RESTORE_GROUP * bm_d[i];
        bm_coef[i] = exp2(growth) * 128.0 * VC_EXPCAST_P_SCALE;
    }
    double restore_max = 0.0;
    for (int i = 0; i < 5; ++i) restore_max = bm_coef[i] > restore_max ? bm_coef[i] : restore_max;
    if (json) {
        printf("{\"beta\": %.4f, \"agree_share\": %.6f, \"max_code_diff\": %d, \"ratio_min\": %.6f, "
               "\"ratio_max\": %.6f, \"row_tv_bound\": %.6f, \"samples_per_doubling\": %lld, "
               "\"tail\": {\"paths\": [\"exp\", \"expcast\", \"expcast_tail\", \"exp_256\"], "
               "\"cut_octaves\": [%.3f, %.3f, %.3f, %.3f], "
               "\"tail_mass_ratio\": [%.4f, %.4f, %.4f, %.4f], \"slope\": %.10g, \"offset\": %.4g}, "
               "\"blockmax\": {\"keys\": [%lld, %lld, %lld, %lld, %lld], \"descent\": [%.5f, %.5f, %.5f, %.5f, %.5f], "
               "\"alpha_max\": [%.4f, %.4f, %.4f, %.4f, %.4f], \"total_descent_max\": [%.2f, %.2f, %.2f, %.2f, %.2f], "
               "\"group_floor\": [%d, %d, %d, %d, %d], \"restore_coefficient_max\": [%.0f, %.0f, %.0f, %.0f, %.0f], "
               "\"restore_operand_max\": %.0f, \"fp16_max\": 65504}, "
               "\"split\": {\"exp_share\": %.4f, \"paths\": [\"exp_256\", \"expcast\"], \"scale\": [%.6f, %.6f], "
               "\"scale_ratio\": %.6f, \"rms_log2_error\": [%.6f, %.6f]}}\n",
               f.beta, f.agree_share, f.max_code_diff, f.ratio_min, f.ratio_max, f.row_tv_bound,
               (long long)samples, tf.cut_octaves[0], tf.cut_octaves[1], tf.cut_octaves[2], tf.cut_octaves[3],
               tf.tail_mass_ratio[0], tf.tail_mass_ratio[1], tf.tail_mass_ratio[2], tf.tail_mass_ratio[3], tf.slope, tf.offset, (long long)keys[0],
               (long long)keys[1], (long long)keys[2], (long long)keys[3], (long long)keys[4], bm_d[0], bm_d[1],
               bm_d[2], bm_d[3], bm_d[4], bm_alpha[0], bm_alpha[1], bm_alpha[2], bm_alpha[3], bm_alpha[4], bm_total[0],
               bm_total[1], bm_total[2], bm_total[3], bm_total[4], bm_floor[0], bm_floor[1], bm_floor[2], bm_floor[3],
               bm_floor[4], bm_coef[0], bm_coef[1], bm_coef[2], bm_coef[3], bm_coef[4], restore_max, sf.exp_share,
               sf.scale[0], sf.scale[1], sf.scale_ratio, sf.rms_log2_error[0], sf.rms_log2_error[1]);
    } else {
        printf("ExpCast-FP8: code = clip[0,120](RNE(8*(u+8) + 56 + beta)), beta = %.2f\n", f.beta);
        printf("  direct code == FP32 exp + RNE cast on   %.1f%% of each doubling (paper: 79.6%%)\n",
               100.0 * f.agree_share);
        printf("  largest code difference                 %d (paper: 1)\n", f.max_code_diff);
        printf("  value(code) / exact value in            [%.4f, %.4f] (paper: [0.9290, 1.0746])\n",
               f.ratio_min, f.ratio_max);
        printf("  per-row total variation bound           %.2f%% + underflow tail (paper: 3.64%%)\n",
               100.0 * f.row_tv_bound);
        printf("the underflow tail (keys u octaves below the row max):\n");
        printf("  %-42s %16s %26s\n", "P path", "zero below (oct)", "mass kept, u in [-20,-13]");
        const char *names[4] = {"exp path (FP32 exp2, max at 448)", "ExpCast (vsmooth-expcast-8bit)",
                                "ExpCast-tail (a retired method's P)",
                                "exp path, max at 256 (vsmooth-blockmax-8bit)"};
        for (int p = 0; p < 4; ++p)
            printf("  %-42s %16.2f %25.1f%%\n", names[p], tf.cut_octaves[p], 100.0 * tf.tail_mass_ratio[p]);
        printf("  tail line: h2 = bf16(h1 * %.10g + %.4g), code = max(h1, 128, h2) - 128\n", tf.slope, tf.offset);
        printf("the block-max scale (vsmooth-split-blockmax-8bit, vsmooth-blockmax-8bit): m_n = max(blockmax_n, m_{n-1} - d),\n"
               "  d = min(%.0f, %.0f / blocks) log2 units per 128-key block\n",
               (double)VC_BLOCKMAX_DESCENT, (double)VC_BLOCKMAX_TOTAL_DESCENT);
        printf("  %8s %10s %12s %22s %12s %26s\n", "keys", "d", "alpha <=", "fall over the row <=", "group floor",
               "restore coefficient <=");
        for (int i = 0; i < 5; ++i)
            printf("  %8lld %10.5f %12.4f %22.2f %12s %26.0f\n", (long long)keys[i], bm_d[i], bm_alpha[i], bm_total[i],
                   bm_floor[i] ? "m >= G-7/8" : "not needed", bm_coef[i]);
        printf("  grouped restore: FP16 coefficient of 8 blocks' row sums <= %.0f (FP16 max 65504)\n", restore_max);
        printf("the split P (vsmooth-split-blockmax-8bit): keys 0-15 and 32-47 of a block by the exp path,\n"
               "  the rest by ExpCast; %.1f%% of a block's keys by the exp path.  Over u in [-8, 0] octaves, decoded / 2^u\n"
               "  (times 2^-8), and the block's top key (u = 0):\n",
               100.0 * sf.exp_share);
        printf("  %-38s %15s %24s %10s\n", "keys", "geometric mean", "RMS log2 error per key", "top key");
        printf("  %-38s %15.5f %24.5f %10.5f\n", "exp keys (offset 8.001472)", sf.scale[0], sf.rms_log2_error[0],
               sf.top_gain[0]);
        printf("  %-38s %15.5f %24.5f %10.5f\n", "ExpCast (beta = -0.453, const 119.547)", sf.scale[1],
               sf.rms_log2_error[1], sf.top_gain[1]);
        printf("  scale ratio ExpCast / exp path   %.5f (1 = both parts are written in one scale)\n", sf.scale_ratio);
    }
    return 0;
}

