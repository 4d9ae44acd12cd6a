/* scalar.cuh - the scalar path of the preprocessing passes, for any view the API
 * accepts: 8-byte loads, one warp per row, one scale group per warp.  K channel
 * mean (partial sums), K smooth + gather + INT8, Q INT8 (+ q . km), V statistics
 * (block means, amax), V residual -> E4M3 written as V^T. */
#pragma once
#include <float.h>
#include <math.h>

#include "gpu_common.cuh"
#include "numerics.h"
#include "preprocess/v_channel.cuh"
#include "ptx/cvt.cuh"

/* ---- K channel mean: partial sums over chunks of tokens (double) ---------------------- */
template <typename T, int CPT>
__global__ void __launch_bounds__(128) vc_k_mean_partial(const __grid_constant__ vc_prep_args a) {
    __shared__ double part[4][VC_GPU_DPAD];
    const int bh = blockIdx.y, chunk = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bh / a.H, h = bh % a.H;
    const T *base = (const T *)a.k + b * a.k_stride[0] + h * a.k_stride[1];
    double s[CPT];
#pragma unroll
    for (int i = 0; i < CPT; ++i) s[i] = 0.0;
    const int j0 = chunk * VC_GPU_KMEAN_CHUNK;
    const int j1 = min(a.Sk_all, j0 + VC_GPU_KMEAN_CHUNK);
    for (int j = j0 + warp; j < j1; j += 4) {
        float x[CPT];
        vc_load_row<T, CPT>(base + (int64_t)j * a.k_stride[2], lane, x);
#pragma unroll
        for (int i = 0; i < CPT; ++i) s[i] += (double)x[i];
    }
#pragma unroll
    for (int i = 0; i < CPT; ++i) part[warp][lane * CPT + i] = s[i];
    __syncthreads();
    const int c = threadIdx.x;
    if (c < a.D)
        a.k_partial[((int64_t)bh * a.nchunk + chunk) * VC_GPU_DPAD + c] =
            ((part[0][c] + part[1][c]) + part[2][c]) + part[3][c];
}

/* ---- K: smooth, gather, quantize one 128-key block ----------------------------------- */
/* NOTE: per_thread groups: warp t owns keys {8j + 2t, 8j + 2t + 1 : j < 16}, the
 * accumulator columns thread t of every quad holds in the attention kernel. */
template <typename T, int CPT>
__global__ void __launch_bounds__(128) vc_k_quantize(const __grid_constant__ vc_prep_args a) {
    __shared__ float km[VC_GPU_DPAD];
    const int bh = blockIdx.y, kb = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bh / a.H, h = bh % a.H;
    if (threadIdx.x < a.D) {
        double s = 0.0;
        for (int i = 0; i < a.nchunk; ++i) s += a.k_partial[((int64_t)bh * a.nchunk + i) * VC_GPU_DPAD + threadIdx.x];
        float m = (float)(s / (double)a.Sk_all);
        km[threadIdx.x] = m;
        if (kb == 0) a.k_mean[(int64_t)bh * a.D + threadIdx.x] = m;
    }
    __syncthreads();
    float kmr[CPT];
#pragma unroll
    for (int i = 0; i < CPT; ++i) kmr[i] = km[lane * CPT + i];

    const T *base = (const T *)a.k + b * a.k_stride[0] + h * a.k_stride[1];
    const int32_t *perm = a.perm ? a.perm + bh * a.perm_stride : nullptr;
    float x[32][CPT];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int pos = kb * VC_BLOCK_K + 8 * (i / 2) + 2 * warp + (i % 2);
        if (pos < a.Skv) {
            const int tok = perm ? perm[pos] : pos;
            vc_load_row<T, CPT>(base + (int64_t)tok * a.k_stride[2], lane, x[i]);
#pragma unroll
            for (int c = 0; c < CPT; ++c) {
                x[i][c] = x[i][c] - kmr[c];
                amax = fmaxf(amax, fabsf(x[i][c]));
            }
        } else {
#pragma unroll
            for (int c = 0; c < CPT; ++c) x[i][c] = 0.0f;
        }
    }
    amax = vc_warp_max(amax);
    const float scale = vc_int8_sage_scale(amax);
    int8_t *out = a.k_codes + ((int64_t)bh * a.skv_pad + kb * VC_BLOCK_K) * VC_GPU_DPAD;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int row = 8 * (i / 2) + 2 * warp + (i % 2);
        uint32_t packed = 0;
#pragma unroll
        for (int c = 0; c < CPT; ++c)
            packed |= (uint32_t)(uint8_t)vc_int8_sage_quantize(x[i][c], scale) << (8 * c);
        if (CPT == 4) {
            *reinterpret_cast<uint32_t *>(out + row * VC_GPU_DPAD + lane * 4) = packed;
        } else {
            *reinterpret_cast<uint16_t *>(out + row * VC_GPU_DPAD + lane * 2) = (uint16_t)packed;
            *reinterpret_cast<uint16_t *>(out + row * VC_GPU_DPAD + 64 + lane * 2) = 0;
        }
    }
    if (lane == 0) a.k_scale[((int64_t)bh * a.nkb + kb) * 4 + warp] = scale;
}

