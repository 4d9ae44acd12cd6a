/* cvt.cuh - one-instruction conversion helpers (FP8 pack/unpack, fast exp2,
 * packed BF16 max / FMA). */
#pragma once
#include <stdint.h>

/* Two floats -> two E4M3 bytes, RNE, saturating: lo in bits 0-7, hi in 8-15. */
__device__ __forceinline__ uint16_t cvt_e4m3x2(float lo, float hi) {
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Two E4M3 bytes -> two halves (exact). */
__device__ __forceinline__ uint32_t cvt_f16x2_from_e4m3x2(uint16_t x) {
    uint32_t r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(x));
    return r;
}

/* 2^x, MUFU.EX2 (flushes denormals; 2^-inf = 0). */
__device__ __forceinline__ float ex2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

/* a * b + c, RNE, clamped to [0, 1] (NaN -> 0): one FFMA.SAT. */
__device__ __forceinline__ float fma_sat(float a, float b, float c) {
    float r;
    asm("fma.rn.sat.f32 %0, %1, %2, %3;\n" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
}

/* Byte permute: selects 4 bytes of {b, a} by the nibbles of sel. */
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

/* Two floats -> FP16x2, RNE: lo in bits 0-15, hi in 16-31 (one F2FP). */
__device__ __forceinline__ uint32_t cvt_f16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
