/* Edge cases of issue 14, "no silent garbage": every finite input gives a
 * finite answer close to the FP64 reference, or a clear status.  Scale
 * extremes of Q, K, V and sm_scale (1e-30 .. 1e30), subnormal inputs, huge
 * offsets, and scores beyond FP32 (SCORE_OVERFLOW). */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "test_configs.h"
#include "vcattn.h"

enum { EB = 1, EH = 2, ESQ = 130, ESKV = 200, ED = 64 };

typedef struct {
    float q[EB * EH * ESQ * ED], k[EB * EH * ESKV * ED], v[EB * EH * ESKV * ED];
} edge_inputs;

static void edge_random(edge_inputs *x) {
    test_rng rng = {test_seed()};
    for (int i = 0; i < EB * EH * ESQ * ED; ++i) x->q[i] = (float)test_rng_normal(&rng);
    for (int i = 0; i < EB * EH * ESKV * ED; ++i) x->k[i] = (float)test_rng_normal(&rng);
    for (int i = 0; i < EB * EH * ESKV * ED; ++i) x->v[i] = (float)test_rng_normal(&rng);
}

static void scale_all(float *x, int n, double s, double offset) {
    for (int i = 0; i < n; ++i) x[i] = (float)((double)x[i] * s + offset);
}

static double rel_l2(const float *ref, const float *o, int64_t n) {
    double e = 0.0, r = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double d = (double)o[i] - ref[i];
        e += d * d;
        r += (double)ref[i] * ref[i];
    }
    return r > 0.0 ? sqrt(e / r) : sqrt(e);
}

static int all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return 0;
    return 1;
}

typedef struct {
    const char *name;
    double q_scale, k_scale, v_scale, sm_scale; /* sm_scale 0: 1/sqrt(D) */
    double k_offset, v_offset, q_offset;
    int peaked; /* softmax ~ argmax: quantized scores pick among near-ties */
} edge_case;

static const edge_case k_cases[] = {
    {"q*1e-30", 1e-30, 1, 1, 0, 0, 0, 0, 0},     {"k*1e-30", 1, 1e-30, 1, 0, 0, 0, 0, 0},
    {"v*1e-30", 1, 1, 1e-30, 0, 0, 0, 0, 0},     {"sm=1e-30", 1, 1, 1, 1e-30, 0, 0, 0, 0},
    {"q*1e-10", 1e-10, 1, 1, 0, 0, 0, 0, 0},     {"v*1e-10", 1, 1, 1e-10, 0, 0, 0, 0, 0},
    {"v*1e-3", 1, 1, 1e-3, 0, 0, 0, 0, 0},       {"v*1e3", 1, 1, 1e3, 0, 0, 0, 0, 0},
    {"v*1e10", 1, 1, 1e10, 0, 0, 0, 0, 0},       {"v*1e30", 1, 1, 1e30, 0, 0, 0, 0, 0},
    {"q*1e3", 1e3, 1, 1, 0, 0, 0, 0, 1},         {"k*1e3", 1, 1e3, 1, 0, 0, 0, 0, 1},
    {"q*1e6", 1e6, 1, 1, 0, 0, 0, 0, 1},         {"k*1e6", 1, 1e6, 1, 0, 0, 0, 0, 1},
    {"sm=1e6", 1, 1, 1, 1e6, 0, 0, 0, 1},        {"q*1e30", 1e30, 1, 1, 0, 0, 0, 0, 1},
    {"k*1e30", 1, 1e30, 1, 0, 0, 0, 0, 1},       {"sm=1e30", 1, 1, 1, 1e30, 0, 0, 0, 1},
    {"subnormal q,k,v", 1e-40, 1e-40, 1e-40, 0, 0, 0, 0, 0},
    {"subnormal v", 1, 1, 1e-40, 0, 0, 0, 0, 0}, {"subnormal q", 1e-40, 1, 1, 0, 0, 0, 0, 0},
    {"k+1e4", 1, 1, 1, 0, 1e4, 0, 0, 0},         {"v+1e4", 1, 1, 1, 0, 0, 1e4, 0, 0},
    {"q+1e4", 1, 1, 1, 0, 0, 0, 1e4, 1},
    /* near FLT_MAX: the FP32 sums of P V and of the 4-bit scores stay finite */
    {"v*1e37", 1, 1, 1e37, 0, 0, 0, 0, 0},       {"q*1e37", 1e37, 1, 1, 0, 0, 0, 0, 1},
    /* scores ~1e40: beyond FP32, so SCORE_OVERFLOW from the quantized paths */
    {"q*1e20,k*1e20", 1e20, 1e20, 1, 0, 0, 0, 0, 1},
};

/* Relative L2 bounds vs the FP64 reference (measured about 0.02-0.04 for the
 * 8-bit methods and 0.1-0.25 for the 4-bit ones on ordinary cases; ~0.2 and
 * ~0.67 where the softmax is an argmax of quantized scores). */
