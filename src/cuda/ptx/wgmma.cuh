/* wgmma.cuh - one-instruction helpers for Hopper warpgroup MMA (sm_90a).
 *
 * NOTE: layouts used throughout (PTX ISA, "wgmma register fragments"):
 *  - accumulator of m64nNk*: thread (warp w of the warpgroup, lane = 4g + t)
 *    holds d[4j + 2h + e] = D[16w + g + 8h][8j + 2t + e], j < N/8, h, e in {0,1};
 *  - 8-bit A fragment of m64nNk32 from registers: a[2i + h] holds the four
 *    bytes A[16w + g + 8h][16i + 4t .. 16i + 4t + 3] (lowest byte first).
 * Shared-memory operands are K-major tiles of 128-byte rows with the 128-byte
 * swizzle (16-byte chunk c of row r stored at chunk c ^ (r % 8)), 1024-byte
 * aligned; a k-step of 32 bytes advances the descriptor start by 32 bytes. */
#pragma once
#include <stdint.h>

/* Descriptor of a K-major, 128B-swizzled tile: LBO 16 B (unused), SBO 1024 B
 * (8 rows x 128 B), swizzle mode 1 (128B). */
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void *smem) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    uint64_t desc = (uint64_t)((addr & 0x3FFFF) >> 4);
    desc |= (uint64_t)(16 >> 4) << 16;
    desc |= (uint64_t)(1024 >> 4) << 32;
    desc |= (uint64_t)1 << 62;
    return desc;
}

/* Descriptor of a K-major tile without swizzle: core matrices of 8 rows x 16 B
 * (rows 16 B apart), `lbo` bytes between core matrices along K, `sbo` bytes
 * between core matrices along M/N. */
__device__ __forceinline__ uint64_t wgmma_desc_noswizzle(const void *smem, uint32_t lbo, uint32_t sbo) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    uint64_t desc = (uint64_t)((addr & 0x3FFFF) >> 4);
    desc |= (uint64_t)((lbo >> 4) & 0x3FFF) << 16;
    desc |= (uint64_t)((sbo >> 4) & 0x3FFF) << 32;
    return desc;
}

/* Start address of a descriptor advanced by `bytes` (a multiple of 16). */
__device__ __forceinline__ uint64_t wgmma_desc_advance(uint64_t desc, uint32_t bytes) {
    return desc + (uint64_t)(bytes >> 4);
}

__device__ __forceinline__ void wgmma_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accumulator reads/writes across an async
 * wgmma (the registers are "in flight" until wgmma_wait). */
__device__ __forceinline__ void wgmma_fence_operand(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void wgmma_fence_operand(int32_t &r) { asm volatile("" : "+r"(r)::"memory"); }

#define VC_WGMMA_D64(T)                                                                        \
    T(d[0]), T(d[1]), T(d[2]), T(d[3]), T(d[4]), T(d[5]), T(d[6]), T(d[7]), T(d[8]), T(d[9]),  \
        T(d[10]), T(d[11]), T(d[12]), T(d[13]), T(d[14]), T(d[15]), T(d[16]), T(d[17]),        \
        T(d[18]), T(d[19]), T(d[20]), T(d[21]), T(d[22]), T(d[23]), T(d[24]), T(d[25]),        \
        T(d[26]), T(d[27]), T(d[28]), T(d[29]), T(d[30]), T(d[31]), T(d[32]), T(d[33]),        \
        T(d[34]), T(d[35]), T(d[36]), T(d[37]), T(d[38]), T(d[39]), T(d[40]), T(d[41]),        \
        T(d[42]), T(d[43]), T(d[44]), T(d[45]), T(d[46]), T(d[47]), T(d[48]), T(d[49]),        \
        T(d[50]), T(d[51]), T(d[52]), T(d[53]), T(d[54]), T(d[55]), T(d[56]), T(d[57]),        \
        T(d[58]), T(d[59]), T(d[60]), T(d[61]), T(d[62]), T(d[63])

#define VC_WGMMA_REGS64                                                                        \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                  \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "         \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "         \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#define VC_RW_S32(x) "+r"(x)
#define VC_RW_F32(x) "+f"(x)

/* D(s32, 64x128) (+)= A(s8, 64x32, smem) * B(s8, 128x32, smem)^T: IGMMA.
 * accumulate = 0 overwrites D. */
__device__ __forceinline__ void wgmma_m64n128k32_s32_s8_ss(int32_t d[64], uint64_t desc_a,
                                                           uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " VC_WGMMA_REGS64
        ", %64, %65, p;\n}\n"
        : VC_WGMMA_D64(VC_RW_S32)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* D(f32, 64x128) (+)= A(e4m3, 64x32, registers) * B(e4m3, 128x32, smem)^T: QGMMA. */
__device__ __forceinline__ void wgmma_m64n128k32_f32_e4m3_rs(float d[64], const uint32_t a[4],
                                                             uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " VC_WGMMA_REGS64
        ", {%64, %65, %66, %67}, %69, p, 1, 1;\n}\n"
        : VC_WGMMA_D64(VC_RW_F32)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc_b));
}

