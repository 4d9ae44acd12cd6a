/* pgain_model.c - what ExpCast's P error on Gaussian attention is made of:
 * the P path alone (exact FP64 scores and V, only P quantized), each 128-key
 * block coded against the block-max scale as the default method does
 * (softmax_numerics.h, vc_blockmax_scale with d = min(1, 64 / blocks)), the row sum
 * from the quantized P (as the V-Smooth kernels take it).  Quantizers:
 *
 *   exact-e4m3     e4m3(256 x 2^u): the exp path (vsmooth-blockmax-8bit)
 *   expcast        code RNE(8u + C) read as E4M3: the shipped ExpCast
 *   expcast-log    the same codes read as 256 x 2^((code - C) / 8): an ideal
 *                  log-uniform decode, no linear-mantissa gain per code
 *   exact-top-K    exact-e4m3 for keys within K octaves of the block's scale,
 *                  ExpCast below (where the error sits; meaningful at the
 *                  shipped C only: with another C the two parts' gains differ)
 *
 * with C = 120 + beta (beta = -0.35 shipped; other values by --const).  The
 * block's top key sits at u = 0, so its code is always RNE(C): with the log
 * decode C = 120 makes it exact, C = 119.65 makes it 3.1% heavy.
 * Output: rel-L2^2 of O against the exact O (units of 1e-4) per quantizer.
 *
 *   cc -O2 -Wall -Isrc dev/pgain_model.c -lm -o /tmp/pgain_model
 *   /tmp/pgain_model [heads=8] [keys=8192] [rows=256] [C=119.65]
 *
 * (issue 12, session of 2026-12-02: docs/kernel-log.md, "Where ExpCast's P
 * error on randn sits") */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "numerics.h"
#include "xorshift.h"

static double gauss(void) { return sqrt(-2.0 * log(uniform01())) * cos(2.0 * M_PI * uniform01()); }

enum { Q_EXACT, Q_EXPCAST, Q_EXPCAST_LOG, Q_TOP1, Q_TOP2, Q_COUNT };
static const char *k_names[Q_COUNT] = {"exact-e4m3", "expcast", "expcast-log", "exact-top-1", "exact-top-2"};

/* P of one key, u <= 0 relative to the block's scale */
static double quantize(int q, double u, double C) {
    const uint8_t code = vc_expcast_code_from_bracket((float)(8.0 * u + C));
    switch (q) {
    case Q_EXACT: return vc_e4m3_round((float)(256.0 * exp2(u)));
    case Q_EXPCAST: return vc_e4m3_decode(code);
    case Q_EXPCAST_LOG: return code ? 256.0 * exp2((code - C) / 8.0) : 0.0;
    default: {
        const double k = q == Q_TOP1 ? 1.0 : 2.0;
        return u > -k ? vc_e4m3_round((float)(256.0 * exp2(u))) : vc_e4m3_decode(code);
    }
    }
}

int main(int argc, char **argv) {
    const int H = argc > 1 ? atoi(argv[1]) : 8, S = argc > 2 ? atoi(argv[2]) : 8192, D = 128;
    const int NR = argc > 3 ? atoi(argv[3]) : 256;
    const double C = argc > 4 ? atof(argv[4]) : (double)VC_EXPCAST_CONST;
    if (H < 1 || S < 1 || NR < 1 || NR > S || !(C > 0.0 && C < 126.0)) {
        fprintf(stderr, "usage: %s [heads >= 1] [keys >= 1] [rows 1..keys] [C in (0, 126)]\n", argv[0]);
        return 2;
    }
    const int nblk = (S + 127) / 128;
    const float descent = vc_blockmax_descent(nblk);
    double *k = malloc(sizeof(double) * (size_t)S * D), *v = malloc(sizeof(double) * (size_t)S * D);
    double *u = malloc(sizeof(double) * S), q[128];
    if (!k || !v || !u) return 1;
    double err2[Q_COUNT] = {0}, ref2 = 0.0;
    for (int h = 0; h < H; ++h) {
        for (size_t i = 0; i < (size_t)S * D; ++i) k[i] = gauss();
        for (size_t i = 0; i < (size_t)S * D; ++i) v[i] = gauss();
        for (int r = 0; r < NR; ++r) {
            for (int d = 0; d < D; ++d) q[d] = gauss();
            for (int j = 0; j < S; ++j) { /* log2 units */
                double s = 0.0;
                for (int d = 0; d < D; ++d) s += q[d] * k[(size_t)j * D + d];
                u[j] = s / sqrt((double)D) * M_LOG2E;
            }
            double o[Q_COUNT + 1][128] = {{0}}, l[Q_COUNT + 1] = {0}, m[Q_COUNT + 1];
            for (int x = 0; x <= Q_COUNT; ++x) m[x] = -INFINITY;
            for (int b = 0; b < nblk; ++b) {
                const int j0 = 128 * b, j1 = j0 + 128 < S ? j0 + 128 : S;
                double bmax = -INFINITY;
                for (int j = j0; j < j1; ++j) bmax = fmax(bmax, u[j]);
                for (int x = 0; x <= Q_COUNT; ++x) { /* x = Q_COUNT: the exact P, online */
                    const double mn = x == Q_COUNT ? fmax(m[x], bmax) : vc_blockmax_scale((float)m[x], descent, (float)bmax);
                    const double al = m[x] == -INFINITY ? 0.0 : exp2(m[x] - mn);
                    l[x] *= al;
                    for (int d = 0; d < D; ++d) o[x][d] *= al;
                    for (int j = j0; j < j1; ++j) {
                        const double p = x == Q_COUNT ? exp2(u[j] - mn) : quantize(x, u[j] - mn, C) / 256.0;
                        l[x] += p;
                        for (int d = 0; d < D; ++d) o[x][d] += p * v[(size_t)j * D + d];
                    }
                    m[x] = mn;
                }
            }
            for (int d = 0; d < D; ++d) {
                const double ref = o[Q_COUNT][d] / l[Q_COUNT];
                ref2 += ref * ref;
                for (int x = 0; x < Q_COUNT; ++x) {
                    const double e = o[x][d] / l[x] - ref;
                    err2[x] += e * e;
                }
            }
        }
    }
    printf("P path alone, Gaussian Q K V, %d heads x %d keys x %d rows, block-max scale, C = %.3f\n", H, S, NR, C);
    for (int x = 0; x < Q_COUNT; ++x)
        printf("%-12s rel-L2^2 %6.2fe-4\n", k_names[x], 1e4 * err2[x] / ref2);
    free(k);
    free(v);
    free(u);
    return 0;
}