static double edge_bound(const vcattn_method_config *cfg, int peaked) {
    const int fourbit = cfg->qk_format == VCATTN_QK_FORMAT_NVFP4;
    if (peaked) return fourbit ? 0.9 : 0.5;
    return fourbit ? 0.4 : 0.1;
}

/* Where the softmax is an argmax (peaked cases), a row whose two largest
 * exact scores lie within the method's score error of each other can pick
 * either key: no quantized method can be "close" there, and which rows they
 *  * are depends on the seed.  gap[r]: the row's top-two gap over its score
 * spread (max - min), FP64 scores of the scaled inputs (0 for a row with no
 * spread); a row is a near-tie below tau, about the relative score error of
 * the format: 0.02 for the 8-bit ones, 0.1 for NVFP4 (~7%), which leaves
 * ~74% / ~18% of Gaussian rows of 200 keys to check.  Without it the peaked
 * cases failed on 4 of the seeds 100-160 (q+1e4: every row has the same
 * winner, so one near-tie flips all of them); with it none of the seeds
 * 100-300 fails.  One pass per case, shared by every method. */
static void top_two_gaps(const edge_inputs *x, double sm, double *gap) {
    for (int h = 0; h < EB * EH; ++h)
        for (int i = 0; i < ESQ; ++i) {
            const float *q = x->q + ((int64_t)h * ESQ + i) * ED;
            double top1 = -INFINITY, top2 = -INFINITY, lo = INFINITY;
            for (int j = 0; j < ESKV; ++j) {
                const float *k = x->k + ((int64_t)h * ESKV + j) * ED;
                double sc = 0.0;
                for (int d = 0; d < ED; ++d) sc += (double)q[d] * (double)k[d];
                sc *= sm;
                if (sc > top1) { top2 = top1; top1 = sc; } else if (sc > top2) top2 = sc;
                if (sc < lo) lo = sc;
            }
            const double spread = top1 - lo;
            gap[h * ESQ + i] = spread > 0.0 ? (top1 - top2) / spread : 0.0;
        }
}

/* rel-L2 of the rows that are not near-ties (gap[r] >= tau; -1 when there are
 * none); gap NULL: every row (rel_l2) */
static double rel_l2_untied(const float *ref, const float *o, const double *gap, double tau) {
    if (!gap) return rel_l2(ref, o, EB * EH * ESQ * ED);
    double e = 0.0, r = 0.0;
    int rows = 0;
    for (int64_t row = 0; row < EB * EH * ESQ; ++row) {
        if (gap[row] < tau) continue;
        ++rows;
        for (int d = 0; d < ED; ++d) {
            const double dv = (double)o[row * ED + d] - ref[row * ED + d];
            e += dv * dv;
            r += (double)ref[row * ED + d] * ref[row * ED + d];
        }
    }
    return rows == 0 ? -1.0 : (r > 0.0 ? sqrt(e / r) : sqrt(e));
}

