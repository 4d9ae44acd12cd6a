/* The simulation's contract, pinned: on fixed inputs, the exact bits of every
 * format's codes and scales, of each method's output, LSE and P_q V, and of
 * the planner's result at a fixed iteration count.
 *
 * The other tests check properties (accuracy bounds, agreement between
 * paths); a change that keeps them but moves the numerics - a rounding mode,
 * a scale's epsilon, the order of a sum, a group map - shows only here.  The
 * GPU kernel is checked against this simulation bit for bit where the
 * contract says so, so every bit of it matters.
 *
 * The inputs come from an integer generator (no libm), independent of the
 * test seed.  Each value below is a 64-bit FNV-1a hash of the result's bit
 * patterns.  When a change of the numerics is intended, review it, then
 * rerun with VCATTN_GOLDEN_PRINT=1 (`build/vcattn_tests golden`) and paste
 * the printed table; say why in the commit (and docs/method.md if the
 * contract changed). */
#include <stdlib.h>
#include <string.h>

#include "numerics.h"
#include "test.h"
#include "test_configs.h"
#include "vcattn.h"

/* ---- hashing and the table ------------------------------------------------ */

typedef struct { uint64_t h; } fnv;

static void fnv_bytes(fnv *f, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; ++i) f->h = (f->h ^ b[i]) * 0x100000001B3ull;
}
static void fnv_f32(fnv *f, float x) {
    const uint32_t u = vc_f32_bits(x);
    fnv_bytes(f, &u, sizeof u);
}
static void fnv_floats(fnv *f, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) fnv_f32(f, x[i]);
}

typedef struct {
    const char *name;
    uint64_t want;
} golden;

static const golden k_golden[] = {
#include "test_golden_table.h"
};

static int printing(void) { return getenv("VCATTN_GOLDEN_PRINT") != NULL; }

static void check_golden(const char *name, uint64_t got) {
    if (printing()) printf("    {\"%s\", 0x%016llxull},\n", name, (unsigned long long)got);
    for (size_t i = 0; i < sizeof k_golden / sizeof k_golden[0]; ++i)
        if (strcmp(k_golden[i].name, name) == 0) {
            CHECK_MSG(k_golden[i].want == got,
                      "golden %s: got 0x%016llx, want 0x%016llx - the simulation's numerics changed "
                      "(if intended: VCATTN_GOLDEN_PRINT=1, see tests/test_golden.c)",
                      name, (unsigned long long)got, (unsigned long long)k_golden[i].want);
            return;
        }
    CHECK_MSG(0, "golden %s: no entry in tests/test_golden_table.h (got 0x%016llx)", name,
              (unsigned long long)got);
}

/* ---- fixed inputs ----------------------------------------------------------- */

/* test.h's generator with a fixed seed (not test_seed()); values built from
 * integers only (exact floats, no libm): uniform on [-1, 1) in steps of 2^-23 */
static float fixed_uniform(test_rng *r) { return (float)((int64_t)(test_rng_next(r) >> 40) - (1 << 23)) * 0x1p-23f; }
/* a bell-shaped value: the sum of four uniforms (variance 4/3) */
static float fixed_bell(test_rng *r) {
    return fixed_uniform(r) + fixed_uniform(r) + fixed_uniform(r) + fixed_uniform(r);
}

typedef struct {
    int64_t B, H, Sq, Skv, D;
    float *q, *k, *v;
} fixed_problem;

/* Q sharp enough that rows are not flat, K and V with channel offsets (K and
 * V smoothing act), V with a massive token every 50 (an outlier group). */
static fixed_problem fixed_problem_make(int64_t B, int64_t H, int64_t Sq, int64_t Skv, int64_t D, float q_gain,
                                        uint64_t seed) {
    fixed_problem pr = {B, H, Sq, Skv, D, NULL, NULL, NULL};
    test_rng r = {seed};
    const int64_t nq = B * H * Sq * D, nk = B * H * Skv * D;
    pr.q = (float *)malloc(sizeof(float) * (size_t)nq);
    pr.k = (float *)malloc(sizeof(float) * (size_t)nk);
    pr.v = (float *)malloc(sizeof(float) * (size_t)nk);
    float koff[128], voff[128];
    for (int64_t d = 0; d < D; ++d) {
        koff[d] = 2.0f * fixed_uniform(&r);
        voff[d] = 1.5f * fixed_uniform(&r);
    }
    for (int64_t i = 0; i < nq; ++i) pr.q[i] = q_gain * fixed_bell(&r);
    for (int64_t i = 0; i < nk; ++i) {
        const int64_t d = i % D, tok = (i / D) % Skv;
        pr.k[i] = fixed_bell(&r) + koff[d];
        pr.v[i] = fixed_bell(&r) * (tok % 50 == 0 ? 8.0f : 1.0f) + voff[d];
    }
    return pr;
}

