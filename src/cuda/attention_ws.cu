/* attention_ws.cu - the fused low-bit attention kernel, kernel versions 2 and 3:
 * warp specialization on sm_90a.
 *   WG0 (producer, setmaxnreg 24): one thread issues TMA loads of the Q tile and
 *       of the K and V^T tiles into 4-stage rings (separate K and V stages, each
 *       with a "full" and an "empty" mbarrier).
 *   WG1, WG2 (consumers, setmaxnreg 240, 64 query rows each): ping-pong on two
 *       named barriers.  In its turn a WG issues S_n = Q K_n^T (IGMMA) and
 *       O_{n-1} = P_{n-1} V_{n-1} (QGMMA, P from registers, fresh FP32
 *       accumulator), then hands the tensor cores to the other WG, folds block
 *       n-1 into O (O = alpha O + acc + r mu) and runs the softmax of block n.
 *       Version 3 (OVERLAP) issues P V first and folds while its own S_n runs.
 * The row sum r of the quantized P comes from the tensor core: 8 rows of ones
 * appended to every V^T stage (N = 136), each covering 16 keys, give r in
 * accumulator columns 128..135 (V-Smooth methods; sage2 keeps N = 128 and sums
 * its FP32 p).  The block means (FP16 values in FP32 words) are read from L1 in
 * the fold.  The contract is src/simulate.c's; docs/kernel-log.md has the
 * measurements behind every choice. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <float.h>
#include <math.h>

#include "attention_common.cuh"
#include "gpu_common.cuh"
#include "numerics.h"
#include "ptx/cp_async.cuh"
#include "ptx/cvt.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"

#define WS_THREADS 384
#define WS_STAGES 4
#define WS_K_BYTES 16384                 /* 128 keys x 128 B */
#define WS_V_BYTES 17408                 /* 136 rows x 128 B (8 rows of ones) */
#define WS_OFF_Q 0
#define WS_OFF_K 16384
#define WS_OFF_V (WS_OFF_K + WS_STAGES * WS_K_BYTES)
#define WS_OFF_BAR (WS_OFF_V + WS_STAGES * WS_V_BYTES)
#define WS_SMEM (WS_OFF_BAR + 256 + 1024)
#define WS_BAR_WG0 1 /* named barrier a consumer WG waits on before its turn */
#define WS_E4M3_ONE 0x38u