TEST(edge_case_suite_finite_and_close_or_clear_status) {
    static edge_inputs base, x;
    edge_random(&base);
    const int64_t nq = EB * EH * ESQ * ED, nk = EB * EH * ESKV * ED;
    static float ref[EB * EH * ESQ * ED], out[EB * EH * ESQ * ED], ref_lse[EB * EH * ESQ], lse[EB * EH * ESQ];
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ++ci) {
        const edge_case *ec = &k_cases[ci];
        x = base;
        scale_all(x.q, (int)nq, ec->q_scale, ec->q_offset);
        scale_all(x.k, (int)nk, ec->k_scale, ec->k_offset);
        scale_all(x.v, (int)nk, ec->v_scale, ec->v_offset);
        vcattn_attention_params p;
        vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, ref);
        p.softmax_scale = ec->sm_scale;
        p.lse = ref_lse;
        /* the output always; the LSE (~ the max score) unless it is beyond
         * FP32, which is refused rather than stored as Inf */
        const int lse_beyond = ec->q_scale * ec->k_scale >= 1e38;
        CHECK_STATUS(vcattn_reference_attention(&p), lse_beyond ? VCATTN_STATUS_SCORE_OVERFLOW : VCATTN_STATUS_SUCCESS);
        if (lse_beyond) {
            p.lse = NULL;
            CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
        }
        CHECK_MSG(all_finite(ref, nq), "%s: reference not finite", ec->name);
        CHECK_MSG(lse_beyond || all_finite(ref_lse, EB * EH * ESQ), "%s: reference LSE not finite", ec->name);
        /* peaked: the closeness check skips the near-ties of the exact scores */
        static double gap[EB * EH * ESQ];
        if (ec->peaked) top_two_gaps(&x, ec->sm_scale > 0.0 ? ec->sm_scale : 1.0 / sqrt((double)ED), gap);
        for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) {
            vcattn_method_config cfg;
            CHECK_STATUS(vcattn_method_config_get((vcattn_method)m, &cfg), VCATTN_STATUS_SUCCESS);
            /* without K smoothing a K offset is a per-row shift that INT8 /
             * E4M3 scores cannot carry: the method's known weakness */
            if (ec->k_offset != 0.0 && !cfg.smooth_k) continue;
            p.o = out;
            p.lse = lse;
            vcattn_status st = vcattn_simulate_attention(&p, &cfg, NULL, NULL);
            const char *mname = vcattn_method_name((vcattn_method)m);
            if (st == VCATTN_STATUS_SCORE_OVERFLOW) {
                CHECK_MSG(ec->q_scale * ec->k_scale >= 1e38, "%s %s: SCORE_OVERFLOW for scores within FP32",
                          ec->name, mname);
                continue;
            }
            CHECK_MSG(st == VCATTN_STATUS_SUCCESS, "%s %s: %s", ec->name, mname, vcattn_status_string(st));
            if (st) continue;
            CHECK_MSG(ec->q_scale * ec->k_scale < 1e38, "%s %s: an answer for scores beyond FP32", ec->name, mname);
            CHECK_MSG(all_finite(out, nq), "%s %s: output not finite", ec->name, mname);
            CHECK_MSG(all_finite(lse, EB * EH * ESQ), "%s %s: LSE not finite", ec->name, mname);
            if (!all_finite(out, nq)) continue;
            const double tau = cfg.qk_format == VCATTN_QK_FORMAT_NVFP4 ? 0.1 : 0.02;
            const double r = rel_l2_untied(ref, out, ec->peaked ? gap : NULL, tau), bound = edge_bound(&cfg, ec->peaked);
            if (getenv("VCATTN_TEST_MEASURE")) printf("  %-16s %-26s rel_l2 %.4g (bound %.2g)\n", ec->name, mname, r, bound);
            CHECK_MSG(r <= bound, "%s %s: rel_l2 %.4g > %.2g (rows not near-ties)", ec->name, mname, r, bound);
            /* the LSE: relative to the row's scale (its max score) */
            double lerr = 0.0, lmag = 1.0;
            for (int64_t i = 0; i < EB * EH * ESQ; ++i) {
                lerr = fmax(lerr, fabs((double)lse[i] - ref_lse[i]));
                lmag = fmax(lmag, fabs((double)ref_lse[i]));
            }
            /* 4-bit scores carry ~7% relative error where the LSE is the max score; the
             * worst row over 150 seeds (100-250): NVFP4 0.159, E4M3 (fp8-naive) 0.062, INT8
             * below 0.05 (the bounds were 0.15 / 0.05 for every 8-bit format, which failed
             * 5 of those seeds) */
            const double lbound = cfg.qk_format == VCATTN_QK_FORMAT_NVFP4  ? 0.2
                                  : cfg.qk_format == VCATTN_QK_FORMAT_E4M3 ? 0.08
                                                                           : 0.05;
            CHECK_MSG(lerr <= lbound * lmag, "%s %s: LSE error %.4g (magnitude %.4g)", ec->name, mname, lerr, lmag);
        }
    }
}

/* Scores beyond FP32 (finite Q, K whose q.k overflows float): every
 * quantized method answers SCORE_OVERFLOW; the unquantized FP64 path and the
 * reference answer exactly. */
TEST(score_overflow_is_a_clear_status) {
    static edge_inputs x;
    edge_random(&x);
    const int64_t nq = EB * EH * ESQ * ED, nk = EB * EH * ESKV * ED;
    scale_all(x.q, (int)nq, 1e25, 0.0);
    scale_all(x.k, (int)nk, 1e25, 0.0);
    static float ref[EB * EH * ESQ * ED], out[EB * EH * ESQ * ED];
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, ref);
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
    CHECK(all_finite(ref, nq));
    p.o = out;
    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) {
        vcattn_method_config cfg;
        vcattn_method_config_get((vcattn_method)m, &cfg);
        CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_SCORE_OVERFLOW);
    }
    const vcattn_method_config exact = {VCATTN_QK_FORMAT_FP32, VCATTN_QK_GRANULARITY_BLOCK, 0, 0,
                                        VCATTN_V_FORMAT_FP32, 0, VCATTN_P_FORMAT_FP32, 0,
                                        VCATTN_P_SCALE_RUNNING_MAX, 0};
    CHECK_STATUS(vcattn_simulate_attention(&p, &exact, NULL, NULL), VCATTN_STATUS_SUCCESS);
    CHECK(rel_l2(ref, out, nq) < 1e-6);
    CHECK(strstr(vcattn_status_string(VCATTN_STATUS_SCORE_OVERFLOW), "overflow float32") != NULL);
}

/* ExpCast with scores of ~1e6 per INT8 step (q * 1e6, or sm_scale 1e30): the
 * kernel's one-FMA bracket loses the codes (a whole row got code 0: l = 0,
 * output NaN); the simulation evaluates it from the score relative to the
 * row max and answers like the E4M3-P method next to it. */
