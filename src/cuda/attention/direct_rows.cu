/* direct_rows.cu - which 64-row blocks of Q, per (batch, head), the attention
 * kernels must run with the two-rounding P (the DIRECT instantiation, kernel.cuh).
 *
 * The fast kernel writes P with one FMA per score.  ExpCast: fma(a, M + s,
 * bias), whose bias holds fl(-a M + const); for a scale a = 8c above 2^-7
 * (scores of thousands of log2 units per INT32 step, Q or sm_scale scaled up
 * by ~1e3) its rounding error swamps the code, and the simulation takes the
 * bracket from the FP32 score instead (softmax_numerics.h, vc_expcast_bracket_direct).
 * The exp path: 2^fma(s, c, -m), exact product minus m; at scores of ~1e12
 * log2 units the product's rounding residual (half an ULP, up to 2^16) is
 * the exponent, so P becomes Inf or 0 - the DIRECT kernel rounds s c first,
 * as the simulation does.  Putting that choice into the fast kernel's loop
 * costs it registers (a spill and an injected warpgroup.arrive:
 * docs/kernel-log.md), so the choice is made per 64-row block of Q here, one
 * threshold for every mode: a block is flagged when its largest possible a,
 * 8 fl(fl(c0 q_max) k_max) (q_max over the block's Q scales, k_max over the
 * head's K scales), passes 2^-7.  Rounding is monotone, so every thread's
 * a = 8 fl(fl(c0 q) k) is at most that: the flagged blocks are a superset of
 * those that need it, and inside the DIRECT kernel each thread still decides
 * on its own a.  A CTA runs in the DIRECT kernel when any of its blocks is
 * flagged.  Per block, not per head: Q's scale is per row, and on video-like
 * layers a head crosses the bound through a few rows (a handful of its tiles
 * need the DIRECT kernel, not the whole head).
 *
 * Computed once by the preprocessing (from its scales), read by every attention kernel on that
 * workspace: the kernel half writes nothing here, so runs of one preprocessing may overlap
 * (the caller's per-head exact-P choice, VC_HEAD_EXACT, comes with each launch instead). */
#include <cuda_runtime.h>
#include <math.h>

#include "gpu_common.cuh"
#include "numerics.h"

#define VC_DIRECT_THREADS 256

/* one CTA per (batch, head): K's largest scale, then a warp per 64-row block of Q */
__global__ void __launch_bounds__(VC_DIRECT_THREADS)
    vc_direct_rows_kernel(const float *q_scale, const float *k_scale, int qblocks, int nk, float c0,
                          unsigned *flags) {
    __shared__ float red[VC_DIRECT_THREADS / 32];
    const int bh = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const float *qs = q_scale + (size_t)bh * qblocks * 32, *ks = k_scale + (size_t)bh * nk;
    float km = 0.0f; /* fmaxf drops a NaN operand */
    for (int i = tid; i < nk; i += VC_DIRECT_THREADS) km = fmaxf(km, ks[i]);
    for (int o = 16; o > 0; o >>= 1) km = fmaxf(km, __shfl_xor_sync(0xffffffffu, km, o));
    if (lane == 0) red[warp] = km;
    __syncthreads();
    km = red[0];
    for (int w = 1; w < VC_DIRECT_THREADS / 32; ++w) km = fmaxf(km, red[w]);
    for (int blk = warp; blk < qblocks; blk += VC_DIRECT_THREADS / 32) {
        float qm = qs[(size_t)blk * 32 + lane]; /* the block's 32 Q scales, one per lane */
        qm = fmaxf(qm, 0.0f);
        for (int o = 16; o > 0; o >>= 1) qm = fmaxf(qm, __shfl_xor_sync(0xffffffffu, qm, o));
        const float cq = c0 * qm, c = cq * km; /* the kernel's products, in its order */
        if (lane == 0) flags[(size_t)bh * qblocks + blk] = 8.0f * c > VC_EXPCAST_MAGIC_MAX_A ? VC_HEAD_DIRECT : 0u;
    }
}

cudaError_t vc_direct_rows_launch(const float *q_scale, const float *k_scale, int sq_pad, int nkb, float c0,
                                  unsigned *flags, int BH, cudaStream_t s) {
    /* q_scale: (BH, sq_pad / 64, 32); k_scale: (BH, nkb, 4) (api.cu's layout) */
    vc_direct_rows_kernel<<<BH, VC_DIRECT_THREADS, 0, s>>>(q_scale, k_scale, sq_pad / 64, nkb * 4, c0, flags);
    return cudaGetLastError();
}
