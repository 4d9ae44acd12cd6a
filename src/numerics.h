/* numerics.h - the one definition of every low-bit format vcattn uses: the
 * minifloats (E4M3, E2M1, BF16, FP16), NVFP4, INT8 and the tensor scales.  The
 * softmax's P paths built on them (ExpCast, the tail line, the block-max scale,
 * the split, the grouped restore's row-sum split) are in softmax_numerics.h,
 * included at the end, so one include gives both.
 *
 * Compiled as C11 by the CPU library and as CUDA by the kernels, so the CPU
 * simulation and the GPU cannot drift apart.  Every function is a pure
 * `VC_HD static inline` function of its arguments.
 *
 * Rounding is always round-to-nearest-even (RNE).  Under nvcc `rintf` is RNE;
 * on the host it follows the current rounding mode, which the library never
 * changes (FE_TONEAREST is the C default).
 */
#ifndef VCATTN_NUMERICS_H
#define VCATTN_NUMERICS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define VC_HD __host__ __device__
#else
#define VC_HD
#endif

/* ---- bit casts ------------------------------------------------------------ */

VC_HD static inline uint32_t vc_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

VC_HD static inline float vc_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- generic minifloat rounding -------------------------------------------
 * Rounds |a| (finite, >= 0) to the nearest value of a binary format with
 * `mbits` explicit mantissa bits and smallest normal exponent `emin`, keeping
 * subnormals.  Saturation is the caller's job.  Works on the FP32 bit
 * pattern: dropping `drop` low bits with round-half-to-even, where a carry
 * out of the mantissa correctly bumps the exponent. */
VC_HD static inline float vc_round_minifloat_abs(float a, int mbits, int emin) {
    uint32_t u = vc_f32_bits(a);
    int e = (int)(u >> 23) - 127; /* FP32 subnormals (e = -127) are far below any minifloat here */
    int drop = 23 - mbits;
    if (e < emin) {
        /* subnormal target: the quantum is fixed at 2^(emin - mbits) */
        int q = emin - mbits; /* exponent of the smallest subnormal */
        if (e < q - 1) return 0.0f;                       /* below half the quantum */
        if (e == q - 1) {                                 /* in [q/2, q): 0 or q */
            float quantum = vc_f32_from_bits((uint32_t)(q + 127) << 23);
            return a > 0.5f * quantum ? quantum : 0.0f;   /* exact half ties to 0 (even) */
        }
        drop += emin - e; /* <= 23: still inside the mantissa plus the implicit bit */
        uint32_t m = (u & 0x7FFFFFu) | 0x800000u;         /* explicit leading one */
        uint32_t lsb = (m >> drop) & 1u;
        m = (m + (1u << (drop - 1)) - 1u + lsb) >> drop;  /* RNE integer multiple of the quantum */
        return (float)m * vc_f32_from_bits((uint32_t)(q + 127) << 23);
    }
    uint32_t lsb = (u >> drop) & 1u;
    u = (u + (1u << (drop - 1)) - 1u + lsb) & ~((1u << drop) - 1u);
    return vc_f32_from_bits(u);
}

/* ---- E4M3 (OCP "fn" variant) ----------------------------------------------
 * 1 sign, 4 exponent (bias 7), 3 mantissa bits.  No infinity; 0x7F and 0xFF
 * are NaN; largest finite 448; smallest normal 2^-6; subnormals m * 2^-9.
 * Encoding saturates (|x| > 448 -> 448), like cvt.rn.satfinite.e4m3x2.f32. */
#define VC_E4M3_MAX 448.0f
#define VC_E4M3_NAN 0x7Fu
#define VC_FP16_MAX 65504.0f

VC_HD static inline float vc_e4m3_round(float x) {
    if (x != x) return x;
    float a = fabsf(x);
    float r = a > VC_E4M3_MAX ? VC_E4M3_MAX : vc_round_minifloat_abs(a, 3, -6);
    return x < 0.0f ? -r : r;
}

