/* smem.cuh - one-instruction shared-memory and special-register helpers. */
#pragma once
#include <stdint.h>

/* One FP32 load from a shared-memory address (volatile: stays where it is
 * written, e.g. before the stage holding it is released). */
__device__ __forceinline__ float lds_f32(uint32_t saddr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(saddr) : "memory");
    return v;
}

/* %tid.x, read again (volatile: not merged with an earlier read, so the
 * value need not stay live in a register across a loop). */
__device__ __forceinline__ uint32_t read_tid_x(void) {
    uint32_t x;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(x));
    return x;
}

/* Two FP32 words to / from an 8-byte aligned shared-memory address (volatile:
 * kept in program order with the other shared accesses of the thread). */
__device__ __forceinline__ void sts_v2_f32(uint32_t saddr, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(saddr), "f"(x), "f"(y) : "memory");
}
__device__ __forceinline__ void lds_v2_f32(uint32_t saddr, float &x, float &y) {
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "r"(saddr) : "memory");
}
/* Four FP32 words, 16-byte aligned, likewise. */
__device__ __forceinline__ void sts_v4_f32(uint32_t saddr, float x, float y, float z, float w) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
__device__ __forceinline__ void lds_v4_f32(uint32_t saddr, float &x, float &y, float &z, float &w) {
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(x), "=f"(y), "=f"(z), "=f"(w)
                 : "r"(saddr)
                 : "memory");
}