TEST(expcast_large_scores_stay_finite) {
    static edge_inputs x;
    edge_random(&x);
    const int64_t nq = EB * EH * ESQ * ED;
    scale_all(x.q, (int)nq, 1e6, 0.0);
    static float ref[EB * EH * ESQ * ED], o1[EB * EH * ESQ * ED], o2[EB * EH * ESQ * ED];
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, ref);
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
    vcattn_method_config e4m3, ec, tail;
    vcattn_method_config_get(VCATTN_METHOD_VSMOOTH_8BIT, &e4m3);
    vcattn_method_config_get(VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT, &ec);
    test_config_get(TEST_CONFIG_EXPCAST_TAIL, &tail);
    e4m3.exact_keys = ec.exact_keys = 0; /* the P paths alone, like the retired tail config */
    p.o = o1;
    CHECK_STATUS(vcattn_simulate_attention(&p, &e4m3, NULL, NULL), VCATTN_STATUS_SUCCESS);
    const vcattn_method_config *cfgs[2] = {&ec, &tail};
    for (int i = 0; i < 2; ++i) {
        p.o = o2;
        CHECK_STATUS(vcattn_simulate_attention(&p, cfgs[i], NULL, NULL), VCATTN_STATUS_SUCCESS);
        CHECK(all_finite(o2, nq));
        /* argmax-like rows: both pick the same quantized winners */
        CHECK_MSG(rel_l2(o1, o2, nq) < 0.05, "expcast %d vs e4m3: %.4g", i, rel_l2(o1, o2, nq));
    }
}

/* The 4-bit methods under NVFP4's FP32 tensor scale: V (and Q, K) scaled by a
 * power of two gives the output scaled by it, bit for bit (without the tensor
 * scale max|V| ~ 2^-10 quantized to 0 and ~2^14 saturated). */
TEST(nvfp4_methods_are_scale_invariant) {
    static edge_inputs base, x;
    edge_random(&base);
    const int64_t nq = EB * EH * ESQ * ED, nk = EB * EH * ESKV * ED;
    static float o0[EB * EH * ESQ * ED], o1[EB * EH * ESQ * ED];
    const vcattn_method ms[2] = {VCATTN_METHOD_SAGE3_4BIT, VCATTN_METHOD_VSMOOTH_4BIT};
    const int shifts[4] = {-40, -12, 14, 40};
    for (int mi = 0; mi < 2; ++mi) {
        vcattn_method_config cfg;
        test_config_get(ms[mi], &cfg);
        vcattn_attention_params p;
        vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, base.q, base.k, base.v, o0);
        CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_SUCCESS);
        for (int si = 0; si < 4; ++si) {
            x = base;
            const double s = ldexp(1.0, shifts[si]);
            scale_all(x.v, (int)nk, s, 0.0);
            /* Q and K scaled in opposite directions: the same scores */
            scale_all(x.q, (int)nq, s, 0.0);
            scale_all(x.k, (int)nk, 1.0 / s, 0.0);
            vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, o1);
            CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_SUCCESS);
            int64_t bad = 0;
            for (int64_t i = 0; i < nq; ++i) bad += (double)o1[i] != (double)o0[i] * s;
            CHECK_MSG(bad == 0, "%s, 2^%d: %lld outputs not exactly scaled", test_config_name(ms[mi]),
                      shifts[si], (long long)bad);
        }
    }
}

/* Subnormal V (x 1e-40): the 8-bit V scales were 448 / amax = inf (codes NaN
 * or saturated, rel_l2 ~2); now the same answer as V at ordinary scale. */
TEST(subnormal_v_keeps_the_answer) {
    static edge_inputs base, x;
    edge_random(&base);
    const int64_t nq = EB * EH * ESQ * ED, nk = EB * EH * ESKV * ED;
    static float ref[EB * EH * ESQ * ED], out[EB * EH * ESQ * ED];
    x = base;
    scale_all(x.v, (int)nk, 1e-40, 0.0);
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, ref);
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
    p.o = out;
    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) {
        vcattn_method_config cfg;
        vcattn_method_config_get((vcattn_method)m, &cfg);
        if (cfg.qk_format == VCATTN_QK_FORMAT_NVFP4) continue; /* 4-bit: the suite above */
        CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_SUCCESS);
        const double r = rel_l2(ref, out, nq);
        CHECK_MSG(r < 0.06, "%s: rel_l2 %.4g", vcattn_method_name((vcattn_method)m), r);
    }
}

/* The GPU path's validation (a CUDA build; it reads no device memory):
 * softmax_scale beyond the kernel's FP32 sm and c0 = sm * log2(e) is refused
 * with SCORE_OVERFLOW, and so is one that breaks the score bracket for every
 * input with a nonzero score: above ~6.8e10 for the ExpCast methods, above
 * ~1.2e21 for the exp path (api.cu; sm_scale 1e30 gave NaN rows there).  A
 * build without CUDA answers NOT_BUILT. */