VC_HD static inline uint8_t vc_e4m3_encode(float x) {
    if (x != x) return (uint8_t)VC_E4M3_NAN;
    uint32_t sign = (vc_f32_bits(x) >> 24) & 0x80u;
    float r = fabsf(vc_e4m3_round(x));
    uint32_t code;
    if (r < 0.015625f) { /* below 2^-6: subnormal, code = m */
        code = (uint32_t)ldexpf(r, 9);
    } else {
        int e;
        float f = frexpf(r, &e); /* r = f 2^e, f in [0.5,1) */
        uint32_t m = (uint32_t)(ldexpf(f, 4) - 8.0f); /* 3 mantissa bits, exact */
        code = ((uint32_t)(e - 1 + 7) << 3) | m;
    }
    return (uint8_t)(sign | code);
}

VC_HD static inline float vc_e4m3_decode(uint8_t c) {
    uint32_t e = (c >> 3) & 0xFu, m = c & 0x7u;
    float mag;
    if (e == 0xFu && m == 0x7u) return vc_f32_from_bits(0x7FC00000u); /* NaN */
    if (e == 0)
        mag = ldexpf((float)m, -9);
    else
        mag = ldexpf(1.0f + (float)m * 0.125f, (int)e - 7);
    return (c & 0x80u) ? -mag : mag;
}

/* ---- E2M1 (FP4, the NVFP4 element) ----------------------------------------
 * 1 sign, 2 exponent (bias 1), 1 mantissa bit: magnitudes 0 .5 1 1.5 2 3 4 6.
 * Encoding saturates to 6; NaN has no code and maps to +0 (callers reject
 * non-finite input before quantizing). */
#define VC_E2M1_MAX 6.0f

VC_HD static inline float vc_e2m1_round(float x) {
    if (x != x) return 0.0f;
    float a = fabsf(x);
    float r = a >= VC_E2M1_MAX ? VC_E2M1_MAX : vc_round_minifloat_abs(a, 1, 0);
    if (r > VC_E2M1_MAX) r = VC_E2M1_MAX;
    return x < 0.0f ? -r : r;
}

VC_HD static inline uint8_t vc_e2m1_encode(float x) {
    float r = vc_e2m1_round(x);
    uint32_t sign = (x == x && (vc_f32_bits(x) >> 31)) ? 0x8u : 0u;
    float a = fabsf(r);
    uint32_t code;
    if (a < 1.0f)
        code = (uint32_t)(a * 2.0f); /* 0 -> 0, 0.5 -> 1 */
    else {
        int e;
        float f = frexpf(a, &e); /* a = f 2^e */
        code = ((uint32_t)e << 1) | (uint32_t)(ldexpf(f, 2) - 2.0f);
    }
    return (uint8_t)(sign | code);
}

VC_HD static inline float vc_e2m1_decode(uint8_t c) {
    uint32_t e = (c >> 1) & 0x3u, m = c & 0x1u;
    float mag = e == 0 ? 0.5f * (float)m : ldexpf(1.0f + 0.5f * (float)m, (int)e - 1);
    return (c & 0x8u) ? -mag : mag;
}

/* ---- NVFP4 -------------------------------------------------------------------
 * Blocks of 16 E2M1 values along the reduction axis, one E4M3 scale per block
 * and one FP32 scale per tensor:  x ~= e2m1 * e4m3_scale * tensor_scale.
 * tensor_scale = amax(tensor) / (448 * 6) puts every block scale inside E4M3,
 * whatever the tensor's magnitude: without it the block scale amax/6 itself
 * must fit E4M3 ([2^-9, 448]), so a tensor with amax below ~0.01 quantizes to
 * 0 and one above ~2700 saturates.  The tensor scale is kept >= the smallest
 * FP32 subnormal, so a tensor of tiny subnormals still divides by non-zero. */
#define VC_NVFP4_BLOCK 16

VC_HD static inline float vc_nvfp4_tensor_scale(float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    const float s = amax / (VC_E4M3_MAX * VC_E2M1_MAX);
    return s > 0.0f ? s : vc_f32_from_bits(1u);
}

