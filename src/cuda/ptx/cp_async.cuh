/* cp_async.cuh - one-instruction helpers for Ampere-style asynchronous copies
 * and the proxy fence the tensor cores need after them. */
#pragma once
#include <stdint.h>

/* 16 bytes global -> shared, bypassing L1. */
__device__ __forceinline__ void cp_async_16(void *smem, const void *gmem) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

/* BYTES (4 or 8) global -> shared through L1: for rows only 4- or 8-byte aligned. */
template <int BYTES>
__device__ __forceinline__ void cp_async_small(void *smem, const void *gmem) {
    static_assert(BYTES == 4 || BYTES == 8, "cp.async.ca copies 4, 8 or 16 bytes");
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(BYTES) : "memory");
}

__device__ __forceinline__ void cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* NOTE: shared memory written by the generic proxy (st.shared, cp.async) and
 * read next by wgmma (the async proxy) needs this fence in each writing
 * thread before the barrier. */
__device__ __forceinline__ void fence_proxy_async_shared(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Brings the 128-byte line holding gmem into L1 (no register written). */
__device__ __forceinline__ void prefetch_l1(const void *gmem) {
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(gmem));
}