TEST(gpu_validation_refuses_sm_scale_beyond_the_kernel) {
    static float dummy[4 * 128];
    vcattn_gpu_params p;
    vcattn_gpu_params_init(&p, 1, 1, 1, 1, 128, dummy, dummy, dummy, dummy);
    vcattn_status ok = vcattn_gpu_params_validate(&p);
    /* the output-status query checks its arguments before touching a device */
    CHECK(vcattn_gpu_output_status(NULL, dummy, sizeof dummy, NULL) ==
          (ok == VCATTN_STATUS_NOT_BUILT ? VCATTN_STATUS_NOT_BUILT : VCATTN_STATUS_NULL_POINTER));
    if (ok == VCATTN_STATUS_NOT_BUILT) return;
    CHECK_STATUS(vcattn_gpu_output_status(&p, NULL, 0, NULL), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(ok, VCATTN_STATUS_SUCCESS);
    /* V-Smooth off: the method's P path without a permutation or exact-P heads */
    p.method = VCATTN_METHOD_VSMOOTH_SPLIT_BLOCKMAX_8BIT;
    p.v_smooth_off = 1;
    CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_SUCCESS);
    static int32_t perm1[1];
    static uint8_t exact1[1];
    p.perm = perm1;
    CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_INVALID_ARGUMENT);
    p.perm = NULL;
    p.head_exact = exact1;
    CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_INVALID_ARGUMENT);
    p.head_exact = NULL;
    p.v_smooth_off = 0;
    /* a method without a kernel (and an id past the list) is refused before its scale */
    p.method = VCATTN_METHOD_SAGE3_4BIT;
    CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_INVALID_ARGUMENT);
    p.method = TEST_CONFIG_EXPCAST_TAIL;
    CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_INVALID_ARGUMENT);
    for (int i = 0; i < VCATTN_METHOD_COUNT; ++i) {
        if (!vcattn_method_has_kernel((vcattn_method)i)) continue;
        vcattn_method_config mc;
        CHECK_STATUS(vcattn_method_config_get((vcattn_method)i, &mc), VCATTN_STATUS_SUCCESS);
        /* the split writes ExpCast codes for 3/4 of its keys: ExpCast's bound */
        const int expcast = mc.p_format == VCATTN_P_FORMAT_EXPCAST || mc.p_format == VCATTN_P_FORMAT_SPLIT;
        p.method = (vcattn_method)i;
        p.softmax_scale = 1e3;
        CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_SUCCESS);
        p.softmax_scale = 1e10;
        CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_SUCCESS);
        p.softmax_scale = 1e12;
        CHECK_STATUS(vcattn_gpu_params_validate(&p), expcast ? VCATTN_STATUS_SCORE_OVERFLOW : VCATTN_STATUS_SUCCESS);
        p.softmax_scale = 1e20;
        CHECK_STATUS(vcattn_gpu_params_validate(&p), expcast ? VCATTN_STATUS_SCORE_OVERFLOW : VCATTN_STATUS_SUCCESS);
        p.softmax_scale = 1e22;
        CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_SCORE_OVERFLOW);
        p.softmax_scale = 1e30;
        CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_SCORE_OVERFLOW);
        p.softmax_scale = 1e38 * 3.0; /* finite double, beyond FP32 once times log2(e) */
        CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_SCORE_OVERFLOW);
        p.softmax_scale = 1e300;
        CHECK_STATUS(vcattn_gpu_params_validate(&p), VCATTN_STATUS_SCORE_OVERFLOW);
    }
}

/* The policy's GPU reference (vcattn_gpu_reference_rows): its workspace holds one part per split
 * of the keys, the splits a function of the shape alone - one where the rows already give 1,584
 * CTAs or more, else up to one per 1,024 keys (at most 64); shapes and head_dim are checked
 * before any device work.  A build without CUDA answers NOT_BUILT. */