/* ---- Q: quantize one 64-row block ----------------------------------------------------- */
/* NOTE: warp w, g = lane/4 of the attention kernel owns rows 16w + g and 16w + g + 8
 * of each 64-row block: one scale for those two rows. */
template <typename T, int CPT>
__global__ void __launch_bounds__(128) vc_q_quantize(const __grid_constant__ vc_prep_args a) {
    const int bh = blockIdx.y, blk = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bh / a.H, h = bh % a.H;
    const T *base = (const T *)a.q + b * a.q_stride[0] + h * a.q_stride[1];
    float kmr[CPT];
    if (a.q_km) {
#pragma unroll
        for (int c = 0; c < CPT; ++c) kmr[c] = a.k_mean[(int64_t)bh * a.D + lane * CPT + c];
    }
    int8_t *out = a.q_codes + ((int64_t)bh * a.sq_pad + blk * 64) * VC_GPU_DPAD;
    for (int g = 0; g < 8; ++g) {
        float x[2][CPT];
        float amax = 0.0f;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = blk * 64 + 16 * warp + g + 8 * r;
            if (row < a.Sq) {
                vc_load_row<T, CPT>(base + (int64_t)row * a.q_stride[2], lane, x[r]);
            } else {
#pragma unroll
                for (int c = 0; c < CPT; ++c) x[r][c] = 0.0f;
            }
#pragma unroll
            for (int c = 0; c < CPT; ++c) amax = fmaxf(amax, fabsf(x[r][c]));
            if (a.q_km && row < a.Sq) {
                float d = 0.0f;
#pragma unroll
                for (int c = 0; c < CPT; ++c) d = fmaf(x[r][c], kmr[c], d);
                d = vc_warp_sum(d);
                if (lane == 0) a.q_km[(int64_t)bh * a.Sq + row] = d * a.sm;
            }
        }
        amax = vc_warp_max(amax);
        const float scale = vc_int8_sage_scale(amax);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = 16 * warp + g + 8 * r;
            uint32_t packed = 0;
#pragma unroll
            for (int c = 0; c < CPT; ++c)
                packed |= (uint32_t)(uint8_t)vc_int8_sage_quantize(x[r][c], scale) << (8 * c);
            if (CPT == 4) {
                *reinterpret_cast<uint32_t *>(out + row * VC_GPU_DPAD + lane * 4) = packed;
            } else {
                *reinterpret_cast<uint16_t *>(out + row * VC_GPU_DPAD + lane * 2) = (uint16_t)packed;
                *reinterpret_cast<uint16_t *>(out + row * VC_GPU_DPAD + 64 + lane * 2) = 0;
            }
        }
        if (lane == 0) a.q_scale[((int64_t)bh * (a.sq_pad / 64) + blk) * 32 + warp * 8 + g] = scale;
    }
}

/* ---- V statistics of one 128-token block: mean (V-Smooth) and amax ------------------- */
/* v_amax (BH, 2, 128) must be zero before; non-negative floats order like their bits. */
template <typename T, int CPT>
__global__ void __launch_bounds__(128) vc_v_stats(const __grid_constant__ vc_prep_args a) {
    __shared__ double dsum[4][VC_GPU_DPAD];
    __shared__ float fmax_[4][VC_GPU_DPAD];
    __shared__ float mu_s[VC_GPU_DPAD];
    const int bh = blockIdx.y, kb = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bh / a.H, h = bh % a.H;
    const T *base = (const T *)a.v + b * a.v_stride[0] + h * a.v_stride[1];
    const int32_t *perm = a.perm ? a.perm + bh * a.perm_stride : nullptr;
    const int j0 = kb * VC_BLOCK_K;
    const int nvalid = min(VC_BLOCK_K, a.Skv - j0);
    float x[32][CPT];
    double s[CPT];
#pragma unroll
    for (int c = 0; c < CPT; ++c) s[c] = 0.0;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int jj = warp + 4 * i;
        if (jj < nvalid) {
            const int tok = perm ? perm[j0 + jj] : j0 + jj;
            vc_load_row<T, CPT>(base + (int64_t)tok * a.v_stride[2], lane, x[i]);
#pragma unroll
            for (int c = 0; c < CPT; ++c) s[c] += (double)x[i][c];
        } else {
#pragma unroll
            for (int c = 0; c < CPT; ++c) x[i][c] = 0.0f;
        }
    }
    if (a.v_smooth) {
#pragma unroll
        for (int c = 0; c < CPT; ++c) dsum[warp][lane * CPT + c] = s[c];
        __syncthreads();
        if (threadIdx.x < a.D) {
            const int c = threadIdx.x;
            const double t = ((dsum[0][c] + dsum[1][c]) + dsum[2][c]) + dsum[3][c];
            const float mu = (float)(t / (double)nvalid);
            mu_s[c] = mu;
            a.v_block_mean[((int64_t)bh * a.nkb + kb) * VC_GPU_DPAD + c] = mu;
            atomicMax(reinterpret_cast<int *>(a.v_amax + ((int64_t)bh * 2 + 1) * VC_GPU_DPAD + c),
                      __float_as_int(fabsf(mu)));
        }
        __syncthreads();
    }
    float mx[CPT];