static void fixed_problem_free(fixed_problem *pr) {
    free(pr->q);
    free(pr->k);
    free(pr->v);
}

/* ---- codes and scales of every format -------------------------------------- */

/* A fixed spread of floats: every binade from 2^-30 to 2^20, signs, exact ties
 * of E4M3 and BF16, and the formats' edges. */
static int golden_floats(float *x, int cap) {
    int n = 0;
    test_rng r = {0x601DE4ull};
    for (int e = -30; e <= 20 && n + 24 <= cap; ++e)
        for (int i = 0; i < 24; ++i) {
            const float m = 1.0f + 0.5f * (fixed_uniform(&r) + 1.0f);  /* [1, 2) */
            x[n++] = ldexpf(i & 1 ? -m : m, e);
        }
    const float edges[] = {0.0f, -0.0f, 448.0f, 464.0f, 480.0f, 1e30f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f,
                           1.0625f, 1.1875f, 0x1.01p0f, 0x1.018p0f, 65504.0f, 65520.0f, 6.0f, 5.0f, 0.25f,
                           0.75f, 2.5f, 127.5f, -2.5f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0] && n < cap; ++i) x[n++] = edges[i];
    return n;
}

TEST(golden_format_codes) {
    float x[1400];
    const int n = golden_floats(x, 1400);
    fnv e4m3 = {0xCBF29CE484222325ull}, e2m1 = e4m3, bf16 = e4m3, fp16 = e4m3, fp16s = e4m3, int8 = e4m3;
    for (int i = 0; i < n; ++i) {
        const uint8_t c = vc_e4m3_encode(x[i]);
        fnv_bytes(&e4m3, &c, 1);
        fnv_f32(&e4m3, vc_e4m3_round(x[i]));
        const uint8_t f4 = vc_e2m1_encode(x[i]);
        fnv_bytes(&e2m1, &f4, 1);
        fnv_f32(&e2m1, vc_e2m1_round(x[i]));
        fnv_f32(&bf16, vc_bf16_round(x[i]));
        fnv_f32(&fp16, vc_fp16_round(x[i]));
        const int k = vc_fp16_range_exp(fabsf(x[i]));
        fnv_bytes(&fp16s, &k, sizeof k);
        fnv_f32(&fp16s, vc_fp16_round_shifted(x[i], k));
        const float s = vc_int8_sage_scale(fabsf(x[i]));
        const int8_t q1 = vc_int8_quantize(x[i] * 0.37f, 1.0f / vc_int8_scale(fabsf(x[i]))),
                     q2 = vc_int8_sage_quantize(x[i] * 0.37f, s);
        fnv_f32(&int8, s);
        fnv_f32(&int8, vc_int8_scale(fabsf(x[i])));
        fnv_bytes(&int8, &q1, 1);
        fnv_bytes(&int8, &q2, 1);
    }
    check_golden("codes_e4m3", e4m3.h);
    check_golden("codes_e2m1", e2m1.h);
    check_golden("codes_bf16", bf16.h);
    check_golden("codes_fp16", fp16.h);
    check_golden("codes_fp16_shifted", fp16s.h);
    check_golden("codes_int8_scales", int8.h);
}

TEST(golden_scales_of_v_nvfp4_and_the_row_sum) {
    float x[1400];
    const int n = golden_floats(x, 1400);
    fnv vch = {0xCBF29CE484222325ull}, nv = vch, rs = vch, bm = vch;
    for (int i = 0; i + 1 < n; ++i) {
        float s, inv;
        vc_v_channel_scale(fabsf(x[i]), fabsf(x[i + 1]) * 300.0f, &s, &inv);
        fnv_f32(&vch, s);
        fnv_f32(&vch, inv);
        fnv_f32(&rs, vc_rowsum_f16_split(fabsf(x[i]) * 1000.0f));
    }
    for (int i = 0; i + 16 <= n; i += 16) {
        uint8_t codes[16];
        float deq[16], amax = 0.0f;
        for (int j = 0; j < 16; ++j) amax = fmaxf(amax, fabsf(x[i + j]));
        const float ts = vc_nvfp4_tensor_scale(amax * 3.0f);
        const uint8_t sc = vc_nvfp4_quantize_block(x + i, 16, 1, ts, codes, deq);
        fnv_f32(&nv, ts);
        fnv_bytes(&nv, &sc, 1);
        fnv_bytes(&nv, codes, sizeof codes);
        fnv_floats(&nv, deq, 16);
    }
    const int64_t blocks[] = {1, 2, 40, 79, 80, 81, 160, 591, 100000};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; ++i) {
        const float d = vc_blockmax_descent(blocks[i]);
        fnv_f32(&bm, d);
        fnv_f32(&bm, vc_blockmax_scale(3.5f, d, 1.25f));
        fnv_f32(&bm, vc_blockmax_scale(-7.0f, d, -7.5f));
    }
    check_golden("scales_v_channel", vch.h);
    check_golden("scales_nvfp4", nv.h);
    check_golden("rowsum_f16_split", rs.h);
    check_golden("blockmax_scale", bm.h);
}

