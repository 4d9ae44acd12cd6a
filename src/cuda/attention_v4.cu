/* attention_v4.cu - kernel version 4: version 3 (attention_ws.cu) with the
 * per-turn work re-ordered so that less of it sits between "own S done" and
 * "next issue", the only stretch of a consumer turn that the other warpgroup's
 * MMAs cannot hide (docs/kernel-log.md, v4):
 *   - the fold of block n-1 is kept entirely BEFORE the wait for S_n: in v3,
 *     ptxas sank ~100 of its 128 FFMA (and the r*mu restore) below
 *     WARPGROUP.DEPBAR 0 because both sat in one basic block; here the wait for
 *     S_n sits inside the tail / no-tail branch of the softmax, a separate
 *     basic block, so the fold stays in the window where S_n still runs;
 *   - the next turn's prerequisites (its K / V^T full-barrier waits, its K
 *     scale load, the copy of the means) are done right after the issue,
 *     while the own P V waits behind the other WG's MMAs, not at the top of
 *     the next turn;
 *   - the INT8 row max is a tree of 3-input maxima (depth 4) instead of two
 *     16-deep chains;
 *   - the block means (and the block's K scales) come from shared memory: each
 *     consumer warp copies them with cp.async into its own 3-slot ring ahead of
 *     use (v3 read them from global memory in the fold, and the first r*mu
 *     FFMA waited on L2).
 * Same arithmetic as version 3, operation for operation: the P codes, r, the
 * means and the fold are unchanged (the contract of src/simulate.c holds as for
 * v3).
 * Layout, pipeline and ping-pong: see attention_ws.cu. */
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
#define WS_OFF_MU (WS_OFF_BAR + 256)
#define V4_MU_SLOTS 3   /* per consumer warp: a cp.async ring of block means + K scales */
#define V4_SLOT_BYTES 528 /* 128 FP32 means, then the block's 4 K scales */
#define WS_SMEM (WS_OFF_MU + 8 * V4_MU_SLOTS * V4_SLOT_BYTES + 1024)
#define WS_BAR_WG0 1 /* named barrier a consumer WG waits on before its turn */
#define WS_E4M3_ONE 0x38u

/* 16 bytes global -> shared (shared address given), bypassing L1 */
__device__ __forceinline__ void v4_cp_async_16(uint32_t saddr, const void *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem) : "memory");
}
/* 4 / 8 bytes from shared memory (LDS; volatile: stays after the cp.async wait) */
__device__ __forceinline__ float v4_lds_f32(uint32_t saddr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(saddr) : "memory");
    return v;
}
__device__ __forceinline__ float2 v4_lds_f2(uint32_t saddr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(saddr) : "memory");
    return v;
}

