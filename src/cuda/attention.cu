/* attention.cu - the fused low-bit attention kernel (sm_90a), stage (a):
 * two consumer warpgroups x 64 query rows per CTA, K / V^T tiles double
 * buffered through cp.async into 128B-swizzled shared memory (all threads
 * load), S = Q K^T on IGMMA (s8, both operands from shared memory), the online
 * softmax in registers (exp path or ExpCast), O_b = P V^T on QGMMA (e4m3, P from
 * registers) into a fresh FP32 accumulator per block, then one fold
 *     O = alpha * O + O_b (+ r * mu_b)          (two-level accumulation, V-Smooth restore)
 * and the epilogue O / l * v_scale, LSE.  The contract is src/simulate.c's. */
#include <float.h>
#include <math.h>

#include "gpu_common.cuh"
#include "numerics.h"
#include "ptx/cp_async.cuh"
#include "ptx/cvt.cuh"
#include "ptx/wgmma.cuh"

#define VC_ATTN_THREADS 256
#define VC_SMEM_Q 0                    /* 128 rows x 128 B */
#define VC_SMEM_K (16 * 1024)          /* 2 stages x 16 KB */
#define VC_SMEM_V (48 * 1024)          /* 2 stages x 16 KB: V^T, 128 channels x 128 keys */
#define VC_SMEM_MU (80 * 1024)         /* 2 stages x 128 floats */
#define VC_ATTN_SMEM (80 * 1024 + 1024 + 1024) /* + alignment slack */

/* 16-byte chunk c of row r of a 128-byte-row tile, 128B swizzle */
__device__ __forceinline__ int vc_sw128(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

__device__ __forceinline__ void vc_load_tile_128x128(uint8_t *smem, const uint8_t *g, int64_t row_stride, int tid) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int id = tid + VC_ATTN_THREADS * i, r = id / 8, c = id % 8;
        cp_async_16(smem + vc_sw128(r, c), g + r * row_stride + c * 16);
    }
}

/* Sum of the four E4M3 values packed in x (exact: halves hold every E4M3 value). */
__device__ __forceinline__ float vc_e4m3x4_sum(uint32_t x) {
    const uint32_t lo = cvt_f16x2_from_e4m3x2((uint16_t)(x & 0xFFFF));
    const uint32_t hi = cvt_f16x2_from_e4m3x2((uint16_t)(x >> 16));
    const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&lo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&hi));
    return (a.x + a.y) + (b.x + b.y);
}