/* ---- softmax of one block: S (int32 accumulator) -> P fragments ------------------------ */
/* m: running max (log2 units), alpha: exp2(m_old - m_new), lsum: FP32 row sum (sage2) */
template <int MODE, bool TAIL>
__device__ __forceinline__ void ws_softmax(const int32_t (&S)[64], float c, int nvalid, int t, float (&m)[2],
                                           float (&alpha)[2], float (&lsum)[2], uint32_t (&P)[4][4]) {
    float bias[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        int mx = INT_MIN;
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                if (!TAIL || 8 * j + 2 * t + e < nvalid) mx = max(mx, S[4 * j + 2 * hh + e]);
        /* c > 0 and rounding is monotone: max_j fl(s_j c) = fl(max_j(s_j) c) */
        float tm = mx == INT_MIN ? -INFINITY : (float)mx * c;
        tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
        tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
        const float m_new = MODE == VC_MODE_EXPCAST ? fmaxf(m[hh], tm) : fmaxf(m[hh], tm - VC_SAGE2_P_LOG2_OFFSET);
        alpha[hh] = m[hh] == -INFINITY ? 0.0f : ex2_approx(m[hh] - m_new);
        bias[hh] = MODE == VC_MODE_EXPCAST ? (((float)VC_EXPCAST_MAX_CODE + VC_EXPCAST_BETA) - 8.0f * m_new) * (1.0f / 128.0f)
                                           : -m_new;
        m[hh] = m_new;
        lsum[hh] = 0.0f;
    }
    const float c8s = 8.0f * c * (1.0f / 128.0f); /* exact: powers of two */
    /* a[kk][2i + hh] = row g + 8hh, keys 32kk + 16i + {2t, 2t+1, 8+2t, 9+2t} */
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int j0 = 4 * kk + 2 * i;
                const int idx[4] = {4 * j0 + 2 * hh, 4 * j0 + 2 * hh + 1, 4 * j0 + 4 + 2 * hh, 4 * j0 + 5 + 2 * hh};
                const int col[4] = {8 * j0 + 2 * t, 8 * j0 + 2 * t + 1, 8 * j0 + 8 + 2 * t, 8 * j0 + 9 + 2 * t};
                if (MODE == VC_MODE_EXPCAST) {
                    /* ONE fma per score gives the bracket; it runs scaled by 1/128
                     * with .SAT, which clamps below at code 0 for free (the bracket
                     * never exceeds 120 + beta), then a second FFMA scales back and
                     * adds the magic number that rounds RNE into the low mantissa
                     * bits.  Both scalings are exact: the codes are bit-identical
                     * to clip(rint(fmaf(8c, s, b))).  PRMT packs the bytes. */
                    uint32_t y[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float u = __saturatef(fmaf(c8s, (float)S[idx[e]], bias[hh]));
                        float v = fmaf(u, 128.0f, 12582912.0f);
                        if (TAIL && col[e] >= nvalid) v = 12582912.0f;
                        y[e] = __float_as_uint(v);
                    }
                    P[kk][2 * i + hh] = prmt(prmt(y[0], y[1], 0x0040), prmt(y[2], y[3], 0x0040), 0x5410);
                } else {
                    float p[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        p[e] = ex2_approx(fmaf((float)S[idx[e]], c, bias[hh]));
                        if (TAIL && col[e] >= nvalid) p[e] = 0.0f;
                    }
                    if (MODE == VC_MODE_SAGE2) lsum[hh] += (p[0] + p[1]) + (p[2] + p[3]);
                    P[kk][2 * i + hh] = (uint32_t)cvt_e4m3x2(p[0], p[1]) | ((uint32_t)cvt_e4m3x2(p[2], p[3]) << 16);
                }
            }
}