/* ExpCast's codes as the kernel computes them: the bracket from an INT32
 * score, a scale a and the running max (the plain line's saturated form, the
 * tail line's biased one), and the direct bracket of huge scales. */
TEST(golden_expcast_codes) {
    fnv plain = {0xCBF29CE484222325ull}, tail = plain, direct = plain, exp_path = plain;
    const float as[] = {0x1p-12f, 1.1e-3f, 3.7e-3f, 0x1p-8f};
    for (size_t ai = 0; ai < sizeof as / sizeof as[0]; ++ai) {
        const float a = as[ai];
        const float m = 9000.0f * a / 8.0f; /* the running max: a score of 9000 */
        for (int s = -16000; s <= 9000; s += 7) {
            const uint8_t c1 = vc_expcast_code_from_bracket(vc_expcast_int_bracket(a, (float)s, m));
            const uint8_t c2 = vc_expcast_tail_code_biased(vc_expcast_tail_biased_bracket(a, (float)s, m));
            fnv_bytes(&plain, &c1, 1);
            fnv_bytes(&tail, &c2, 1);
        }
    }
    for (int i = 0; i <= 4000; ++i) {
        const float u = -0.006f * (float)i;
        const uint8_t c1 = vc_expcast_code_from_bracket(vc_expcast_bracket_direct(u, 0.0f, VC_EXPCAST_CONST));
        const uint8_t c2 = vc_expcast_tail_code_biased(vc_expcast_bracket_direct(u, 0.0f, VC_EXPCAST_TAIL_BIASED_CONST));
        const uint8_t c3 = vc_expcast_code(u), c4 = vc_expcast_tail_code(u);
        fnv_bytes(&direct, &c1, 1);
        fnv_bytes(&direct, &c2, 1);
        fnv_bytes(&direct, &c3, 1);
        fnv_bytes(&direct, &c4, 1);
        const uint8_t ce = vc_exp_then_cast_code(u);
        fnv_bytes(&exp_path, &ce, 1);
    }
    check_golden("expcast_codes", plain.h);
    check_golden("expcast_tail_codes", tail.h);
    check_golden("expcast_direct_codes", direct.h);
    check_golden("exp_then_cast_codes", exp_path.h);
}

/* ---- the planner and the methods ------------------------------------------- */

static int32_t *fixed_plan(const fixed_problem *pr, fnv *f) {
    const int64_t bh = pr->B * pr->H;
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)(bh * pr->Skv));
    int32_t *labels = (int32_t *)malloc(sizeof(int32_t) * (size_t)(bh * pr->Skv));
    float *cent = (float *)malloc(sizeof(float) * (size_t)(bh * 16 * pr->D));
    vcattn_kmeans_params kp;
    vcattn_kmeans_params_init(&kp);
    kp.clusters = 16;
    kp.iterations = 3; /* fewer than it takes to converge: every Lloyd step shows */
    kp.seed = 11;
    int64_t vs[3] = {pr->H * pr->Skv * pr->D, pr->Skv * pr->D, pr->D};
    CHECK_STATUS(vcattn_vsmooth_plan(pr->v, pr->B, pr->H, pr->Skv, pr->D, vs, &kp, perm, labels, cent),
                 VCATTN_STATUS_SUCCESS);
    fnv_bytes(f, perm, sizeof(int32_t) * (size_t)(bh * pr->Skv));
    fnv_bytes(f, labels, sizeof(int32_t) * (size_t)(bh * pr->Skv));
    fnv_floats(f, cent, bh * 16 * pr->D);
    free(labels);
    free(cent);
    return perm;
}