TEST(gpu_reference_rows_workspace_and_validation) {
    static _Alignas(256) float dummy[4 * 128]; /* 8-byte rows, a 256-byte aligned workspace */
    vcattn_gpu_reference_params p;
    memset(&p, 0, sizeof p);
    p.batch = 1, p.heads = 4, p.rows = 512, p.seq_kv = 75600, p.head_dim = 128;
    p.q = p.k = p.v = dummy;
    p.q_stride[0] = p.q_stride[1] = p.q_stride[2] = 128;
    memcpy(p.k_stride, p.q_stride, sizeof p.k_stride);
    memcpy(p.v_stride, p.q_stride, sizeof p.v_stride);
    p.o = dummy;
    size_t bytes = 0;
    vcattn_status st = vcattn_gpu_reference_workspace_size(&p, &bytes);
    CHECK_STATUS(vcattn_gpu_reference_rows(NULL, dummy, sizeof dummy, NULL),
                 st == VCATTN_STATUS_NOT_BUILT ? VCATTN_STATUS_NOT_BUILT : VCATTN_STATUS_NULL_POINTER);
    if (st == VCATTN_STATUS_NOT_BUILT) return;
    CHECK_STATUS(st, VCATTN_STATUS_SUCCESS);
    const size_t per_split = (size_t)(4 * 512) * (128 + 2) * sizeof(float);
    CHECK(bytes == 50 * per_split); /* 32 CTAs of rows: ceil(1584 / 32) = 50 splits */
    p.heads = 40;                   /* 320 CTAs of rows: ceil(1584 / 320) = 5 splits */
    CHECK_STATUS(vcattn_gpu_reference_workspace_size(&p, &bytes), VCATTN_STATUS_SUCCESS);
    CHECK(bytes == 5 * (size_t)(40 * 512) * (128 + 2) * sizeof(float));
    p.heads = 1000;                 /* 8,000 CTAs of rows: one split */
    CHECK_STATUS(vcattn_gpu_reference_workspace_size(&p, &bytes), VCATTN_STATUS_SUCCESS);
    CHECK(bytes == (size_t)(1000 * 512) * (128 + 2) * sizeof(float));
    p.heads = 1, p.rows = 64, p.seq_kv = 2000; /* 2 splits of at least 1,024 keys */
    CHECK_STATUS(vcattn_gpu_reference_workspace_size(&p, &bytes), VCATTN_STATUS_SUCCESS);
    CHECK(bytes == 2 * (size_t)64 * (128 + 2) * sizeof(float));
    p.seq_kv = 1 << 24; /* at most 64 splits */
    CHECK_STATUS(vcattn_gpu_reference_workspace_size(&p, &bytes), VCATTN_STATUS_SUCCESS);
    CHECK(bytes == 64 * (size_t)64 * (128 + 2) * sizeof(float));
    p.head_dim = 96;
    CHECK_STATUS(vcattn_gpu_reference_workspace_size(&p, &bytes), VCATTN_STATUS_UNSUPPORTED_HEAD_DIM);
    CHECK_STATUS(vcattn_gpu_reference_rows(&p, dummy, sizeof dummy, NULL), VCATTN_STATUS_UNSUPPORTED_HEAD_DIM);
    p.head_dim = 128;
    p.rows = 0;
    CHECK_STATUS(vcattn_gpu_reference_rows(&p, dummy, sizeof dummy, NULL), VCATTN_STATUS_BAD_SHAPE);
    p.rows = 64;
    p.k_stride[2] = 6; /* not a multiple of 4 elements: no 8-byte rows */
    CHECK_STATUS(vcattn_gpu_reference_rows(&p, dummy, sizeof dummy, NULL), VCATTN_STATUS_BAD_STRIDE);
    p.k_stride[2] = 128;
    p.o = NULL;
    CHECK_STATUS(vcattn_gpu_reference_rows(&p, dummy, sizeof dummy, NULL), VCATTN_STATUS_NULL_POINTER);
    p.o = dummy; /* a workspace smaller than asked for */
    CHECK_STATUS(vcattn_gpu_reference_rows(&p, dummy, 16, NULL), VCATTN_STATUS_INVALID_ARGUMENT);
}

/* Valid lengths on the GPU path: checked against the axes; the workspace holds a region per
 * batch element, each at least the unpadded problem's, and the call's output flag before them. */
TEST(gpu_lengths_validation_and_workspace) {
    static float dummy[4 * 128];
    vcattn_gpu_params lp;
    vcattn_gpu_params_init(&lp, 3, 2, 300, 300, 128, dummy, dummy, dummy, dummy);
    if (vcattn_gpu_params_validate(&lp) == VCATTN_STATUS_NOT_BUILT) return;
    size_t plain = 0, with = 0, one = 0;
    CHECK_STATUS(vcattn_gpu_workspace_size(&lp, &plain), VCATTN_STATUS_SUCCESS);
    const int64_t kv[3] = {300, 1, 0}, q[3] = {300, 1, 0}, bad[3] = {301, 1, 0}, neg[3] = {-1, 1, 0};
    lp.kv_lens = kv;
    lp.q_lens = q;
    CHECK_STATUS(vcattn_gpu_workspace_size(&lp, &with), VCATTN_STATUS_SUCCESS);
    vcattn_gpu_layout L;
    CHECK_STATUS(vcattn_gpu_workspace_layout(&lp, &L), VCATTN_STATUS_SUCCESS);
    vcattn_gpu_params single = lp;
    single.batch = 1;
    single.q_lens = single.kv_lens = NULL;
    CHECK_STATUS(vcattn_gpu_workspace_size(&single, &one), VCATTN_STATUS_SUCCESS);
    CHECK(with >= 3 * one && with >= plain && L.total == with && L.output_flag < L.q_codes);
    lp.kv_lens = bad;
    CHECK_STATUS(vcattn_gpu_params_validate(&lp), VCATTN_STATUS_INVALID_ARGUMENT);
    lp.kv_lens = kv;
    lp.q_lens = neg;
    CHECK_STATUS(vcattn_gpu_params_validate(&lp), VCATTN_STATUS_INVALID_ARGUMENT);
}

/* Found by fuzz/fuzz_params.c: softmax_scale 1e300 (accepted: any finite
 * scale is) with Q of ~1e10 made FP64 scores of +Inf in the reference, and
 * every output of the row NaN with SUCCESS.  Now SCORE_OVERFLOW, like the
 * quantized paths; scores below the FP64 limit are still answered. */