template <int MODE, typename OutT>
__global__ void __launch_bounds__(VC_ATTN_THREADS, 1) vc_attention_fwd(const __grid_constant__ vc_attn_args a) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sQ = smem + VC_SMEM_Q, *sK = smem + VC_SMEM_K, *sV = smem + VC_SMEM_V;
    float *sMu = (float *)(smem + VC_SMEM_MU);

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int bh = blockIdx.y, qtile = blockIdx.x;
    const int nkb = a.nkb;

    /* ---- Q tile and the first K / V^T block ---- */
    vc_load_tile_128x128(sQ, (const uint8_t *)a.q_codes + ((int64_t)bh * a.sq_pad + qtile * VC_GPU_TILE_Q) * VC_GPU_DPAD,
                         VC_GPU_DPAD, tid);
    const uint8_t *kg = (const uint8_t *)a.k_codes + (int64_t)bh * a.skv_pad * VC_GPU_DPAD;
    const uint8_t *vg = a.v_codes + (int64_t)bh * VC_GPU_DPAD * a.skv_pad;
    const float *mug = a.v_mean + (int64_t)bh * nkb * VC_GPU_DPAD;
    auto load_block = [&](int kb, int st) {
        vc_load_tile_128x128(sK + st * 16384, kg + (int64_t)kb * VC_GPU_BLOCK_K * VC_GPU_DPAD, VC_GPU_DPAD, tid);
        vc_load_tile_128x128(sV + st * 16384, vg + (int64_t)kb * VC_GPU_BLOCK_K, a.skv_pad, tid);
        if (MODE != VC_MODE_SAGE2 && tid < 32)
            cp_async_16(sMu + st * VC_GPU_DPAD + tid * 4, mug + (int64_t)kb * VC_GPU_DPAD + tid * 4);
    };
    load_block(0, 0);
    cp_async_commit();

    /* per-thread constants: the Q scale of rows g, g+8 of this warp */
    const int qblk = qtile * 2 + wg; /* 64-row block */
    const float qs = a.q_scale[((int64_t)bh * (a.sq_pad / 64) + qblk) * 32 + warp * 8 + g];
    const float cq = a.c0 * qs;
    const float *kscale = a.k_scale + (int64_t)bh * nkb * 4 + t;

    float O[64];
    int32_t S[64];
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) { O[i] = 0.0f; S[i] = 0; acc[i] = 0.0f; }
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    const uint64_t desc_q = wgmma_desc_sw128(sQ + wg * 8192);

    for (int kb = 0; kb < nkb; ++kb) {
        const int st = kb & 1;
        cp_async_wait<0>();
        fence_proxy_async_shared();
        __syncthreads();
        if (kb + 1 < nkb) load_block(kb + 1, st ^ 1);
        cp_async_commit();

        /* ---- S = Q K^T (IGMMA, 4 k-steps of 32 channels) ---- */
        const uint64_t desc_k = wgmma_desc_sw128(sK + st * 16384);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
            wgmma_m64n128k32_s32_s8_ss(S, wgmma_desc_advance(desc_q, 32 * ks), wgmma_desc_advance(desc_k, 32 * ks), ks);
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 64; ++i) wgmma_fence_operand(S[i]);

        /* ---- online softmax ---- */
        const float c = cq * kscale[kb * 4];
        const bool tail = (kb + 1) * VC_GPU_BLOCK_K > a.Skv;
        const int nvalid = a.Skv - kb * VC_GPU_BLOCK_K; /* keys col < nvalid are real */
        float sf[64];
        int mx[2] = {INT_MIN, INT_MIN};
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = 8 * j + 2 * t + e;
                const bool ok = !tail || col < nvalid;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int idx = 4 * j + 2 * hh + e;
                    sf[idx] = (float)S[idx];
                    if (ok) mx[hh] = max(mx[hh], S[idx]);
                }
            }
        float m_new[2], alpha[2], bias[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            /* c > 0 and rounding is monotone: max_j fl(s_j c) = fl(max_j s_j * c) */
            float tm = mx[hh] == INT_MIN ? -INFINITY : (float)mx[hh] * c;
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
            if (MODE == VC_MODE_EXPCAST)
                m_new[hh] = fmaxf(m[hh], tm);
            else
                m_new[hh] = fmaxf(m[hh], tm - VC_SAGE2_P_LOG2_OFFSET);
            alpha[hh] = m[hh] == -INFINITY ? 0.0f : ex2_approx(m[hh] - m_new[hh]);
            bias[hh] = MODE == VC_MODE_EXPCAST ? ((float)VC_EXPCAST_MAX_CODE + VC_EXPCAST_BETA) - 8.0f * m_new[hh]
                                               : -m_new[hh];
            m[hh] = m_new[hh];
        }

        /* P codes straight into the A fragments: a[kk][2i + hh] = row g + 8hh,
         * keys 32kk + 16i + {2t, 2t+1, 8+2t, 9+2t} (V^T is permuted to match) */
        uint32_t P[4][4];
        float lsum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int j0 = 4 * kk + 2 * i; /* n8 chunks j0, j0+1 */
                    const int idx[4] = {4 * j0 + 2 * hh, 4 * j0 + 2 * hh + 1, 4 * (j0 + 1) + 2 * hh, 4 * (j0 + 1) + 2 * hh + 1};
                    const int cols[4] = {8 * j0 + 2 * t, 8 * j0 + 2 * t + 1, 8 * (j0 + 1) + 2 * t, 8 * (j0 + 1) + 2 * t + 1};
                    if (MODE == VC_MODE_EXPCAST) {
                        /* ONE fma per score, then the magic-number add rounds RNE
                         * into the low mantissa bits; clamp below at code 0 */
                        const float c8 = 8.0f * c;
                        uint32_t y[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            float v = fmaf(c8, sf[idx[e]], bias[hh]) + 12582912.0f;
                            v = fmaxf(v, 12582912.0f);
                            if (tail && cols[e] >= nvalid) v = 12582912.0f;
                            y[e] = __float_as_uint(v);
                        }
                        P[kk][2 * i + hh] = prmt(prmt(y[0], y[1], 0x0040), prmt(y[2], y[3], 0x0040), 0x5410);
                    } else {
                        float p[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            p[e] = ex2_approx(fmaf(sf[idx[e]], c, bias[hh]));
                            if (tail && cols[e] >= nvalid) p[e] = 0.0f;
                        }
                        if (MODE == VC_MODE_SAGE2) lsum[hh] += (p[0] + p[1]) + (p[2] + p[3]);
                        P[kk][2 * i + hh] = (uint32_t)cvt_e4m3x2(p[0], p[1]) | ((uint32_t)cvt_e4m3x2(p[2], p[3]) << 16);
                    }
                    if (MODE != VC_MODE_SAGE2) lsum[hh] += vc_e4m3x4_sum(P[kk][2 * i + hh]);
                }

        /* ---- O_b = P V (QGMMA, fresh accumulator) ---- */
        const uint64_t desc_v = wgmma_desc_sw128(sV + st * 16384);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            wgmma_m64n128k32_f32_e4m3_rs(acc, P[kk], wgmma_desc_advance(desc_v, 32 * kk), kk);
        wgmma_commit();

        float r[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            if (MODE == VC_MODE_SAGE2) {
                l[hh] = alpha[hh] * l[hh] + lsum[hh]; /* per-thread partial, reduced at the end */
            } else {
                float s = lsum[hh];
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                r[hh] = s;
                l[hh] = alpha[hh] * l[hh] + s;
            }
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 64; ++i) wgmma_fence_operand(acc[i]);

        /* ---- fold: O = alpha O + O_b (+ r mu_b) ---- */
        const float *mu = sMu + st * VC_GPU_DPAD;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            float2 mu2 = make_float2(0.0f, 0.0f);
            if (MODE != VC_MODE_SAGE2) mu2 = *reinterpret_cast<const float2 *>(mu + 8 * j + 2 * t);
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i0 = 4 * j + 2 * hh;
                float o0 = fmaf(alpha[hh], O[i0], acc[i0]);
                float o1 = fmaf(alpha[hh], O[i0 + 1], acc[i0 + 1]);
                if (MODE != VC_MODE_SAGE2) {
                    o0 = fmaf(r[hh], mu2.x, o0);
                    o1 = fmaf(r[hh], mu2.y, o1);
                }
                O[i0] = o0;
                O[i0 + 1] = o1;
            }
        }
    }

    /* ---- epilogue ---- */
    if (MODE == VC_MODE_SAGE2) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
            l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
        }
    }
    const int b = bh / a.H, h = bh % a.H;
    const float *vs = a.v_scale + (int64_t)bh * VC_GPU_DPAD;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int row = qtile * VC_GPU_TILE_Q + wg * 64 + warp * 16 + g + 8 * hh;
        if (row >= a.Sq) continue;
        OutT *orow = (OutT *)a.o + b * a.o_stride[0] + h * a.o_stride[1] + (int64_t)row * a.o_stride[2];
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int col = 8 * j + 2 * t;
            if (col >= a.D) continue;
            const float2 s2 = *reinterpret_cast<const float2 *>(vs + col);
            const float o0 = O[4 * j + 2 * hh] / l[hh] * s2.x;
            const float o1 = O[4 * j + 2 * hh + 1] / l[hh] * s2.y;
            if (__is_same(OutT, __nv_bfloat16))
                *reinterpret_cast<__nv_bfloat162 *>(orow + col) = __floats2bfloat162_rn(o0, o1);
            else
                *reinterpret_cast<__half2 *>(orow + col) = __floats2half2_rn(o0, o1);
        }
        if (a.lse && t == 0) {
            const float bias2 = MODE == VC_MODE_EXPCAST ? 8.0f : 0.0f; /* log2(P scale) */
            const float lse2 = m[hh] + log2f(l[hh]) - bias2;
            a.lse[(int64_t)bh * a.Sq + row] = lse2 * 0.69314718055994531f + (a.q_km ? a.q_km[(int64_t)bh * a.Sq + row] : 0.0f);
        }
    }
}