/* Every method on one problem: output, LSE and P_q V (the error budget's split). */
static void golden_methods(const char *tag, int64_t B, int64_t H, int64_t Sq, int64_t Skv, int64_t D,
                           float q_gain, uint64_t seed) {
    fixed_problem pr = fixed_problem_make(B, H, Sq, Skv, D, q_gain, seed);
    char name[96];
    fnv plan = {0xCBF29CE484222325ull};
    int32_t *perm = fixed_plan(&pr, &plan);
    snprintf(name, sizeof name, "%s_plan", tag);
    check_golden(name, plan.h);
    const int64_t no = B * H * Sq * D;
    float *o = (float *)malloc(sizeof(float) * (size_t)no), *pqv = (float *)malloc(sizeof(float) * (size_t)no);
    float *lse = (float *)malloc(sizeof(float) * (size_t)(B * H * Sq));
    /* the shipped methods, then configs a caller can build: the retired methods' P paths
     * (test_configs.h), and ExpCast's P (plain and tail) with l from the FP32 exponentials
     * instead of the quantized P (the P scale's value then enters l) */
    static const struct { const char *name; int base; int fp32_rowsum; } custom[4] = {
        {"expcast-tail", VCATTN_METHOD_COUNT + 0, 0}, {"expcast-blockmax", VCATTN_METHOD_COUNT + 1, 0},
        {"expcast-fp32-rowsum", VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT, 1},
        {"expcast-tail-fp32-rowsum", VCATTN_METHOD_COUNT + 0, 1}};
    for (int m = 0; m < VCATTN_METHOD_COUNT + 4; ++m) {
        vcattn_method_config cfg;
        const int c = m - VCATTN_METHOD_COUNT;
        CHECK_STATUS(test_config_get(c < 0 ? (vcattn_method)m : (vcattn_method)custom[c].base, &cfg),
                     VCATTN_STATUS_SUCCESS);
        if (c >= 0 && custom[c].fp32_rowsum) cfg.rowsum_from_quantized_p = 0;
        const char *mname = c < 0 ? vcattn_method_name((vcattn_method)m) : custom[c].name;
        vcattn_attention_params p;
        vcattn_attention_params_init(&p, B, H, Sq, Skv, D, pr.q, pr.k, pr.v, o);
        p.lse = lse;
        vcattn_sim_outputs extra = {pqv, NULL, 1, NULL};
        CHECK_STATUS(vcattn_simulate_attention(&p, &cfg, cfg.v_smooth ? perm : NULL, &extra),
                     VCATTN_STATUS_SUCCESS);
        fnv out = {0xCBF29CE484222325ull}, l = out, e = out;
        fnv_floats(&out, o, no);
        fnv_floats(&l, lse, B * H * Sq);
        fnv_floats(&e, pqv, no);
        snprintf(name, sizeof name, "%s_%s_out", tag, mname);
        check_golden(name, out.h);
        snprintf(name, sizeof name, "%s_%s_lse", tag, mname);
        check_golden(name, l.h);
        snprintf(name, sizeof name, "%s_%s_pqv", tag, mname);
        check_golden(name, e.h);
    }
    free(o);
    free(pqv);
    free(lse);
    free(perm);
    fixed_problem_free(&pr);
}

/* Two tiles of Q (the second partial), 3 key blocks (odd: a pair and a single
 * block pending at the end; the last one short), head_dim 128. */
TEST(golden_methods_odd_blocks_d128) { golden_methods("odd128", 1, 2, 130, 300, 128, 1.25f, 0xA11CE5ull); }

/* 4 key blocks (even: the last pair's first block kept to the end, short last
 * block), two batches, head_dim 64. */
TEST(golden_methods_even_blocks_d64) { golden_methods("even64", 2, 1, 64, 500, 64, 1.25f, 0xB0B5ull); }

/* Sharp rows (Q x 8: ExpCast's scale a = 8 c above 2^-7, where the bracket is
 * evaluated from the FP32 score, softmax_numerics.h vc_expcast_bracket_direct). */
TEST(golden_methods_sharp_rows) { golden_methods("sharp64", 1, 1, 64, 256, 64, 10.0f, 0x5EA4Bull); }

/* The planner on V with repeated tokens (a static background repeats its rows
 * exactly): initial centroids coincide and distances tie, so the tie rule
 * (the lowest centroid index wins) decides labels. */
TEST(golden_plan_with_ties) {
    const int64_t S = 400, D = 64, period = 37;
    fixed_problem pr = fixed_problem_make(1, 1, 1, S, D, 1.0f, 0x7135ull);
    for (int64_t j = period; j < S; ++j) memcpy(pr.v + j * D, pr.v + (j % period) * D, sizeof(float) * (size_t)D);
    fnv f = {0xCBF29CE484222325ull};
    int32_t *perm = fixed_plan(&pr, &f);
    check_golden("ties_plan", f.h);
    free(perm);
    fixed_problem_free(&pr);
}

/* Wide rows (Q x 3 at head_dim 128: scores ~6 octaves apart): most keys far
 * below the row max, P's underflow cut and its subnormal codes in play. */
TEST(golden_methods_wide_rows) { golden_methods("wide128", 1, 1, 128, 384, 128, 3.0f, 0x31DEull); }
