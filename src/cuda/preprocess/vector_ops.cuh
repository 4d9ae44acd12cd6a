/* vector_ops.cuh - the building blocks of the vectorized path: 16-byte loads,
 * BF16/FP16 unpacking, per-channel row sums across a warp, the INT8 code without a
 * division, and the byte packing of four codes. */
#pragma once
#include <math.h>

#include "gpu_common.cuh"

__device__ __forceinline__ uint4 vc_ld16(const void *p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

/* two 16-bit inputs (low half = lower channel) -> floats, exactly as vc_load_row */
template <typename T>
__device__ __forceinline__ void vc_unpack2(uint32_t u, float &lo, float &hi) {
    if (__is_same(T, __nv_bfloat16)) {
        lo = __uint_as_float(u << 16);
        hi = __uint_as_float(u & 0xFFFF0000u);
    } else {
        lo = __half2float(__ushort_as_half((unsigned short)(u & 0xFFFFu)));
        hi = __half2float(__ushort_as_half((unsigned short)(u >> 16)));
    }
}

template <typename T>
__device__ __forceinline__ void vc_unpack8(const uint4 &u, float (&x)[8]) {
    vc_unpack2<T>(u.x, x[0], x[1]);
    vc_unpack2<T>(u.y, x[2], x[3]);
    vc_unpack2<T>(u.z, x[4], x[5]);
    vc_unpack2<T>(u.w, x[6], x[7]);
}

/* s[e] += the 8 values of u, in FP64 (the K and V means' per-thread partial sums). */
template <typename T>
__device__ __forceinline__ void vc_sum8_add(const uint4 &u, double (&s)[8]) {
    float x[8];
    vc_unpack8<T>(u, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) s[e] += (double)x[e];
}

/* The 8 per-channel partial sums of a thread, summed over the warp's rows (the lanes with
 * the same lane % LPR hold the same channels) and stored by the first row's lanes into
 * their warp's row of a [warp][e * LPR + m] table (conflict-free). */
template <int LPR>
__device__ __forceinline__ void vc_rows_sum8_store(double (&s)[8], double *warp_row, int m, int hh) {
#pragma unroll
    for (int o = LPR; o < 32; o <<= 1)
#pragma unroll
        for (int e = 0; e < 8; ++e) s[e] += __shfl_xor_sync(0xffffffffu, s[e], o);
    if (hh == 0)
#pragma unroll
        for (int e = 0; e < 8; ++e) warp_row[e * LPR + m] = s[e];
}

/* vc_int8_sage_quantize(x, s) without the division: with y = RN(1/s), q0 = RN(x y),
 * r = x - q0 s (exact by FMA) and q = RN(q0 + r y) is RN(x / s) (Markstein's
 * theorem; the operands here stay far from underflow wherever |q| >= 0.5 matters).
 * Round half away from zero: trunc(RN(|q| + 0.49999997)) = floor(|q| + 0.5) for every
 * float |q| <= 2^22 (checked exhaustively on the host), one F2I.TRUNC with the sign
 * copied in.  No clamp: s >= RN(amax/127) and |x| <= amax give |q| <= 127.00001, so
 * the code is within +-127; NaN -> 0 (as the scalar path's conversion). */
__device__ __forceinline__ int vc_sage_code(float x, float s, float y) {
    const float q0 = __fmul_rn(x, y);
    const float r = __fmaf_rn(-q0, s, x);
    const float q = __fmaf_rn(r, y, q0);
    return (int)copysignf(__fadd_rn(fabsf(q), 0.49999997f), q);
}

__device__ __forceinline__ uint32_t vc_pack4_s8(int c0, int c1, int c2, int c3) {
    return __byte_perm(__byte_perm(c0, c1, 0x0040), __byte_perm(c2, c3, 0x0040), 0x5410);
}