/* D(f32, 64x136) (+)= A(e4m3, 64x32, registers) * B(e4m3, 136x32, smem)^T: QGMMA.
 * NOTE: used with 8 rows of ones appended to the V^T tile, so columns 128..135
 * of D hold the row sum of the quantized P exactly as the product used it. */
__device__ __forceinline__ void wgmma_m64n136k32_f32_e4m3_rs(float d[68], const uint32_t a[4],
                                                             uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %72, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67}"
        ", {%68, %69, %70, %71}, %73, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc_b));
}

/* D(f32, 64x128) += A(f16, 64x16, registers) * B(f16, 128x16, smem)^T: HGMMA
 * (always accumulates).  A fragment: a[0] = A[16w + g][2t, 2t+1], a[1] = rows
 * + 8, a[2] / a[3] = columns 2t+8, 2t+9 (lower column in the low half). */
__device__ __forceinline__ void wgmma_m64n128k16_f32_f16_rs(float d[64], const uint32_t a[4], uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " VC_WGMMA_REGS64
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : VC_WGMMA_D64(VC_RW_F32)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
}

/* D(f32, 64x136) (+)= A(f16, 64x16, registers) * B(f16, 136x16, smem)^T: HGMMA,
 * the same accumulator shape as wgmma_m64n136k32_f32_e4m3_rs (ptxas keeps one
 * register block for both).  A fragment as in wgmma_m64n128k16_f32_f16_rs. */
__device__ __forceinline__ void wgmma_m64n136k16_f32_f16_rs(float d[68], const uint32_t a[4],
                                                             uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %72, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n136k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67}"
        ", {%68, %69, %70, %71}, %73, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc_b));
}

/* As above, issued only where `issue` != 0: a guard predicate on the
 * instruction, not a branch around the asm (ptxas then branches around the
 * HGMMA alone with one warpgroup.arrive of its own, C7519, and keeps the
 * other wgmma pipelined). */
__device__ __forceinline__ void wgmma_m64n136k16_f32_f16_rs_if(float d[68], const uint32_t a[4],
                                                                uint64_t desc_b, int accumulate, int issue) {
    asm volatile(
        "{\n.reg .pred p, q;\nsetp.ne.b32 p, %72, 0;\nsetp.ne.b32 q, %74, 0;\n"
        "@q wgmma.mma_async.sync.aligned.m64n136k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67}"
        ", {%68, %69, %70, %71}, %73, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc_b), "r"(issue));
}

/* D(f32, 64x64) (+)= A(e4m3, 64x32, registers) * B(e4m3, 64x32, smem)^T: QGMMA, the P V of
 * the head_dim 64 kernel. */
__device__ __forceinline__ void wgmma_m64n64k32_f32_e4m3_rs(float d[32], const uint32_t a[4], uint64_t desc_b,
                                                            int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
        ", {%32, %33, %34, %35}, %37, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc_b));
}

/* D(f32, 64x72) (+)= A(e4m3, 64x32, registers) * B(e4m3, 72x32, smem)^T: QGMMA, the P V of
 * the head_dim 64 kernel (8 rows of ones after V^T's 64: columns 64..71 hold the quantized row sum). */
__device__ __forceinline__ void wgmma_m64n72k32_f32_e4m3_rs(float d[36], const uint32_t a[4], uint64_t desc_b,
                                                            int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %40, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}"
        ", {%36, %37, %38, %39}, %41, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc_b));
}

/* wgmma_m64n136k16_f32_f16_rs_if for the head_dim 64 kernel: N = 72, the accumulator shape of
 * wgmma_m64n72k32_f32_e4m3_rs. */
__device__ __forceinline__ void wgmma_m64n72k16_f32_f16_rs_if(float d[36], const uint32_t a[4], uint64_t desc_b,
                                                              int accumulate, int issue) {
    asm volatile(
        "{\n.reg .pred p, q;\nsetp.ne.b32 p, %40, 0;\nsetp.ne.b32 q, %42, 0;\n"
        "@q wgmma.mma_async.sync.aligned.m64n72k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}"
        ", {%36, %37, %38, %39}, %41, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc_b), "r"(issue));
}
