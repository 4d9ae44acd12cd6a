/* launch.cu - the preprocessing passes that turn BF16/FP16 Q, K, V into the
 * attention kernel's operands (the contract is src/simulate.c's), and the chain
 * that launches them on a stream:
 *   K: channel mean over all tokens (double partial sums), K' = K - km, gather
 *      by the V-Smooth permutation, INT8 per_thread groups of 32 keys;
 *   Q: INT8 per_thread groups of 2 rows, plus sm * (q . km) for the LSE;
 *   V: gather, 128-token block means (V-Smooth), per-channel amax of the
 *      residual and of the means, E4M3 codes written as V^T with the keys of
 *      every 16 permuted so P needs no shuffle, FP16 means / channel scale.
 * Two implementations of the same contract (bit-identical outputs), one
 * translation unit:
 *   vectorized.cuh  16-byte loads, 8 channels per thread (vector_ops.cuh); taken
 *                   when Q, K and V are 16-byte aligned views (pointers and strides);
 *   scalar.cuh      8-byte loads, one warp per row, for any view the API accepts;
 *   v_channel.cuh   the V^T key order and the V channel setup both share.
 * docs/kernel-log.md, "Preprocessing passes". */
#include "preprocess/launch.cuh"
#include "preprocess/prep_debug.h"
#include "preprocess/scalar.cuh"
#include "preprocess/vectorized.cuh"

/* ---- host side: launch the chain --------------------------------------------------------- */
/* The benchmark/test knob (prep_debug.h): per host thread, read by that thread's launches
 * (no process-wide mutable state in the library). */
static thread_local int g_prep_impl = 0;
static thread_local unsigned g_prep_passes = 31u;

extern "C" void vcattn_gpu_prep_debug(int impl, unsigned passes) {
    g_prep_impl = impl;
    g_prep_passes = passes;
}

static bool vc_view16(const void *p, const int64_t st[3]) {
    return (uintptr_t)p % 16 == 0 && st[0] % 8 == 0 && st[1] % 8 == 0 && st[2] % 8 == 0;
}

template <typename T, int CPT>
static cudaError_t vc_prep_launch_t(const vc_prep_args &a, int BH, cudaStream_t s, unsigned passes) {
    if (passes & 1u) vc_k_mean_partial<T, CPT><<<dim3(a.nchunk, BH), 128, 0, s>>>(a);
    if (passes & 2u) vc_k_quantize<T, CPT><<<dim3(a.nkb, BH), 128, 0, s>>>(a);
    if (passes & 4u) vc_q_quantize<T, CPT><<<dim3(a.sq_pad / 64, BH), 128, 0, s>>>(a);
    if (passes & 8u) {
        cudaError_t e = cudaMemsetAsync(a.v_amax, 0, sizeof(float) * (size_t)BH * 2 * VC_GPU_DPAD, s);
        if (e != cudaSuccess) return e;
        vc_v_stats<T, CPT><<<dim3(a.nkb, BH), 128, 0, s>>>(a);
    }
    if (passes & 16u) vc_v_quantize<T, CPT><<<dim3(a.nkb, BH), 128, 0, s>>>(a);
    return cudaGetLastError();
}

template <typename T, int D>
static cudaError_t vc_prep_launch_v(const vc_prep_args &a, int BH, cudaStream_t s, unsigned passes) {
    if (passes & 1u) {
        vc_k_mean_partial_v<T, D><<<dim3(a.nchunk, BH), 256, 0, s>>>(a);
        vc_k_mean_final<<<BH, 128, 0, s>>>(a);
    }
    if (passes & 2u) vc_k_quantize_v<T, D><<<dim3(a.nkb, BH), 128, 0, s>>>(a);
    if (passes & 4u) vc_q_quantize_v<T, D><<<dim3(a.sq_pad / 64, BH), 128, 0, s>>>(a);
    if (passes & 8u) {
        /* blocks per CTA: fewer atomics, but keep >= ~2048 CTAs */
        const int64_t blocks = (int64_t)a.nkb * BH;
        const int kbpc = g_prep_impl == 2 ? 3 : (int)(blocks >= 4 * 2048 ? 4 : blocks >= 2 * 2048 ? 2 : 1);
        const dim3 grid((a.nkb + kbpc - 1) / kbpc, BH);
        if (a.v_smooth) vc_v_stats_v<T, D, true><<<grid, 128, 0, s>>>(a, kbpc);
        else vc_v_stats_v<T, D, false><<<grid, 128, 0, s>>>(a, kbpc);
    }
    if (passes & 16u) vc_v_quantize_v<T, D><<<dim3(a.nkb, BH), 128, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t vc_prep_launch(const vc_prep_args &a, int BH, int bf16, cudaStream_t s) {
    const unsigned p = g_prep_passes;
    const bool vec = g_prep_impl != 1 && vc_view16(a.q, a.q_stride) && vc_view16(a.k, a.k_stride) &&
                     vc_view16(a.v, a.v_stride);
    if (vec) {
        if (bf16) return a.D == 128 ? vc_prep_launch_v<__nv_bfloat16, 128>(a, BH, s, p) : vc_prep_launch_v<__nv_bfloat16, 64>(a, BH, s, p);
        return a.D == 128 ? vc_prep_launch_v<__half, 128>(a, BH, s, p) : vc_prep_launch_v<__half, 64>(a, BH, s, p);
    }
    if (bf16) return a.D == 128 ? vc_prep_launch_t<__nv_bfloat16, 4>(a, BH, s, p) : vc_prep_launch_t<__nv_bfloat16, 2>(a, BH, s, p);
    return a.D == 128 ? vc_prep_launch_t<__half, 4>(a, BH, s, p) : vc_prep_launch_t<__half, 2>(a, BH, s, p);
}