#pragma unroll
    for (int c = 0; c < CPT; ++c) mx[c] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        if (warp + 4 * i < nvalid) {
#pragma unroll
            for (int c = 0; c < CPT; ++c) {
                const float r = a.v_smooth ? x[i][c] - mu_s[lane * CPT + c] : x[i][c];
                mx[c] = fmaxf(mx[c], fabsf(r));
            }
        }
    }
#pragma unroll
    for (int c = 0; c < CPT; ++c) fmax_[warp][lane * CPT + c] = mx[c];
    __syncthreads();
    if (threadIdx.x < a.D) {
        const int c = threadIdx.x;
        const float m = fmaxf(fmaxf(fmax_[0][c], fmax_[1][c]), fmaxf(fmax_[2][c], fmax_[3][c]));
        atomicMax(reinterpret_cast<int *>(a.v_amax + (int64_t)bh * 2 * VC_GPU_DPAD + c), __float_as_int(m));
    }
}

/* ---- V: residual -> E4M3 codes, written transposed (key order: v_channel.cuh) ------- */
template <typename T, int CPT>
__global__ void __launch_bounds__(128) vc_v_quantize(const __grid_constant__ vc_prep_args a) {
    __shared__ __align__(16) uint8_t tile[VC_BLOCK_K][VC_GPU_DPAD + 4];
    __shared__ float mu_s[VC_GPU_DPAD], pre_s[VC_GPU_DPAD], inv_s[VC_GPU_DPAD];
    const int bh = blockIdx.y, kb = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bh / a.H, h = bh % a.H;
    vc_v_channel_setup(a, bh, kb, mu_s, pre_s, inv_s);
    __syncthreads();
    const T *base = (const T *)a.v + b * a.v_stride[0] + h * a.v_stride[1];
    const int32_t *perm = a.perm ? a.perm + bh * a.perm_stride : nullptr;
    const int j0 = kb * VC_BLOCK_K;
    const int nvalid = min(VC_BLOCK_K, a.Skv - j0);
    float mu[CPT], pre[CPT], inv[CPT];
#pragma unroll
    for (int c = 0; c < CPT; ++c) {
        mu[c] = mu_s[lane * CPT + c];
        pre[c] = pre_s[lane * CPT + c];
        inv[c] = inv_s[lane * CPT + c];
    }
#pragma unroll 4
    for (int i = 0; i < 32; ++i) {
        const int jj = warp + 4 * i;
        float x[CPT];
        if (jj < nvalid) {
            const int tok = perm ? perm[j0 + jj] : j0 + jj;
            vc_load_row<T, CPT>(base + (int64_t)tok * a.v_stride[2], lane, x);
#pragma unroll
            for (int c = 0; c < CPT; ++c) x[c] = ((a.v_smooth ? x[c] - mu[c] : x[c]) * pre[c]) * inv[c];
        } else {
#pragma unroll
            for (int c = 0; c < CPT; ++c) x[c] = 0.0f;
        }
        if (CPT == 4) {
            uint32_t packed = (uint32_t)cvt_e4m3x2(x[0], x[1]) | ((uint32_t)cvt_e4m3x2(x[2], x[3]) << 16);
            *reinterpret_cast<uint32_t *>(&tile[jj][lane * 4]) = packed;
        } else {
            *reinterpret_cast<uint16_t *>(&tile[jj][lane * 2]) = cvt_e4m3x2(x[0], x[1]);
            *reinterpret_cast<uint16_t *>(&tile[jj][64 + lane * 2]) = 0;
        }
    }
    __syncthreads();
    /* V^T rows: channel c, 8 chunks of 16 keys */
    uint8_t *out = a.v_codes + (int64_t)bh * VC_GPU_DPAD * a.skv_pad + j0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int id = threadIdx.x + 128 * i, c = id / 8, q = id % 8;
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            w[k] = 0;
#pragma unroll
            for (int e = 0; e < 4; ++e) w[k] |= (uint32_t)tile[16 * q + vc_v_perm16[4 * k + e]][c] << (8 * e);
        }
        *reinterpret_cast<uint4 *>(out + (int64_t)c * a.skv_pad + 16 * q) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}