/* Quantize n <= 16 values (stride `stride`) into codes and return the E4M3
 * block-scale code; the dequantized values are written to `deq` when not NULL. */
VC_HD static inline uint8_t vc_nvfp4_quantize_block(const float *x, int n, int64_t stride,
                                                    float tensor_scale, uint8_t *codes,
                                                    float *deq) {
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[i * stride]));
    uint8_t sc = vc_e4m3_encode(amax / (VC_E2M1_MAX * tensor_scale));
    float block_scale = vc_e4m3_decode(sc) * tensor_scale;
    for (int i = 0; i < n; ++i) {
        float v = x[i * stride];
        uint8_t c = block_scale > 0.0f ? vc_e2m1_encode(v / block_scale) : 0;
        if (codes) codes[i] = c;
        if (deq) deq[i * stride] = vc_e2m1_decode(c) * block_scale;
    }
    return sc;
}

/* ---- BF16 and FP16 --------------------------------------------------------- */

VC_HD static inline float vc_bf16_round(float x) {
    uint32_t u = vc_f32_bits(x);
    if ((u & 0x7F800000u) == 0x7F800000u) return x; /* inf / nan unchanged */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return vc_f32_from_bits(u & 0xFFFF0000u);
}

VC_HD static inline uint16_t vc_bf16_bits(float x) {
    return (uint16_t)(vc_f32_bits(vc_bf16_round(x)) >> 16);
}

VC_HD static inline float vc_bf16_to_f32(uint16_t b) { return vc_f32_from_bits((uint32_t)b << 16); }


/* IEEE half, saturating to +-65504 (no infinities are produced). */
VC_HD static inline float vc_fp16_round(float x) {
    if (x != x) return x;
    float a = fabsf(x);
    float r = a >= VC_FP16_MAX ? VC_FP16_MAX : vc_round_minifloat_abs(a, 10, -14);
    if (r > VC_FP16_MAX) r = VC_FP16_MAX;
    return x < 0.0f ? -r : r;
}

/* FP16 with a power-of-two range shift: x ~= fp16(x 2^-k) 2^k, k chosen from
 * amax (the largest |x| of the set stored with this k) so that amax lands at
 * the top of FP16's range (the same bits as FP16 for amax in [1, 32768]: k = 0).
 * Multiplying by 2^k is exact, so this is FP16's 11-bit rounding without its
 * range limits (block means of V-Smooth stored in 16 bits: tiny means would
 * flush to 0, huge ones saturate at 65504). */
VC_HD static inline int vc_fp16_range_exp(float amax) {
    if (!(amax > 0.0f) || (amax >= 1.0f && amax <= 32768.0f)) return 0;
    return ilogbf(amax) - 14;
}
VC_HD static inline float vc_fp16_round_shifted(float x, int k) {
    return ldexpf(vc_fp16_round(ldexpf(x, -k)), k);
}

/* half bits -> float (for .npy float16 input) */
VC_HD static inline float vc_fp16_to_f32(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    float mag;
    if (e == 0x1Fu) mag = m ? vc_f32_from_bits(0x7FC00000u) : INFINITY;
    else if (e == 0) mag = ldexpf((float)m, -24);
    else mag = ldexpf(1.0f + (float)m / 1024.0f, (int)e - 15);
    return (h & 0x8000u) ? -mag : mag;
}

/* ---- symmetric INT8 ----------------------------------------------------------
 * scale = amax / 127, q = clamp(RNE(x * (127 / amax)), -127, 127).  The
 * reciprocal form is what the quantization kernels compute. */
VC_HD static inline float vc_int8_scale(float amax) { return amax > 0.0f ? amax / 127.0f : 1.0f; }

VC_HD static inline int8_t vc_int8_quantize(float x, float inv_scale) {
    float r = rintf(x * inv_scale);
    if (r > 127.0f) r = 127.0f;
    if (r < -127.0f) r = -127.0f;
    if (r != r) r = 0.0f; /* NaN (an Inf scale or operand): 0, as the GPU's cvt gives; in C the cast is UB */
    return (int8_t)r;
}