template <int MODE, bool OVERLAP, typename OutT>
__global__ void __launch_bounds__(WS_THREADS, 1)
    vc_attention_ws(const __grid_constant__ vc_attn_args a, const __grid_constant__ vc_tma_maps maps) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sQ = smem + WS_OFF_Q, *sK = smem + WS_OFF_K, *sV = smem + WS_OFF_V;
    uint64_t *bar = (uint64_t *)(smem + WS_OFF_BAR);
    uint64_t *full_k = bar, *full_v = bar + WS_STAGES, *empty_k = bar + 2 * WS_STAGES, *empty_v = bar + 3 * WS_STAGES,
             *q_full = bar + 4 * WS_STAGES;
    constexpr bool kOnes = MODE != VC_MODE_SAGE2;

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int bh = blockIdx.y, qtile = blockIdx.x, nkb = a.nkb;

    if (tid == 0) {
        for (int s = 0; s < WS_STAGES; ++s) {
            mbarrier_init(&full_k[s], 1);
            mbarrier_init(&full_v[s], 1);
            mbarrier_init(&empty_k[s], 8);
            mbarrier_init(&empty_v[s], 8);
        }
        mbarrier_init(q_full, 1);
        fence_mbarrier_init();
    }
    /* rows 128..135 of every V^T stage (TMA writes rows 0..127 only): row 128 + j
     * holds E4M3 ones at the 16 keys 16j..16j+15 (16-byte chunk j, which the
     * 128B swizzle stores at chunk j ^ j = 0), so accumulator column 128 + j is
     * the sum of 16 quantized p: short sums keep the FP8 accumulator's
     * truncation small.  r = sum of the 8 columns, in FP32. */
    if (kOnes)
        for (int i = tid; i < WS_STAGES * 256; i += WS_THREADS) {
            const int w = i % 256; /* 32-bit word of the 1 KB */
            reinterpret_cast<uint32_t *>(sV + (i / 256) * WS_V_BYTES + WS_K_BYTES)[w] =
                (w % 32) < 4 ? WS_E4M3_ONE * 0x01010101u : 0u;
        }
    fence_proxy_async_shared();
    __syncthreads();

    if (wg == 0) {
        /* ================= producer ================= */
        setmaxnreg_dec<24>();
        if (warp == 0 && lane == 0) {
            tma_prefetch_desc(&maps.q);
            tma_prefetch_desc(&maps.k);
            tma_prefetch_desc(&maps.v);
            mbarrier_arrive_expect_tx(q_full, 128 * 128);
            tma_load_2d(sQ, &maps.q, q_full, 0, bh * a.sq_pad + qtile * VC_GPU_TILE_Q);
            for (int kb = 0; kb < nkb; ++kb) {
                const int st = kb % WS_STAGES;
                const uint32_t ph = ((kb / WS_STAGES) & 1) ^ 1;
                mbarrier_wait(&empty_k[st], ph);
                mbarrier_arrive_expect_tx(&full_k[st], WS_K_BYTES);
                tma_load_2d(sK + st * WS_K_BYTES, &maps.k, &full_k[st], 0, bh * a.skv_pad + kb * VC_GPU_BLOCK_K);
                mbarrier_wait(&empty_v[st], ph);
                mbarrier_arrive_expect_tx(&full_v[st], WS_K_BYTES);
                tma_load_2d(sV + st * WS_V_BYTES, &maps.v, &full_v[st], kb * VC_GPU_BLOCK_K, bh * VC_GPU_DPAD);
            }
        }
        return;
    }

    /* ================= consumers ================= */
    setmaxnreg_inc<240>();
    const int cw = wg - 1; /* consumer index: rows cw*64 .. cw*64+63 of the tile */
    const int g = lane / 4, t = lane % 4;
    const int qblk = qtile * 2 + cw;
    const float qs = a.q_scale[((int64_t)bh * (a.sq_pad / 64) + qblk) * 32 + warp * 8 + g];
    const float cq = a.c0 * qs;
    const float *kscale = a.k_scale + (int64_t)bh * nkb * 4 + t;
    const float *mug = a.v_mean + (int64_t)bh * nkb * VC_GPU_DPAD + 2 * t;
    const int tail_valid = a.Skv - (nkb - 1) * VC_GPU_BLOCK_K; /* keys of the last block */

    float O[64], acc[68];
    int32_t S[64];
    uint32_t PA[4][4];
#pragma unroll
    for (int i = 0; i < 64; ++i) { O[i] = 0.0f; S[i] = 0; }