TEST(reference_scores_beyond_fp64_are_a_clear_status) {
    static edge_inputs x;
    edge_random(&x);
    const int64_t nq = EB * EH * ESQ * ED;
    scale_all(x.q, (int)nq, 1e10, 0.0);
    static float out[EB * EH * ESQ * ED];
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, out);
    p.softmax_scale = 1e300;
    CHECK_STATUS(vcattn_attention_params_validate(&p), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SCORE_OVERFLOW);
    static const int64_t rows[2] = {0, 129};
    CHECK_STATUS(vcattn_reference_attention_rows(&p, rows, 2), VCATTN_STATUS_SCORE_OVERFLOW);
    /* the simulation's FP64 path and every method say the same */
    const vcattn_method_config exact = {VCATTN_QK_FORMAT_FP32, VCATTN_QK_GRANULARITY_BLOCK, 0, 0,
                                        VCATTN_V_FORMAT_FP32, 0, VCATTN_P_FORMAT_FP32, 0,
                                        VCATTN_P_SCALE_RUNNING_MAX, 0};
    CHECK_STATUS(vcattn_simulate_attention(&p, &exact, NULL, NULL), VCATTN_STATUS_SCORE_OVERFLOW);
    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) {
        vcattn_method_config cfg;
        vcattn_method_config_get((vcattn_method)m, &cfg);
        CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_SCORE_OVERFLOW);
    }
    /* scores below FP64's limit are answered: sm_scale 1e290 with Q * 1e10 (scores ~1e301) */
    p.softmax_scale = 1e290;
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
    CHECK(all_finite(out, nq));
}

/* Found by fuzz/fuzz_params.c: vcattn_gpu_params_init and
 * vcattn_attention_params_init multiplied the sizes for the strides in
 * int64 without a check (signed overflow, undefined behaviour, for e.g.
 * heads = 2^62).  Now an overflowing stride is INT64_MAX and validation
 * refuses the call. */
TEST(params_init_with_huge_sizes_is_refused_not_undefined) {
    static float dummy[4];
    const int64_t big = (int64_t)1 << 62;
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, 1, big, 2, 2, 64, dummy, dummy, dummy, dummy);
    CHECK(p.q_stride[0] == INT64_MAX && p.q_stride[1] == 128 && p.q_stride[2] == 64);
    CHECK_STATUS(vcattn_attention_params_validate(&p), VCATTN_STATUS_SIZE_OVERFLOW);
    vcattn_attention_params_init(&p, 2, 1, big, 1, 128, dummy, dummy, dummy, dummy);
    CHECK(p.q_stride[1] == INT64_MAX && p.k_stride[1] == 128);
    CHECK(vcattn_attention_params_validate(&p) != VCATTN_STATUS_SUCCESS);
    vcattn_gpu_params g;
    vcattn_gpu_params_init(&g, 1, big, 1, 1, 64, dummy, dummy, dummy, dummy);
    CHECK(g.q_stride[0] == INT64_MAX && g.k_stride[0] == INT64_MAX && g.q_stride[1] == 64);
    CHECK(vcattn_gpu_params_validate(&g) != VCATTN_STATUS_SUCCESS);
    /* ordinary sizes keep the contiguous strides */
    vcattn_gpu_params_init(&g, 2, 3, 5, 7, 64, dummy, dummy, dummy, dummy);
    CHECK(g.q_stride[0] == 3 * 5 * 64 && g.k_stride[1] == 7 * 64 && g.o_stride[2] == 64);
}

/* Found by fuzz/fuzz_params.c: a row_tv stride near INT64_MAX (valid: any
 * stride >= 1 is) overflowed int64 in the count of sampled rows (UB).  With
 * such a stride only row 0 of each (batch, head) is sampled, and its total
 * variation is the one a stride of 1 gives it. */
TEST(row_tv_with_a_huge_stride_samples_row_zero) {
    static edge_inputs x;
    edge_random(&x);
    static float out[EB * EH * ESQ * ED];
    double tv1[EB * EH * ESQ], tvbig[EB * EH] = {-1.0, -1.0};
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, out);
    vcattn_method_config cfg;
    vcattn_method_config_get(VCATTN_METHOD_SAGE2_8BIT, &cfg);
    vcattn_sim_outputs one = {NULL, tv1, 1, NULL}, big = {NULL, tvbig, INT64_MAX, NULL};
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, &one), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, &big), VCATTN_STATUS_SUCCESS);
    for (int bh = 0; bh < EB * EH; ++bh)
        CHECK_MSG(tvbig[bh] == tv1[bh * ESQ] && tv1[bh * ESQ] > 0.0, "(b,h) %d: %g vs %g", bh, tvbig[bh], tv1[bh * ESQ]);
}

/* Found by fuzz/fuzz_params.c: with V near FLT_MAX and per-channel E4M3 V
 * (sage2-8bit, the V-Smooth 8-bit methods), o was right but the error-budget
 * output o_pq_v (quantized P, scaled up to 448, times the exact V, summed in
 * FP32) was Inf with SUCCESS.  The exact V of that sum is now held times a
 * power of two like the other formats', and an o_pq_v beyond FP32 is refused. */