/* SageAttention2's per_thread INT8 recipe (its Triton quantizer):
 * scale = amax / 127 + 1e-7, code = round-half-away-from-zero(x / scale). */
VC_HD static inline float vc_int8_sage_scale(float amax) { return amax / 127.0f + 1e-7f; }

VC_HD static inline int8_t vc_int8_sage_quantize(float x, float scale) {
    float r = roundf(x / scale);
    if (r > 127.0f) r = 127.0f;
    if (r < -127.0f) r = -127.0f;
    if (r != r) r = 0.0f; /* NaN (Inf / Inf): 0, as the GPU's cvt gives; in C the cast is UB */
    return (int8_t)r;
}

/* ---- scales of tiny or huge tensors ------------------------------------------
 * A format scale amax / qmax and its reciprocal qmax / amax (qmax = 448 or 127)
 * are exact enough in FP32 while both are normal floats: amax >= qmax * 2^-126
 * (~5e-36 for 448).  Below that (subnormal inputs: qmax / amax overflows to
 * inf, 0 * inf is NaN, and amax / qmax loses its precision) the CPU simulation
 * computes the scale pair in FP64 instead; inside it the FP32 formulas below
 * are used unchanged, bit for bit. */
VC_HD static inline int vc_scale_pair_fp32_ok(float amax, float qmax) {
    if (!(amax > 0.0f)) return 1; /* scale 1 */
    const float inv = qmax / amax, s = amax / qmax;
    return inv <= FLT_MAX && s >= FLT_MIN;
}

/* ---- per-channel E4M3 V scale --------------------------------------------------
 * scale = amax / 448 and codes e4m3(x * (448 / amax)), as SageAttention2's V
 * pass computes them.  V-Smooth stores each block mean divided by this scale
 * in FP16; when a mean would overflow FP16 (a channel whose offset dwarfs its
 * residual) the scale is raised to mean_amax / 65504 so the mean still fits.
 * An all-zero channel gets scale 1. */
VC_HD static inline void vc_v_channel_scale(float amax, float mean_amax, float *scale, float *inv) {
    float s = amax / VC_E4M3_MAX, i = amax > 0.0f ? VC_E4M3_MAX / amax : 1.0f;
    if (!(amax > 0.0f)) s = 1.0f;
    if (mean_amax > s * VC_FP16_MAX) {
        s = mean_amax / VC_FP16_MAX;
        i = 1.0f / s;
    }
    *scale = s;
    *inv = i;
}

/* The GPU's per-channel V scale for channels of any magnitude (the quantizer
 * computes q = ((v - mu) * pre) * inv): pre = 1 and the pair above, bit for
 * bit, for every channel whose pair FP32 holds; for one it does not (amax
 * below ~5e-36: subnormal V; 448 / amax overflowed to Inf and 0 * Inf gave
 * NaN codes) pre = 2^64 makes v * pre exact and normal and inv = 1 / (scale
 * 2^64) is finite, the scale the same rule in FP64 rounded up to an FP32
 * subnormal (BF16/FP16 inputs keep it >= ~2e-43, 7+ bits; the CPU simulation
 * keeps this scale in FP64). */
VC_HD static inline void vc_v_channel_scale_any(float amax, float mean_amax, float *scale, float *pre, float *inv) {
    *pre = 1.0f;
    if (vc_scale_pair_fp32_ok(amax, VC_E4M3_MAX)) {
        vc_v_channel_scale(amax, mean_amax, scale, inv);
        return;
    }
    double s = (double)amax / VC_E4M3_MAX;
    if ((double)mean_amax > s * VC_FP16_MAX) s = (double)mean_amax / VC_FP16_MAX;
    /* rounded up, so that amax / scale stays within E4M3's 448 despite the
     * subnormal's few bits */
    float sf = (float)s;
    if ((double)sf < s) sf = nextafterf(sf, INFINITY);
    *scale = sf;
    *pre = 0x1p64f;
    *inv = (float)(1.0 / ((double)sf * 0x1p64));
}

#include "softmax_numerics.h" /* the P paths (needs the formats above) */

#endif /* VCATTN_NUMERICS_H */