#pragma unroll
    for (int i = 0; i < 68; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) PA[i / 4][i % 4] = 0;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2] = {0.0f, 0.0f}, lsum[2] = {0.0f, 0.0f};

    const uint64_t desc_q = wgmma_desc_sw128(sQ + cw * 8192);
    mbarrier_wait(q_full, 0);
    if (cw == 1) named_barrier_arrive(WS_BAR_WG0, 256); /* WG1 goes first */

    /* NOTE: no wgmma sits under a run-time condition: ptxas then inserts its own
     * warpgroup.arrive and serializes every wgmma (C7520).  Hence the peeled
     * first turn (S_0 only) and last turn (P V of the last block only). */
    auto issue_s = [&](int st) {
        const uint64_t desc_k = wgmma_desc_sw128(sK + st * WS_K_BYTES);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
            wgmma_m64n128k32_s32_s8_ss(S, wgmma_desc_advance(desc_q, 32 * ks), wgmma_desc_advance(desc_k, 32 * ks), ks);
    };
    auto issue_pv = [&](int pst, uint32_t (&P)[4][4]) {
        const uint64_t desc_v = wgmma_desc_sw128(sV + pst * WS_V_BYTES);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            if (kOnes)
                wgmma_m64n136k32_f32_e4m3_rs(acc, P[kk], wgmma_desc_advance(desc_v, 32 * kk), kk);
            else
                wgmma_m64n128k32_f32_e4m3_rs(acc, P[kk], wgmma_desc_advance(desc_v, 32 * kk), kk);
        }
    };
    auto fence_s = [&]() {
#pragma unroll
        for (int i = 0; i < 64; ++i) wgmma_fence_operand(S[i]);
    };
    auto fence_acc = [&]() {
#pragma unroll
        for (int i = 0; i < 68; ++i) wgmma_fence_operand(acc[i]);
    };
    /* fold block kb: O = al O + acc (+ r mu), l = al l + r (or + ls for sage2) */
    auto fold = [&](int kb, int pst, const float (&al)[2], const float (&ls)[2]) {
        const float *mu = mug + (int64_t)kb * VC_GPU_DPAD;
        float r[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            if (kOnes) {
                float x = acc[64 + 2 * hh] + acc[65 + 2 * hh];
                x += __shfl_xor_sync(0xffffffffu, x, 1);
                x += __shfl_xor_sync(0xffffffffu, x, 2);
                r[hh] = x;
            } else {
                r[hh] = 0.0f;
            }
            l[hh] = fmaf(al[hh], l[hh], kOnes ? r[hh] : ls[hh]);
        }
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            float2 mu2 = make_float2(0.0f, 0.0f);
            if (kOnes) mu2 = __ldg(reinterpret_cast<const float2 *>(mu + 8 * j));
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i0 = 4 * j + 2 * hh;
                float o0 = fmaf(al[hh], O[i0], acc[i0]);
                float o1 = fmaf(al[hh], O[i0 + 1], acc[i0 + 1]);
                if (kOnes) {
                    o0 = fmaf(r[hh], mu2.x, o0);
                    o1 = fmaf(r[hh], mu2.y, o1);
                }
                O[i0] = o0;
                O[i0 + 1] = o1;
            }
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&empty_v[pst]);
    };
    auto softmax = [&](int kb, float c, uint32_t (&P)[4][4]) {
        if (kb == nkb - 1 && tail_valid < VC_GPU_BLOCK_K)
            ws_softmax<MODE, true>(S, c, tail_valid, t, m, alpha, lsum, P);
        else
            ws_softmax<MODE, false>(S, c, VC_GPU_BLOCK_K, t, m, alpha, lsum, P);
    };
    auto begin_turn = [&]() {
        named_barrier_sync(WS_BAR_WG0 + cw, 256);
        wgmma_fence();
    };
    auto end_issue = [&]() { named_barrier_arrive(WS_BAR_WG0 + (cw ^ 1), 256); };

    /* one steady-state turn: S_kb and P_{kb-1} V_{kb-1}.  Pin: P of block kb-1
     * (read by the PV wgmma), Pout: P of block kb (written by the softmax). */
    /* NOTE: the means of block kb are read in the fold of the NEXT turn; fetched
     * there from L2 they put ~25 ms on the critical path at Wan 720p (measured),
     * so they are prefetched into L1 one turn ahead. */
    const float *mu_base = a.v_mean + (int64_t)bh * nkb * VC_GPU_DPAD;
    auto prefetch_mu = [&](int kb) {
        if (kOnes && lane < 4) prefetch_l1(mu_base + (int64_t)kb * VC_GPU_DPAD + lane * 32);
    };
    auto turn = [&](int kb, uint32_t (&Pin)[4][4], uint32_t (&Pout)[4][4]) {
        const int st = kb % WS_STAGES, pst = (kb - 1) % WS_STAGES;
        const float c = cq * kscale[kb * 4];
        prefetch_mu(kb);
        mbarrier_wait(&full_k[st], (kb / WS_STAGES) & 1);
        mbarrier_wait(&full_v[pst], ((kb - 1) / WS_STAGES) & 1);
        begin_turn();
        if (OVERLAP) {
            issue_pv(pst, Pin);
            wgmma_commit();
            issue_s(st);
            wgmma_commit();
        } else {
            issue_s(st);
            issue_pv(pst, Pin);
            wgmma_commit();
        }
        end_issue();
        if (OVERLAP) {
            /* fold block kb-1 while this WG's own S_kb still runs (P V was issued first) */
            wgmma_wait<1>();
            fence_acc();
            __syncwarp();
            fold(kb - 1, pst, alpha, lsum);
            wgmma_wait<0>();
            fence_s();
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty_k[st]);
            softmax(kb, c, Pout);
        } else {
            wgmma_wait<0>();
            fence_s();
            fence_acc();
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty_k[st]);
            fold(kb - 1, pst, alpha, lsum);
            softmax(kb, c, Pout);
        }
    };

    /* ---- first turn: S_0 ---- */
    {
        const float c = cq * kscale[0];
        prefetch_mu(0);
        mbarrier_wait(&full_k[0], 0);
        begin_turn();
        issue_s(0);
        wgmma_commit();
        end_issue();
        wgmma_wait<0>();
        fence_s();
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&empty_k[0]);
        softmax(0, c, PA);
    }
    /* the P V wgmma has completed before the softmax rewrites P: one buffer */
    for (int kb = 1; kb < nkb; ++kb) turn(kb, PA, PA);
    /* ---- last turn: P V of the last block (its P is in PA) ---- */
    {
        const int pst = (nkb - 1) % WS_STAGES;
        mbarrier_wait(&full_v[pst], ((nkb - 1) / WS_STAGES) & 1);
        begin_turn();
        issue_pv(pst, PA);
        wgmma_commit();
        if (cw == 0) named_barrier_arrive(WS_BAR_WG0 + 1, 256);
        wgmma_wait<0>();
        fence_acc();
        __syncwarp();
        fold(nkb - 1, pst, alpha, lsum);
    }

    vc_store_rows<MODE, OutT>(a, O, l, m, bh, qtile * VC_GPU_TILE_Q + cw * 64 + warp * 16 + g, t);
}