TEST(o_pq_v_stays_finite_for_v_near_flt_max) {
    static edge_inputs x;
    edge_random(&x);
    const int64_t nq = EB * EH * ESQ * ED, nk = EB * EH * ESKV * ED;
    scale_all(x.v, (int)nk, 3e37, 0.0); /* max |V| ~ 1.3e38 */
    static float ref[EB * EH * ESQ * ED], out[EB * EH * ESQ * ED], pqv[EB * EH * ESQ * ED];
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, ref);
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
    p.o = out;
    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) {
        vcattn_method_config cfg;
        vcattn_method_config_get((vcattn_method)m, &cfg);
        vcattn_sim_outputs extra = {pqv, NULL, 1, NULL};
        const char *name = vcattn_method_name((vcattn_method)m);
        CHECK_MSG(vcattn_simulate_attention(&p, &cfg, NULL, &extra) == VCATTN_STATUS_SUCCESS, "%s", name);
        CHECK_MSG(all_finite(out, nq) && all_finite(pqv, nq), "%s: o or o_pq_v not finite", name);
        /* P_q V is the reference up to the P path's error */
        const double r = rel_l2(ref, pqv, nq), bound = cfg.qk_format == VCATTN_QK_FORMAT_NVFP4 ? 0.4 : 0.1;
        CHECK_MSG(r < bound, "%s: o_pq_v rel_l2 %.4g", name, r);
    }
}

/* Found by fuzz/fuzz_params.c: with K smoothing, Q of ~1e37 and K with a
 * channel mean of ~10 keep the smoothed scores in FP32, so o was answered,
 * but the LSE adds q.mean(K) back (~1e39) and was stored as Inf with
 * SUCCESS.  An LSE beyond FP32 is now SCORE_OVERFLOW, in the simulation and
 * the reference alike; without lse both still answer o.  K's mean is 100
 * here: with 10, q.mean(K) sm_scale ~ 1e38 |z| (z ~ N(0, 1) per row) stayed
 * inside FP32 on most seeds (the test passed on the default seed only). */
TEST(lse_beyond_fp32_is_a_clear_status) {
    static edge_inputs x;
    edge_random(&x);
    const int64_t nq = EB * EH * ESQ * ED, nk = EB * EH * ESKV * ED;
    scale_all(x.q, (int)nq, 1e37, 0.0);
    scale_all(x.k, (int)nk, 1.0, 100.0);
    static float out[EB * EH * ESQ * ED], lse[EB * EH * ESQ];
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, out);
    vcattn_method_config cfg;
    vcattn_method_config_get(VCATTN_METHOD_SAGE2_8BIT, &cfg); /* smooth_k */
    CHECK(cfg.smooth_k);
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_SUCCESS);
    CHECK(all_finite(out, nq));
    p.lse = lse;
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SCORE_OVERFLOW);
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_SCORE_OVERFLOW);
    /* an LSE inside FP32 is still written: the same Q at 1e30 */
    scale_all(x.q, (int)nq, 1e-7, 0.0);
    CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, NULL, NULL), VCATTN_STATUS_SUCCESS);
    CHECK(all_finite(lse, EB * EH * ESQ));
}

/* Found by fuzz/fuzz_params.c (UBSan): K of +-3e38 with K smoothing makes
 * K - mean(K) = +-6e38, Inf in FP32, so the INT8 group scale was Inf and
 * x / scale NaN, and the NaN was cast to int8 (undefined behaviour in C; the
 * sanitizer build of this suite stops on it).  The code is now 0 for NaN, as
 * the GPU's conversion gives, and the call says SCORE_OVERFLOW. */
TEST(int8_quantizer_of_k_near_flt_max_is_defined) {
    static edge_inputs x;
    edge_random(&x);
    const int64_t nq = EB * EH * ESQ * ED, nk = EB * EH * ESKV * ED;
    scale_all(x.q, (int)nq, 1e-30, 0.0);
    /* every key 3e38 but the first of each head, -3e38: mean ~3e38, first key - mean ~ -6e38 */
    for (int64_t i = 0; i < nk; ++i) x.k[i] = (i / ED) % ESKV == 0 ? -3e38f : 3e38f;
    static float out[EB * EH * ESQ * ED];
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, EB, EH, ESQ, ESKV, ED, x.q, x.k, x.v, out);
    CHECK_STATUS(vcattn_reference_attention(&p), VCATTN_STATUS_SUCCESS); /* FP64: exact */
    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) {
        vcattn_method_config cfg;
        vcattn_method_config_get((vcattn_method)m, &cfg);
        const vcattn_status st = vcattn_simulate_attention(&p, &cfg, NULL, NULL);
        CHECK_MSG(st == VCATTN_STATUS_SUCCESS || st == VCATTN_STATUS_SCORE_OVERFLOW, "%s: %s",
                  vcattn_method_name((vcattn_method)m), vcattn_status_string(st));
        if (st == VCATTN_STATUS_SUCCESS) CHECK(all_finite(out, nq));
        if (cfg.smooth_k) CHECK_STATUS(st, VCATTN_STATUS_SCORE_OVERFLOW);
    }
}
