/* fused_sync.cuh - the flags between the CTAs of the fused path: ready[bh] is
 * published with release and read with acquire (gpu scope). */
#pragma once

__device__ __forceinline__ int km_ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void km_st_release(int *p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