template <int MODE, typename OutT>
static cudaError_t vc_attn_launch_t(const vc_attn_args &a, int BH, cudaStream_t s) {
    cudaError_t e = cudaFuncSetAttribute(vc_attention_fwd<MODE, OutT>, cudaFuncAttributeMaxDynamicSharedMemorySize, VC_ATTN_SMEM);
    if (e != cudaSuccess) return e;
    vc_attention_fwd<MODE, OutT><<<dim3(a.sq_pad / VC_GPU_TILE_Q, BH), VC_ATTN_THREADS, VC_ATTN_SMEM, s>>>(a);
    return cudaGetLastError();
}

cudaError_t vc_attn_launch(const vc_attn_args &a, int BH, int mode, int out_bf16, cudaStream_t s) {
    switch (mode) {
    case VC_MODE_SAGE2:
        return out_bf16 ? vc_attn_launch_t<VC_MODE_SAGE2, __nv_bfloat16>(a, BH, s) : vc_attn_launch_t<VC_MODE_SAGE2, __half>(a, BH, s);
    case VC_MODE_VSMOOTH:
        return out_bf16 ? vc_attn_launch_t<VC_MODE_VSMOOTH, __nv_bfloat16>(a, BH, s) : vc_attn_launch_t<VC_MODE_VSMOOTH, __half>(a, BH, s);
    default:
        return out_bf16 ? vc_attn_launch_t<VC_MODE_EXPCAST, __nv_bfloat16>(a, BH, s) : vc_attn_launch_t<VC_MODE_EXPCAST, __half>(a, BH, s);
    }
}