/* ---- host: tensor maps and launch ------------------------------------------------------- */
template <int MODE, typename OutT>
static cudaError_t vc_ws_launch_t(const vc_attn_args &a, const vc_tma_maps &maps, int BH, int overlap, cudaStream_t s) {
    auto kern = overlap ? vc_attention_ws<MODE, true, OutT> : vc_attention_ws<MODE, false, OutT>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, WS_SMEM);
    if (e != cudaSuccess) return e;
    kern<<<dim3(a.sq_pad / VC_GPU_TILE_Q, BH), WS_THREADS, WS_SMEM, s>>>(a, maps);
    return cudaGetLastError();
}

cudaError_t vc_attn_ws_launch(const vc_attn_args &a, int BH, int mode, int out_bf16, int overlap, cudaStream_t s) {
    vc_tma_maps maps;
    if (!vc_attn_make_maps(a, BH, &maps)) return cudaErrorInvalidValue;
    switch (mode) {
    case VC_MODE_SAGE2:
        return out_bf16 ? vc_ws_launch_t<VC_MODE_SAGE2, __nv_bfloat16>(a, maps, BH, overlap, s)
                        : vc_ws_launch_t<VC_MODE_SAGE2, __half>(a, maps, BH, overlap, s);
    case VC_MODE_VSMOOTH:
        return out_bf16 ? vc_ws_launch_t<VC_MODE_VSMOOTH, __nv_bfloat16>(a, maps, BH, overlap, s)
                        : vc_ws_launch_t<VC_MODE_VSMOOTH, __half>(a, maps, BH, overlap, s);
    default:
        return out_bf16 ? vc_ws_launch_t<VC_MODE_EXPCAST, __nv_bfloat16>(a, maps, BH, overlap, s)
                        : vc_ws_launch_t<VC_MODE_EXPCAST, __half>(a, maps, BH, overlap, s);
    }
}
