/* Tests of the shared numerics: E4M3, E2M1, NVFP4, BF16, FP16, INT8, ExpCast. */
#include <math.h>
#include <string.h>

#include "numerics.h"
#include "test.h"
#include "vcattn.h"
#include "vcattn_research.h"

TEST(e4m3_all_codes_round_trip) {
    for (int c = 0; c < 256; ++c) {
        float x = vc_e4m3_decode((uint8_t)c);
        if ((c & 0x7F) == 0x7F) {
            CHECK_MSG(x != x, "code %#x should decode to NaN", c);
            continue;
        }
        CHECK_MSG(vc_e4m3_encode(x) == c, "code %#x -> %g -> %#x", c, x, vc_e4m3_encode(x));
    }
}

TEST(e4m3_hand_worked_cases) {
    struct { float x; uint8_t code; } cases[] = {
        {1.0f, 0x38}, {-1.0f, 0xB8}, {448.0f, 0x7E}, {-448.0f, 0xFE},
        {500.0f, 0x7E}, {1e30f, 0x7E}, {INFINITY, 0x7E}, {-INFINITY, 0xFE}, /* satfinite */
        {0.001953125f, 0x01},          /* 2^-9, smallest subnormal */
        {0.0009765625f, 0x00},         /* 2^-10: tie between 0 and 2^-9 -> even (0) */
        {0.0029296875f, 0x02},         /* 3 * 2^-10: tie between codes 1 and 2 -> even (2) */
        {1.0625f, 0x38},               /* tie between 1.0 (m=0) and 1.125 (m=1) -> 1.0 */
        {1.1875f, 0x3A},               /* tie between 1.125 (m=1) and 1.25 (m=2) -> 1.25 */
        {0.015625f, 0x08},             /* 2^-6, smallest normal */
        {0.0146484375f, 0x08},         /* 7.5 * 2^-9: tie between subnormal 7 and normal 8 -> 8 */
        {416.0f, 0x7D},                /* 1.625 * 256, representable */
        {0.0f, 0x00}, {-0.0f, 0x80},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        CHECK_MSG(vc_e4m3_encode(cases[i].x) == cases[i].code, "encode(%g) = %#x, want %#x",
                  cases[i].x, vc_e4m3_encode(cases[i].x), cases[i].code);
    CHECK(vc_e4m3_encode(NAN) == 0x7F);
    CHECK(vc_e4m3_decode(0x7E) == 448.0f);
    CHECK(vc_e4m3_decode(0x01) == 0.001953125f);
    /* 432 = tie between 416 (m=5, odd) and 448 (m=6, even) -> 448 */
    CHECK(vc_e4m3_encode(432.0f) == 0x7E);
    /* 400 = tie between 384 (m=4, even) and 416 (m=5) -> 384 */
    CHECK(vc_e4m3_encode(400.0f) == 0x7C);
}

TEST(e4m3_rounding_is_nearest_on_random_floats) {
    test_rng rng = {test_seed()};
    for (int i = 0; i < 200000; ++i) {
        float x = (float)(test_rng_normal(&rng) * exp2(20.0 * test_rng_uniform(&rng) - 12.0));
        float r = vc_e4m3_round(x);
        if (fabsf(x) > 448.0f) {
            CHECK(fabsf(r) == 448.0f);
            continue;
        }
        uint8_t c = vc_e4m3_encode(x);
        CHECK(vc_e4m3_decode(c) == r);
        /* no representable value is strictly closer */
        int mag = c & 0x7F;
        for (int n = mag - 1; n <= mag + 1; n += 2) {
            if (n < 0 || n > 0x7E) continue;
            float other = vc_e4m3_decode((uint8_t)((c & 0x80) | n));
            CHECK_MSG(fabsf(other - x) >= fabsf(r - x), "x=%g rounded to %g but %g is closer", x, r, other);
        }
    }
}

TEST(e2m1_codes_and_ties) {
    const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int c = 0; c < 16; ++c) {
        float x = vc_e2m1_decode((uint8_t)c);
        CHECK(fabsf(x) == mags[c & 7]);
        CHECK(vc_e2m1_encode(x) == c);
    }
    struct { float x; uint8_t code; } cases[] = {
        {0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4}, {2.5f, 0x4}, {3.5f, 0x6},
        {5.0f, 0x6}, {7.0f, 0x7}, {100.0f, 0x7}, {-5.5f, 0xF}, {-0.3f, 0x9}, {0.26f, 0x1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        CHECK_MSG(vc_e2m1_encode(cases[i].x) == cases[i].code, "e2m1(%g) = %#x, want %#x",
                  cases[i].x, vc_e2m1_encode(cases[i].x), cases[i].code);
}

TEST(nvfp4_block_quantization) {
    /* amax 12 -> block scale 2 (exact in E4M3): values / 2 land on E2M1 */
    float x[16] = {12, -12, 6, 3, 2, 1, 0.5f, 0, 8, -8, 4, -4, 1.5f, 2.5f, 5, 7};
    uint8_t codes[16];
    float deq[16];
    uint8_t sc = vc_nvfp4_quantize_block(x, 16, 1, 1.0f, codes, deq);
    CHECK(vc_e4m3_decode(sc) == 2.0f);
    const float want[16] = {12, -12, 6, 3, 2, 1, 0 /* 0.25 tie -> 0 */, 0, 8, -8, 4, -4,
                            2 /* 0.75 tie -> 1.0 */, 2 /* 1.25 -> 1.0 */, 4 /* 2.5 -> 2 */, 8 /* 3.5 -> 4 */};
    for (int i = 0; i < 16; ++i) CHECK_MSG(deq[i] == want[i], "deq[%d] = %g, want %g", i, deq[i], want[i]);
    /* with a tensor scale the block scale stays inside E4M3 and the error is bounded */
    test_rng rng = {test_seed()};
    float y[16], ydeq[16];
    float amax = 0.0f;
    for (int i = 0; i < 16; ++i) {
        y[i] = (float)(test_rng_normal(&rng) * 1e4);
        amax = fmaxf(amax, fabsf(y[i]));
    }
    float ts = vc_nvfp4_tensor_scale(amax);
    (void)vc_nvfp4_quantize_block(y, 16, 1, ts, NULL, ydeq);
    for (int i = 0; i < 16; ++i) CHECK(fabsf(ydeq[i] - y[i]) <= 0.26f * amax);
    /* an all-zero block stays zero with a zero scale */
    float z[16] = {0};
    CHECK(vc_e4m3_decode(vc_nvfp4_quantize_block(z, 16, 1, 1.0f, codes, deq)) == 0.0f);
    for (int i = 0; i < 16; ++i) CHECK(codes[i] == 0 && deq[i] == 0.0f);
}

TEST(bf16_and_fp16_rounding) {
    CHECK(vc_bf16_round(1.0f + 0x1.0p-8f) == 1.0f);                 /* tie -> even */
    CHECK(vc_bf16_round(1.0f + 0x1.8p-8f) == 1.0f + 0x1.0p-7f);      /* above the tie */
    CHECK(vc_bf16_round(1.0f + 0x1.0p-7f + 0x1.0p-8f) == 1.0f + 0x1.0p-6f); /* tie -> even (up) */
    CHECK(vc_bf16_to_f32(vc_bf16_bits(-2.5f)) == -2.5f);
    CHECK(vc_fp16_round(1.0f + 0x1.0p-11f) == 1.0f);
    CHECK(vc_fp16_round(1e6f) == 65504.0f);
    CHECK(vc_fp16_round(0x1.0p-25f) == 0.0f);      /* tie between 0 and 2^-24 -> 0 */
    CHECK(vc_fp16_round(0x1.8p-24f) == 0x1.0p-23f); /* 1.5 quanta -> 2 */
    CHECK(vc_fp16_to_f32(0x3C00) == 1.0f);
    CHECK(vc_fp16_to_f32(0xC000) == -2.0f);
    CHECK(vc_fp16_to_f32(0x0001) == 0x1.0p-24f);
    test_rng rng = {test_seed()};
    for (int i = 0; i < 100000; ++i) {
        float x = (float)(test_rng_normal(&rng) * 100.0);
        CHECK(fabsf(vc_bf16_round(x) - x) <= fabsf(x) * 0x1.0p-8f);
        CHECK(fabsf(vc_fp16_round(x) - x) <= fabsf(x) * 0x1.0p-11f + 0x1.0p-25f);
    }
}

TEST(int8_quantizers) {
    CHECK(vc_int8_quantize(127.4f, 1.0f) == 127);
    CHECK(vc_int8_quantize(300.0f, 1.0f) == 127);
    CHECK(vc_int8_quantize(-300.0f, 1.0f) == -127);
    CHECK(vc_int8_quantize(2.5f, 1.0f) == 2);       /* RNE */
    CHECK(vc_int8_sage_quantize(2.5f, 1.0f) == 3);  /* round half away, as SageAttention's Triton */
    CHECK(vc_int8_sage_quantize(-2.5f, 1.0f) == -3);
    float s = vc_int8_sage_scale(12.7f);
    CHECK(vc_int8_sage_quantize(12.7f, s) == 127);
    CHECK(vc_int8_sage_quantize(-12.7f, s) == -127);
}

TEST(expcast_facts_match_the_paper) {
    vcattn_expcast_facts f;
    CHECK_STATUS(vcattn_expcast_measure(100000, &f), VCATTN_STATUS_SUCCESS);
    CHECK_NEAR(f.agree_share, 0.796, 0.0006);
    CHECK_EQ_INT(f.max_code_diff, 1);
    CHECK_NEAR(f.ratio_min, 0.9290, 0.00006);
    CHECK_NEAR(f.ratio_max, 1.0745, 0.0001);
    CHECK_NEAR(f.row_tv_bound, 0.0364, 0.00006);
    CHECK_STATUS(vcattn_expcast_measure(4, &f), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(vcattn_expcast_measure(100, NULL), VCATTN_STATUS_NULL_POINTER);
}

TEST(expcast_code_edges) {
    CHECK(vc_expcast_code(0.0f) == 120);        /* the row max is 256 */
    CHECK(vc_e4m3_decode(120) == 256.0f);
    CHECK(vc_expcast_code(-20.0f) == 0);        /* underflow tail clamps to 0 */
    CHECK(vc_expcast_code(1.0f) == 120);        /* never above the max code */
    for (int k = 0; k <= 14; ++k)               /* exact powers of two land on the right code */
        CHECK(vc_expcast_code((float)-k) == vc_exp_then_cast_code((float)-k));
}

/* The kernel's ExpCast (softmax_numerics.h): sat(2^-24 bracket) converted to FP16 is
 * a subnormal whose pattern is clip[0,120](RNE(bracket)) for every bracket the
 * kernel can produce (<= 120 + beta), NaN included (the saturation gives 0).
 * The FP16 rounding here is the generic minifloat rounder, not the code. */
static uint8_t expcast_code_via_fp16_subnormal(float t) {
    float w = t * VC_EXPCAST_SAT_SCALE;
    w = w > 0.0f ? (w < 1.0f ? w : 1.0f) : 0.0f; /* fma.sat: [0, 1], NaN -> 0 */
    const float h = vc_fp16_round(w);
    const float bits = h / VC_EXPCAST_SAT_SCALE; /* a subnormal's pattern is h / 2^-24 */
    CHECK_MSG(h < 0x1p-14f && bits == floorf(bits), "t %.9g: FP16 %.9g is not a subnormal code", t, h);
    return (uint8_t)bits;
}

TEST(expcast_sat_code_is_rne_of_the_bracket) {
    test_rng r = {0xE9C457u};
    for (int i = 0; i < 200000; ++i) {
        /* brackets from deep underflow up to the max, a quarter of them exact .5 ties */
        float y = (float)(test_rng_uniform(&r) * 400.0 - 280.0);
        if (i % 4 == 0) y = floorf(y) + 0.5f;
        if (y > VC_EXPCAST_CONST) y = VC_EXPCAST_CONST;
        const uint8_t want = (uint8_t)(y > 0.0f ? rint(y) : 0.0);
        CHECK_MSG(expcast_code_via_fp16_subnormal(y) == want, "y %.9g: FP16 %d vs rne %d", y,
                  expcast_code_via_fp16_subnormal(y), want);
        CHECK(vc_expcast_code_from_bracket(y) == want);
    }
    CHECK(vc_expcast_code_from_bracket(-1.0e30f) == 0);
    CHECK(vc_expcast_code_from_bracket(NAN) == 0);
    CHECK(expcast_code_via_fp16_subnormal(NAN) == 0);
    CHECK(vc_expcast_code_from_bracket(VC_EXPCAST_CONST) == 120);
    CHECK(vc_expcast_code_from_bracket(2.5f) == 2 && vc_expcast_code_from_bracket(3.5f) == 4); /* ties to even */
}

/* The kernel evaluates the bracket with every term times 2^-24; that must be
 * exactly 2^-24 times the simulation's vc_expcast_int_bracket, and the
 * INT32-as-float form must stay within a few FP32 ulps of the exact affine
 * value. */
TEST(expcast_int_magic_bracket_tracks_the_affine_form) {
    test_rng r = {0x5EED5u};
    for (int i = 0; i < 100000; ++i) {
        float a = (float)(1e-5 + test_rng_uniform(&r) * 1e-3); /* 8c for realistic scales */
        if (i % 10 == 0) a = ldexpf(a, -(int)(test_rng_uniform(&r) * 90.0)); /* tiny scales too */
        const float s = (float)(int)((test_rng_uniform(&r) * 2.0 - 1.0) * 2064512.0); /* |INT8 QK| bound */
        const float m = (float)(test_rng_uniform(&r) * 400.0 - 200.0) * (a / 1e-3f);
        const float got = vc_expcast_int_bracket(a, s, m);
        const float a_s = a * VC_EXPCAST_SAT_SCALE;
        const float w = fmaf(a_s, VC_EXPCAST_INT_MAGIC + s, vc_expcast_sat_bias(vc_expcast_sat_bias_pre(a_s), m));
        if (fabsf(got) >= 0x1p-102f) /* the scaled value is FP32-normal: exact */
            CHECK_MSG(w == got * VC_EXPCAST_SAT_SCALE, "a %g s %g m %g: %.9g vs 2^-24 %.9g", a, s, m, w, got);
        const double exact = (double)a * (double)s + ((double)VC_EXPCAST_CONST - 8.0 * (double)m);
        /* error: the fp32 roundings of a*M (~a * 1.26e7) and of the bias, a few ulps of them */
        const double tol = 4.0 * 0x1.0p-24 * ((double)a * 12582912.0 + fabs(exact) + 8.0 * fabs((double)m) + 120.0);
        CHECK_MSG(fabs(got - exact) <= tol, "a %g s %g m %g: %.9g vs %.9g", a, s, m, got, exact);
    }
}

/* r split into FP16 hi + lo for the tensor-core restore carries ~22 bits of r. */
TEST(rowsum_f16_split_keeps_22_bits) {
    test_rng r = {0xF16u};
    for (int i = 0; i < 200000; ++i) {
        const float x = (float)(test_rng_uniform(&r) * 32768.0);
        const float y = vc_rowsum_f16_split(x);
        CHECK_MSG(fabsf(y - x) <= x * 0x1.0p-21f + 0x1.0p-24f, "r %.9g split %.9g", x, y);
    }
    CHECK(vc_rowsum_f16_split(0.0f) == 0.0f);
    CHECK(vc_rowsum_f16_split(256.0f) == 256.0f);
}

TEST(exported_codecs_validate) {
    float x[3] = {1.0f, -3.0f, 500.0f}, y[3];
    uint8_t c[3];
    CHECK_STATUS(vcattn_encode_e4m3(x, c, 3), VCATTN_STATUS_SUCCESS);
    CHECK(c[0] == 0x38 && c[1] == 0xC4 && c[2] == 0x7E);
    CHECK_STATUS(vcattn_decode_e4m3(c, y, 3), VCATTN_STATUS_SUCCESS);
    CHECK(y[0] == 1.0f && y[1] == -3.0f && y[2] == 448.0f);
    CHECK_STATUS(vcattn_encode_e2m1(x, c, 3), VCATTN_STATUS_SUCCESS);
    CHECK(c[0] == 0x2 && c[1] == 0xD && c[2] == 0x7); /* 1, -3, 6 (saturated) */
    CHECK_STATUS(vcattn_encode_e4m3(NULL, c, 3), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_encode_e4m3(x, c, -1), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_round_bf16(x, NULL, 1), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_encode_e4m3(NULL, NULL, 0), VCATTN_STATUS_SUCCESS);

    /* the exported arrays are the shared numerics, element for element */
    enum { N = 4096 };
    static float in[N], out[N], out2[N];
    static uint8_t codes[N], codes2[N];
    test_rng r = {test_seed()};
    for (int i = 0; i < N; ++i) in[i] = (float)(test_rng_normal(&r) * exp(3.0 * test_rng_normal(&r)));
    int bad_e4m3 = 0, bad_e2m1 = 0, bad_bf16 = 0, bad_dec = 0;
    CHECK_STATUS(vcattn_encode_e4m3(in, codes, N), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_decode_e4m3(codes, out, N), VCATTN_STATUS_SUCCESS);
    for (int i = 0; i < N; ++i) {
        bad_e4m3 += codes[i] != vc_e4m3_encode(in[i]);
        bad_dec += out[i] != vc_e4m3_round(in[i]);
    }
    CHECK_STATUS(vcattn_encode_e2m1(in, codes2, N), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_decode_e2m1(codes2, out2, N), VCATTN_STATUS_SUCCESS);
    for (int i = 0; i < N; ++i) {
        bad_e2m1 += codes2[i] != vc_e2m1_encode(in[i]);
        bad_dec += out2[i] != vc_e2m1_round(in[i]);
    }
    CHECK_STATUS(vcattn_round_bf16(in, out, N), VCATTN_STATUS_SUCCESS);
    for (int i = 0; i < N; ++i) bad_bf16 += vc_f32_bits(out[i]) != vc_f32_bits(vc_bf16_round(in[i]));
    CHECK_EQ_INT(bad_e4m3, 0);
    CHECK_EQ_INT(bad_e2m1, 0);
    CHECK_EQ_INT(bad_bf16, 0);
    CHECK_EQ_INT(bad_dec, 0);

    /* every status has its own sentence */
    for (int s = 0; s <= VCATTN_STATUS_COUNT; ++s) {
        const char *a = vcattn_status_string((vcattn_status)s);
        CHECK(a != NULL && *a);
        for (int t = 0; t < s && a; ++t) CHECK(strcmp(a, vcattn_status_string((vcattn_status)t)) != 0);
    }
    CHECK(strcmp(vcattn_status_string(VCATTN_STATUS_COUNT), "unknown status") == 0);
}

/* The unrounded maps of the P-path analysis (dev/ppath_analysis.c): the
 * linear decode hits every code exactly, interpolates between neighbours, and
 * rounding the unrounded codes gives the shipped codes. */
TEST(expcast_linear_maps_for_the_analysis) {
    for (int c = 0; c <= 126; ++c) CHECK(vc_e4m3_decode_linear((double)c) == (double)vc_e4m3_decode((uint8_t)c));
    CHECK(vc_e4m3_decode_linear(-3.0) == 0.0);
    CHECK(vc_e4m3_decode_linear(0.5) == 0x1.0p-10);            /* half the smallest subnormal */
    CHECK(vc_e4m3_decode_linear(8.5) == 0x1.0p-6 * 1.0625);     /* 2^-6 (1 + 0.5/8) */
    CHECK(vc_e4m3_decode_linear(119.5) == 248.0);               /* 2^7 (1 + 7.5/8) */
    CHECK(vc_e4m3_decode_linear(130.0) == 448.0);
    int bad = 0;
    for (int i = 0; i < 4000; ++i) {
        const float u = -0.005f * (float)i; /* 0 .. -20 octaves */
        bad += vc_expcast_code(u) != vc_expcast_code_from_bracket((float)vc_expcast_code_linear(u));
        /* line 1 alone above code ~6: the tail code is the rounded line-1 code */
        const double t = vc_expcast_tail_code_linear(u);
        if (t > 8.0) bad += fabs((double)vc_expcast_tail_code(u) - t) > 0.5;
        /* below: within one code of the unrounded maximum of the two lines */
        else if (t > 1.0) bad += fabs((double)vc_expcast_tail_code(u) - t) > 1.0;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(fabs(vc_expcast_tail_code_linear(-30.0) - (0.2197265625 * (8.0 * -30.0 + 125.65) + 4.625)) < 1e-6);
}

#ifndef VCATTN_HAVE_CUDA
/* Without CUDA every GPU entry point links and answers NOT_BUILT. */
TEST(gpu_calls_report_not_built_without_cuda) {
    vcattn_gpu_params p;
    vcattn_gpu_params_init(&p, 1, 1, 8, 8, 64, NULL, NULL, NULL, NULL);
    size_t bytes = 0;
    CHECK_STATUS(vcattn_gpu_workspace_size(&p, &bytes), VCATTN_STATUS_NOT_BUILT);
    CHECK_STATUS(vcattn_gpu_attention(&p, NULL, 0, NULL), VCATTN_STATUS_NOT_BUILT);
    CHECK_STATUS(vcattn_gpu_device_check(), VCATTN_STATUS_NOT_BUILT);
    vcattn_gpu_reference_params r;
    memset(&r, 0, sizeof r);
    CHECK_STATUS(vcattn_gpu_reference_workspace_size(&r, &bytes), VCATTN_STATUS_NOT_BUILT);
    CHECK_STATUS(vcattn_gpu_reference_rows(&r, NULL, 0, NULL), VCATTN_STATUS_NOT_BUILT);
    vcattn_gpu_plan *plan = (vcattn_gpu_plan *)&p;
    CHECK_STATUS(vcattn_gpu_plan_create(1, 1, 1, 256, 128, 64, &plan), VCATTN_STATUS_NOT_BUILT);
    CHECK(plan == NULL);
    vcattn_gpu_plan_destroy(plan);
}
#endif

/* The GPU's V channel scale (numerics.h, vc_v_channel_scale_any) over
 * channel maxima from 1e-40 (BF16 subnormal V) to 1e30, with and without a
 * large mean: ordinary channels get exactly vc_v_channel_scale's pair and
 * pre = 1; for every channel the quantizer's ((v * pre) * inv) of the channel
 * max is finite, within E4M3's range and within 1e-3 of max / scale (so the
 * codes and the epilogue's scale agree), and the scale is > 0. */
TEST(v_channel_scale_any_magnitude) {
    test_rng rng = {test_seed()};
    for (int i = 0; i < 2000; ++i) {
        const float amax = (float)pow(10.0, -40.0 + 70.0 * test_rng_uniform(&rng));
        const float mu_amax = (i % 3 == 0) ? amax * (float)(1.0 + 1e5 * test_rng_uniform(&rng)) : 0.0f;
        if (!(amax > 0.0f) || !isfinite(mu_amax)) continue;
        float scale, pre, inv;
        vc_v_channel_scale_any(amax, mu_amax, &scale, &pre, &inv);
        CHECK(scale > 0.0f && isfinite(scale) && isfinite(pre) && isfinite(inv) && inv > 0.0f);
        if (vc_scale_pair_fp32_ok(amax, VC_E4M3_MAX)) {
            float s2, i2;
            vc_v_channel_scale(amax, mu_amax, &s2, &i2);
            CHECK(pre == 1.0f && s2 == scale && i2 == inv);
        }
        const float q = (amax * pre) * inv;
        CHECK_MSG(isfinite(q) && q <= VC_E4M3_MAX * 1.001f, "amax %g: q %g", (double)amax, (double)q);
        const double want = (double)amax / (double)scale;
        CHECK_MSG(fabs((double)q - want) <= 1e-3 * want, "amax %g: q %g vs %g", (double)amax, (double)q, want);
    }
}

/* The block-max scale (softmax_numerics.h) over random walks of block maxima with
 * long descents (steps down of 0-60 log2 units, jumps up), for several block
 * counts: the block's max always lands at or below the scale (codes <= the
 * top code), the scale falls at most d per block (alpha <= 2: the paired FP16
 * restore, two alphas times a 32-key row-sum partial at the exp path's 448,
 * fits), never more than 80 below the running max over the row (O and l stay
 * finite), and follows the block's max whenever that bound allows. */
TEST(blockmax_scale_bounds) {
    test_rng rng = {test_seed()};
    /* the grouped restore's FP16 coefficient: a block's r (<= 128 keys x 256) times at most
     * 2^0.875, with the group floor or with d <= 7/64 (softmax_numerics.h) */
    CHECK(exp2((double)VC_BLOCKMAX_GROUP_FLOOR) * 128.0 * 256.0 <= 65504.0);
    CHECK(vc_blockmax_descent(1) == VC_BLOCKMAX_DESCENT && vc_blockmax_descent(40) == VC_BLOCKMAX_DESCENT);
    CHECK(vc_blockmax_descent(591) > 0.10f && vc_blockmax_descent(591) < 0.11f); /* Wan 720p */
    CHECK(!vc_blockmax_needs_group_floor(vc_blockmax_descent(591)) && vc_blockmax_needs_group_floor(vc_blockmax_descent(64)));
    for (int nb = 1; nb < 4000; ++nb)
        if (!vc_blockmax_needs_group_floor(vc_blockmax_descent(nb)))
            CHECK(8.0 * (double)vc_blockmax_descent(nb) <= (double)VC_BLOCKMAX_GROUP_FLOOR);
    const int blocks[4] = {1, 7, 64, 1000};
    for (int walk = 0; walk < 200; ++walk) {
        const int nb = blocks[walk % 4];
        const float d = vc_blockmax_descent(nb);
        CHECK(d > 0.0f && d <= VC_BLOCKMAX_DESCENT && d * (float)nb <= VC_BLOCKMAX_TOTAL_DESCENT * 1.0001f);
        float m = -INFINITY, run = -INFINITY, bm = (float)(100.0 * test_rng_normal(&rng));
        for (int n = 0; n < nb; ++n) {
            const float m_new = vc_blockmax_scale(m, d, bm);
            run = fmaxf(run, bm);
            CHECK(m_new >= bm);
            CHECK(n == 0 ? m_new == bm : m_new >= m - d);
            CHECK(m_new >= run - VC_BLOCKMAX_TOTAL_DESCENT - 1e-3f && m_new <= run);
            if (n > 0 && bm >= m - d) CHECK(m_new == bm);
            m = m_new;
            const double u = test_rng_uniform(&rng);
            bm += u < 0.1 ? (float)(80.0 * test_rng_uniform(&rng)) : (float)(-60.0 * test_rng_uniform(&rng));
        }
    }
}

/* ExpCast with the tail line (softmax_numerics.h): the row max lands on 126 (448),
 * never on 127 (NaN in e4m3fn); above code 8 the code is line 1's RNE; the
 * code never decreases as u grows; keys down to ~18 octaves keep a non-zero
 * code where plain ExpCast writes 0 below ~15.7; and over keys spread evenly
 * in u below 13 octaves the decoded mass matches the exact mass (the
 * criterion the two constants were chosen by) while plain ExpCast loses most
 * of it. */
TEST(expcast_tail_code_properties) {
    CHECK(vc_expcast_tail_code(0.0f) == VC_EXPCAST_TAIL_MAX_CODE);
    CHECK(vc_e4m3_decode(VC_EXPCAST_TAIL_MAX_CODE) == 448.0f);
    CHECK(vc_expcast_tail_code(-16.0f) > 0 && vc_expcast_code(-16.0f) == 0);
    CHECK(vc_expcast_tail_code(-17.5f) > 0);
    CHECK(vc_expcast_tail_code(-19.0f) == 0);
    CHECK(vc_expcast_tail_code(-60.0f) == 0);
    uint8_t prev = 0;
    int monotone = 1, line1 = 1;
    for (int i = 0; i <= 240000; ++i) {
        const float u = -24.0f + 1e-4f * (float)i;
        const uint8_t c = vc_expcast_tail_code(u);
        if (c < prev || c > VC_EXPCAST_TAIL_MAX_CODE) monotone = 0;
        prev = c;
        const float t = fmaf(8.0f, u, VC_EXPCAST_TAIL_BIASED_CONST) - VC_EXPCAST_BF16_OFFSET;
        if (t > 8.5f && c != (uint8_t)rintf(t)) line1 = 0;
    }
    CHECK(monotone);
    CHECK(line1);
    /* mass of keys uniform in u on [-20, -13], relative to the exact mass in the
     * scale of the normal range (the geometric mean ratio decoded / 2^u over
     * u in [-8, 0]) */
    double lr = 0.0, got = 0.0, got_plain = 0.0, exact = 0.0, lr_plain = 0.0;
    const int n = 80000;
    for (int i = 0; i < n; ++i) {
        const double u = -8.0 * (i + 0.5) / n;
        lr += log(vc_e4m3_decode(vc_expcast_tail_code((float)u)) / exp2(u)) / n;
        lr_plain += log(vc_e4m3_decode(vc_expcast_code((float)u)) / exp2(u)) / n;
    }
    for (int i = 0; i < n; ++i) {
        const double u = -20.0 + 7.0 * (i + 0.5) / n;
        exact += exp2(u);
        got += vc_e4m3_decode(vc_expcast_tail_code((float)u)) / exp(lr);
        got_plain += vc_e4m3_decode(vc_expcast_code((float)u)) / exp(lr_plain);
    }
    /* measured: tail 1.001, plain 0.58 */
    CHECK_MSG(fabs(got / exact - 1.0) < 0.01, "tail mass ratio %g", got / exact);
    CHECK_MSG(got_plain / exact < 0.7, "plain ExpCast mass ratio %g", got_plain / exact);
}

/* The kernel's form of the tail code: BF16 FMA of the converted line 1, then
 * the maximum of both lines and 128.  Checked against an independent
 * evaluation in double (exact product, one rounding to BF16) on brackets from
 * deep underflow to the max, a quarter of them exact .5 ties. */
TEST(expcast_tail_biased_code_matches_double_evaluation) {
    test_rng r = {0x7A11u};
    for (int i = 0; i < 200000; ++i) {
        float y = (float)(test_rng_uniform(&r) * 300.0 - 170.0);
        if (i % 4 == 0) y = floorf(y) + 0.5f;
        if (y > (float)VC_EXPCAST_TAIL_MAX_CODE + VC_EXPCAST_BETA) y = (float)VC_EXPCAST_TAIL_MAX_CODE + VC_EXPCAST_BETA;
        const float v = y + VC_EXPCAST_BF16_OFFSET;
        const double h1 = vc_bf16_round(v);
        const double h2 = vc_bf16_round((float)(h1 * (double)VC_EXPCAST_TAIL_SLOPE + (double)VC_EXPCAST_TAIL_OFFSET));
        double h = h1 > 128.0 ? h1 : 128.0;
        if (h2 > h) h = h2;
        const int want = (int)(h - 128.0);
        const int got = vc_expcast_tail_code_biased(v);
        if (got != want) {
            CHECK_MSG(got == want, "bracket %.6f: code %d, want %d", (double)y, got, want);
            break;
        }
    }
}
