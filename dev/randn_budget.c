/* randn_budget.c - the error budget of the 8-bit methods on Gaussian Q, K, V in
 * the CPU simulation: each method as shipped, and the ExpCast block-max and exact
 * block-max methods with one operand left unquantized (Q K^T or V in FP32), so
 * the drop in rel-L2^2 is about that operand's share (the rest is P's).  Query
 * rows sampled evenly, every key; Q, K, V rounded to BF16 like a BF16 model's.
 * Not built by CMake:
 *
 *   cc -O2 -Wall -Iinclude dev/randn_budget.c build/libvcattn.a -lm -lpthread -o /tmp/randn_budget
 *   /tmp/randn_budget [heads=8] [keys=8192] [rows=256] [seed offset=0]
 *
 * (issue 12, session of 2026-12-01 from 21:49: docs/kernel-log.md) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vcattn.h"
#include "xorshift.h"

static float bf16(float x) { /* RNE to BF16 */
    uint32_t b;
    memcpy(&b, &x, 4);
    b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &b, 4);
    return x;
}

int main(int argc, char **argv) {
    const int H = argc > 1 ? atoi(argv[1]) : 8, S = argc > 2 ? atoi(argv[2]) : 8192, D = 128;
    const int NR = argc > 3 ? atoi(argv[3]) : 256;
    if (H < 1 || S < 1 || NR < 1 || NR > S) {
        fprintf(stderr, "usage: %s [heads >= 1] [keys >= 1] [rows 1..keys] [seed offset]\n", argv[0]);
        return 2;
    }
    g_state += argc > 4 ? (uint64_t)atoll(argv[4]) : 0;
    const size_t n = (size_t)H * S * D;
    float *qkv[3];
    for (int t = 0; t < 3; ++t) {
        qkv[t] = malloc(n * sizeof(float));
        if (!qkv[t]) return 1;
        for (size_t i = 0; i < n; i += 2) { /* Box-Muller */
            const double r = sqrt(-2.0 * log(uniform01())), th = 2.0 * M_PI * uniform01();
            qkv[t][i] = bf16((float)(r * cos(th)));
            qkv[t][i + 1] = bf16((float)(r * sin(th)));
        }
    }
    int64_t *rows = malloc(sizeof(int64_t) * NR);
    float *ref = malloc(sizeof(float) * (size_t)H * NR * D), *out = malloc(sizeof(float) * (size_t)H * NR * D);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)H * S);
    if (!rows || !ref || !out || !perm) return 1;
    for (int i = 0; i < NR; ++i) rows[i] = (int64_t)i * S / NR + S / NR / 2;

    vcattn_attention_params p;
    vcattn_attention_params_init(&p, 1, H, S, S, D, qkv[0], qkv[1], qkv[2], ref);
    p.o_stride[0] = (int64_t)H * NR * D; /* the rows API writes compact (B, H, rows, D) */
    p.o_stride[1] = (int64_t)NR * D;
    p.o_stride[2] = D;
    if (vcattn_reference_attention_rows(&p, rows, NR) != VCATTN_STATUS_SUCCESS) return 1;
    vcattn_kmeans_params kp;
    vcattn_kmeans_params_init(&kp);
    if (vcattn_vsmooth_plan(qkv[2], 1, H, S, D, p.v_stride, &kp, perm, NULL, NULL) != VCATTN_STATUS_SUCCESS) return 1;

    /* ExpCast block-max (a retired method) as the config it was: vsmooth-expcast-8bit's with
     * the block-max P scale */
    static const char *names[] = {"sage2-8bit", "vsmooth-8bit", "expcast-blockmax (config)", "vsmooth-blockmax-8bit",
                                  "vsmooth-split-blockmax-8bit"};
    for (int mi = 0; mi < 5; ++mi) {
        vcattn_method m;
        vcattn_method_from_name(mi == 2 ? "vsmooth-expcast-8bit" : names[mi], &m);
        for (int var = 0; var < (mi >= 2 ? 3 : 1); ++var) {
            vcattn_method_config c;
            vcattn_method_config_get(m, &c);
            if (mi == 2) c.p_scale = VCATTN_P_SCALE_BLOCK_MAX;
            const char *what = "";
            if (var == 1) { c.qk_format = VCATTN_QK_FORMAT_FP32; what = "qk=fp32"; }
            if (var == 2) { c.v_format = VCATTN_V_FORMAT_FP32; what = "v=fp32"; }
            p.o = out;
            const vcattn_status st = vcattn_simulate_attention_rows(&p, &c, c.v_smooth ? perm : NULL, rows, NR, NULL);
            if (st != VCATTN_STATUS_SUCCESS) {
                printf("%-32s %-8s status %d\n", names[mi], what, (int)st);
                continue;
            }
            vcattn_fidelity f;
            vcattn_fidelity_compare(ref, out, (int64_t)H * NR * D, &f);
            printf("%-32s %-8s rel-L2 %.4e (rel-L2^2 %.2fe-4) PSNR %.2f dB\n", names[mi], what, f.rel_l2,
                   1e4 * f.rel_l2 * f.rel_l2, f.psnr_db);
        }
    }
    return 0;
}
