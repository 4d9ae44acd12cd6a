/* mma_sync.cuh - the warp-level (Ampere-style) tensor-core product and the shared-memory
 * fragment loads that feed it: used where a kernel needs FP32 accumulation of exact BF16
 * products without the warpgroup machinery (the GPU k-means, the policy's reference rows, the
 * exact keys' merge). */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* C += A B, m16n8k16, BF16 in, FP32 accumulate.  Not volatile: it has no side effect, so the
 * compiler may interleave independent products (a kernel's chains of them in program order
 * would wait on each other).  Thread (g = lane/4, t = lane%4) holds
 * A (row-major 16x16): {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)};
 * B (16x8, k-major): {(2t..2t+1, g), (2t+8..2t+9, g)}; C: {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}. */
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The same with FP16 inputs. */
__device__ __forceinline__ void mma_f16_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The product and the 16-bit pairs (low half = the first value) of one input type. */
template <typename T>
struct vc_mma16;
template <>
struct vc_mma16<__nv_bfloat16> {
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
        mma_bf16_16816(c, a, b);
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        const __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const uint32_t *>(&r);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t w) {
        return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w));
    }
};
template <>
struct vc_mma16<__half> {
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
        mma_f16_16816(c, a, b);
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        const __half2 r = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const uint32_t *>(&r);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t w) {
        return __half22float2(*reinterpret_cast<const __half2 *>(&w));
    }
};

/* Two FP32 values as an A operand's hi and lo words of type T: hi = T(p), lo = T(p - hi) - the
 * exact products of the two words sum to P within ~2^-17 relative (BF16). */
template <typename T>
__device__ __forceinline__ void vc_mma16_split(float p0, float p1, uint32_t &hi, uint32_t &lo) {
    hi = vc_mma16<T>::pack(p0, p1);
    const float2 h = vc_mma16<T>::unpack(hi);
    lo = vc_mma16<T>::pack(p0 - h.x, p1 - h.y);
}

/* Four 8x8 b16 matrices: thread t gets (row t/4, columns 2(t%4) and 2(t%4)+1) of each - the B
 * fragment of m16n8k16 when the rows are the output axis (K stored [key][channel]).  Lanes
 * 8i..8i+7 give the row addresses of matrix i (16-byte aligned). */
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *smem_row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* The same, transposed on the way: thread t gets (rows 2(t%4) and 2(t%4)+1, column t/4) of
 * each - the B fragment of m16n8k16 when the rows are the reduction axis (V stored
 * [key][channel]). */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *smem_row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
