/* direct_heads.cu - which (batch, head) pairs the attention kernels must run
 * with the two-rounding P (the DIRECT instantiation, kernel.cuh).
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
 * docs/kernel-log.md), so the choice is made per head here, one threshold
 * for every mode: the head is flagged when the largest possible a,
 * 8 fl(fl(c0 q_max) k_max), passes 2^-7.  Rounding is monotone, so every
 * thread's a = 8 fl(fl(c0 q) k) is at most that: the flagged heads are a
 * superset of those that need it, and inside the DIRECT kernel each thread
 * still decides on its own a.
 *
 * Computed once by the preprocessing (from its scales), read by every attention kernel on that
 * workspace: the kernel half writes nothing here, so runs of one preprocessing may overlap
 * (the caller's per-head exact-P choice, VC_HEAD_EXACT, comes with each launch instead). */
#include <cuda_runtime.h>
#include <math.h>

#include "gpu_common.cuh"
#include "numerics.h"

#define VC_DIRECT_THREADS 256

__global__ void __launch_bounds__(VC_DIRECT_THREADS)
    vc_direct_heads_kernel(const float *q_scale, const float *k_scale, int nq, int nk, float c0,
                           unsigned *flags) {
    __shared__ float red[2][VC_DIRECT_THREADS / 32];
    const int bh = blockIdx.x, tid = threadIdx.x;
    const float *qs = q_scale + (size_t)bh * nq, *ks = k_scale + (size_t)bh * nk;
    float qm = 0.0f, km = 0.0f; /* fmaxf drops a NaN operand */
    for (int i = tid; i < nq; i += VC_DIRECT_THREADS) qm = fmaxf(qm, qs[i]);
    for (int i = tid; i < nk; i += VC_DIRECT_THREADS) km = fmaxf(km, ks[i]);
    for (int o = 16; o > 0; o >>= 1) {
        qm = fmaxf(qm, __shfl_xor_sync(0xffffffffu, qm, o));
        km = fmaxf(km, __shfl_xor_sync(0xffffffffu, km, o));
    }
    if (tid % 32 == 0) {
        red[0][tid / 32] = qm;
        red[1][tid / 32] = km;
    }
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < VC_DIRECT_THREADS / 32; ++w) {
            qm = fmaxf(qm, red[0][w]);
            km = fmaxf(km, red[1][w]);
        }
        const float cq = c0 * qm, c = cq * km; /* the kernel's products, in its order */
        flags[bh] = 8.0f * c > VC_EXPCAST_MAGIC_MAX_A ? VC_HEAD_DIRECT : 0u;
    }
}

cudaError_t vc_direct_heads_launch(const float *q_scale, const float *k_scale, int sq_pad, int nkb, float c0,
                                   unsigned *flags, int BH, cudaStream_t s) {
    /* q_scale: (BH, sq_pad / 64, 32); k_scale: (BH, nkb, 4) (api.cu's layout) */
    const int nq = sq_pad / 64 * 32, nk = nkb * 4;
    vc_direct_heads_kernel<<<BH, VC_DIRECT_THREADS, 0, s>>>(q_scale, k_scale, nq, nk, c0, flags);
    return cudaGetLastError();
}