/* ---- softmax of one block: S (int32 accumulator) -> P fragments ------------------------ */
/* m: running max (log2 units), alpha: exp2(m_old - m_new), lsum: FP32 row sum (sage2) */
template <int MODE, bool TAIL>
__device__ __forceinline__ void v4_softmax(const int32_t (&S)[64], float c, int nvalid, int t, float (&m)[2],
                                           float (&alpha)[2], float (&lsum)[2], uint32_t (&P)[4][4]) {
    float bias[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int mx = vc_row_max_s32<TAIL>(S, hh, t, nvalid);
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

template <int MODE, typename OutT>
__global__ void __launch_bounds__(WS_THREADS, 1)
    vc_attention_v4(const __grid_constant__ vc_attn_args a, const __grid_constant__ vc_tma_maps maps) {
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
    const float *kscale = a.k_scale + (int64_t)bh * nkb * 4;
    /* this warp's cp.async ring in shared memory: block means (V-Smooth methods), K scales */
    const uint32_t smu = smem_u32(smem + WS_OFF_MU) + (cw * 4 + warp) * V4_MU_SLOTS * V4_SLOT_BYTES; /* shared address */
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
        const uint32_t mu = smu + (kb % V4_MU_SLOTS) * V4_SLOT_BYTES + 8 * t;
        cp_async_wait<1>(); /* block kb's slot and block kb+1's (all but the newest group) */
        __syncwarp();
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
            if (kOnes) mu2 = v4_lds_f2(mu + 32 * j);
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
    auto begin_turn = [&]() {
        named_barrier_sync(WS_BAR_WG0 + cw, 256);
        wgmma_fence();
    };
    auto end_issue = [&]() { named_barrier_arrive(WS_BAR_WG0 + (cw ^ 1), 256); };

    /* NOTE: the means of block kb are read in the fold of turn kb+1.  From global
     * memory (v3, and v4's first form) the first r*mu FFMA waited on an L2 round
     * trip in ~6% of the consumer's stall samples (ncu, run 14) although they were
     * prefetched into L1; each warp now copies them with cp.async into its own
     * ring slot two turns ahead (16 B a lane) and reads them with LDS.  The
     * block's 4 K scales travel in the same slot (lane 0): no register holds
     * them across a turn and no FMUL waits on their load. */
    const float *mu_base = a.v_mean + (int64_t)bh * nkb * VC_GPU_DPAD;
    auto load_slot = [&](int kb) { /* always commits a group (empty past the last block) */
        if (kb < nkb) {
            const uint32_t slot = smu + (kb % V4_MU_SLOTS) * V4_SLOT_BYTES;
            if (kOnes) v4_cp_async_16(slot + lane * 16, mu_base + (int64_t)kb * VC_GPU_DPAD + lane * 4);
            if (lane == 0) v4_cp_async_16(slot + 512, kscale + (int64_t)kb * 4);
        }
        cp_async_commit();
    };
    /* K scale of block kb (column group t), from its ring slot */
    auto slot_kscale = [&](int kb) { return v4_lds_f32(smu + (kb % V4_MU_SLOTS) * V4_SLOT_BYTES + 512 + 4 * t); };

    /* Right after this turn's issue, while its own P V is still queued: everything
     * the NEXT turn needs before it can issue - its K stage (block kb+1), the
     * V^T stage of block kb (read by the next turn's P V) - and the cp.async of
     * block kb+1's slot (K scales for the softmax of turn kb+1, means for the
     * fold of turn kb+2). */
    auto prepare_next = [&](int kb) {
        load_slot(kb + 1);
        if (kb + 1 < nkb) mbarrier_wait(&full_k[(kb + 1) % WS_STAGES], ((kb + 1) / WS_STAGES) & 1);
        mbarrier_wait(&full_v[kb % WS_STAGES], (kb / WS_STAGES) & 1);
    };
    /* wait for S_kb and run its softmax.  NOTE: the wgmma wait sits INSIDE each
     * branch (its own basic block): in one block with the fold, ptxas hoists
     * WARPGROUP.DEPBAR above most of the fold's FFMAs (seen in v3's SASS). */
    auto finish_s = [&](int kb) { /* the slot of block kb is complete (waited in the fold) */
        const int st = kb % WS_STAGES;
        const float c = cq * slot_kscale(kb);
        if (kb == nkb - 1 && tail_valid < VC_GPU_BLOCK_K) {
            wgmma_wait<0>();
            fence_s();
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty_k[st]);
            v4_softmax<MODE, true>(S, c, tail_valid, t, m, alpha, lsum, PA);
        } else {
            wgmma_wait<0>();
            fence_s();
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty_k[st]);
            v4_softmax<MODE, false>(S, c, VC_GPU_BLOCK_K, t, m, alpha, lsum, PA);
        }
    };

    /* ---- first turn: S_0 ---- */
    load_slot(0);
    {
        mbarrier_wait(&full_k[0], 0);
        begin_turn();
        issue_s(0);
        wgmma_commit();
        end_issue();
        prepare_next(0);
        cp_async_wait<1>(); /* block 0's slot */
        __syncwarp();
        finish_s(0);
    }
    /* steady state: P_{kb-1} V_{kb-1} then S_kb; fold block kb-1 under S_kb.
     * The P V wgmma has completed (wait 1) before the softmax rewrites PA. */
    for (int kb = 1; kb < nkb; ++kb) {
        const int st = kb % WS_STAGES, pst = (kb - 1) % WS_STAGES;
        begin_turn();
        issue_pv(pst, PA);
        wgmma_commit();
        issue_s(st);
        wgmma_commit();
        end_issue();
        /* while the own P V waits behind the other WG's MMAs (ncu: 12% of the
         * stall samples sat on this wait), not after the fold */
        prepare_next(kb);
        wgmma_wait<1>();
        fence_acc();
        __syncwarp();
        fold(kb - 1, pst, alpha, lsum);
        finish_s(kb);
    }
    /* ---- last turn: P V of the last block (its P is in PA, its V^T stage waited) ---- */
    {
        const int pst = (nkb - 1) % WS_STAGES;
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
static cudaError_t vc_v4_launch_t(const vc_attn_args &a, const vc_tma_maps &maps, int BH, cudaStream_t s) {
    auto kern = vc_attention_v4<MODE, OutT>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, WS_SMEM);
    if (e != cudaSuccess) return e;
    kern<<<dim3(a.sq_pad / VC_GPU_TILE_Q, BH), WS_THREADS, WS_SMEM, s>>>(a, maps);
    return cudaGetLastError();
}

cudaError_t vc_attn_v4_launch(const vc_attn_args &a, int BH, int mode, int out_bf16, cudaStream_t s) {
    vc_tma_maps maps;
    if (!vc_attn_make_maps(a, BH, &maps)) return cudaErrorInvalidValue;
    switch (mode) {
    case VC_MODE_SAGE2:
        return out_bf16 ? vc_v4_launch_t<VC_MODE_SAGE2, __nv_bfloat16>(a, maps, BH, s)
                        : vc_v4_launch_t<VC_MODE_SAGE2, __half>(a, maps, BH, s);
    case VC_MODE_VSMOOTH:
        return out_bf16 ? vc_v4_launch_t<VC_MODE_VSMOOTH, __nv_bfloat16>(a, maps, BH, s)
                        : vc_v4_launch_t<VC_MODE_VSMOOTH, __half>(a, maps, BH, s);
    default:
        return out_bf16 ? vc_v4_launch_t<VC_MODE_EXPCAST, __nv_bfloat16>(a, maps, BH, s)
                        : vc_v4_launch_t<VC_MODE_EXPCAST, __half>(a, maps, BH, s);
    }
}
