/* v_channel.cuh - what both V quantize passes share: the order of the keys inside
 * every 16 of V^T, and the per-channel setup of one V block (scale, mean, 1/scale,
 * the stored FP16 means). */
#pragma once
#include <cuda_fp16.h>

#include "gpu_common.cuh"
#include "numerics.h"

/* NOTE: inside every 16 keys, physical position p of V^T holds key
 * 16*(p/16) + {0,1,8,9,2,3,10,11,4,5,12,13,6,7,14,15}[p%16]: the bytes a thread of
 * the attention kernel packs from its S accumulator columns {2t, 2t+1, 8+2t, 9+2t}
 * then land on the A-fragment positions 4t..4t+3 with no shuffle. */
__constant__ uint8_t vc_v_perm16[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};

/* Channel c = threadIdx.x (128 threads) of V block kb: its scale (written once,
 * at kb = 0), the block mean, pre and 1/scale (numerics.h,
 * vc_v_channel_scale_any: q = ((v - mu) pre) inv) into shared memory for the quantizer,
 * and with V-Smooth the stored means: FP16(mu / scale) as FP32 words (v_mean)
 * and the restore's B operand (v_mean_tc): the FP16 value twice in its
 * group's layout (attention/restore.cuh). */
__device__ __forceinline__ void vc_v_channel_setup(const vc_prep_args &a, int bh, int kb, float *mu_s, float *pre_s,
                                                   float *inv_s) {
    const int c = threadIdx.x;
    float scale = 1.0f, pre = 1.0f, inv = 1.0f, mu = 0.0f;
    if (c < a.D) {
        const float amax = a.v_amax[(int64_t)bh * 2 * VC_GPU_DPAD + c];
        const float mu_amax = a.v_amax[((int64_t)bh * 2 + 1) * VC_GPU_DPAD + c];
        vc_v_channel_scale_any(amax, mu_amax, &scale, &pre, &inv);
        if (a.v_smooth) mu = a.v_block_mean[((int64_t)bh * a.nkb + kb) * VC_GPU_DPAD + c];
    }
    mu_s[c] = mu;
    pre_s[c] = pre;
    inv_s[c] = inv;
    if (kb == 0) a.v_scale[(int64_t)bh * VC_GPU_DPAD + c] = scale;
    if (a.v_smooth) {
        /* vc_fp16_round: RNE to half, saturating at 65504 */
        float q = c < a.D ? mu / scale : 0.0f;
        q = fminf(fmaxf(q, -VC_FP16_MAX), VC_FP16_MAX);
        __half hq = __float2half_rn(q);
        if (__hisinf(hq)) hq = __float2half_rn(q > 0.0f ? VC_FP16_MAX : -VC_FP16_MAX);
        a.v_mean[((int64_t)bh * a.nkb + kb) * VC_GPU_DPAD + c] = __half2float(hq);
        const uint32_t h2 = (uint32_t)__half_as_ushort(hq) * 0x00010001u; /* the mean, twice */
        /* group g = kb / 8, half (kb / 4) % 2, channel c: 16 B holding the
         * half's 4 blocks' means twice each; block kb's word is kb % 4.  The
         * last block also zeroes the words of the blocks past nkb (their A
         * coefficients are 0, and 0 x NaN would not be). */
        const int ngroups = (a.nkb + 7) / 8;
        uint32_t *w = reinterpret_cast<uint32_t *>(a.v_mean_tc + (int64_t)bh * ngroups * 2 * VC_GPU_DPAD);
        w[(((int64_t)(kb / 8) * 2 + (kb / 4) % 2) * VC_GPU_DPAD + c) * 4 + kb % 4] = h2;
        if (kb == a.nkb - 1)
            for (int x = a.nkb; x < ngroups * 8; ++x)
                w[(((int64_t)(x / 8) * 2 + (x / 4) % 2) * VC_GPU_DPAD + c) * 4 + x % 4] = 0u;
    }
}
