/* attention_v5.cu - kernel version 5: version 4 (attention_v4.cu) with fewer
 * instructions per consumer turn.  v4's profile: a consumer warp issued ~590
 * instructions per 128-key block, two consumer warps share a scheduler, so
 * one turn of the tensor cores (~1050 cycles for both warpgroups' S and P V)
 * needed ~1180 issue slots: the kernel was issue-bound before any latency
 * (docs/kernel-log.md, v5).  Changes, same pipeline and ping-pong:
 *   - ExpCast without the second FFMA: the bracket is computed with 128 added,
 *     the FP32 -> BF16x2 conversion rounds two scores to integers at once (on
 *     [128, 256) BF16 has a unit in the last place of 1), one BF16x2 max clamps
 *     both at code 0 and one PRMT packs four codes (per 4 scores: 4 FFMA +
 *     2 F2FP + 2 HMNMX2 + 1 PRMT instead of 8 FFMA + 3 PRMT);
 *     numerics.h, vc_expcast_code_biased, is the contract;
 *   - the V-Smooth mean restore r mu^T runs on the tensor core: alpha r, split
 *     into two FP16 halves, is the A operand of one m64n128k16 FP16 wgmma whose
 *     B operand is the block's FP16 means ({mu, mu, 0...} per channel, written
 *     by the preprocessing, loaded by the producer with the V^T stage).  It is
 *     issued right after the NEXT block's P V into the same accumulator (scaled
 *     by that block's alpha, so the fold's O = alpha O + acc carries it): O
 *     itself never becomes a wgmma operand, which would leave too few
 *     registers (ptxas serialized every wgmma, C7512).  The FP16 product
 *     accumulates in FP32 after the FP8 k-steps, so the large mean term does
 *     not widen the FP8 accumulator's truncation.  The last block's term goes
 *     into O after the last fold.  It removes 64 FFMA and 16 LDS per block from
 *     the fold.  The means travel in their own 8-slot ring (filled with the
 *     V^T stage, on its full barrier), so the V^T stage is released at the
 *     fold as in v4;
 *   - two producer threads (K ring, V ring): one loop for both coupled the
 *     rings, and the consumers waited on full barriers;
 *   - the block's 4 K scales come with its K stage (a 16-byte bulk copy by
 *     the producer): the consumers no longer run a cp.async ring.
 * Layout, pipeline and ping-pong: see attention_ws.cu. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <float.h>
#include <math.h>

#include "attention_common.cuh"
#include "gpu_common.cuh"
#include "numerics.h"
#include "ptx/cp_async.cuh" /* fence_proxy_async_shared */
#include "ptx/cvt.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"

#define V5_THREADS 384
#define V5_STAGES 4
#define V5_K_BYTES 16384                 /* 128 keys x 128 B */
#define V5_V_BYTES 17408                 /* V^T: 136 rows x 128 B (8 rows of ones), 1024-B aligned */
#define V5_MU_BYTES 2048                 /* a block's means: 128 channels x 16 B */
#define V5_MU_SLOT 2176                  /* + 8 zero rows: B rows 128..135 of the n136 restore */
#define V5_MU_SLOTS 8                    /* means ring: 2 x the V^T stages (see the producer) */
#define V5_OFF_Q 0
#define V5_OFF_K 16384
#define V5_OFF_V (V5_OFF_K + V5_STAGES * V5_K_BYTES)
#define V5_OFF_MU (V5_OFF_V + V5_STAGES * V5_V_BYTES)
#define V5_OFF_KS (V5_OFF_MU + V5_MU_SLOTS * V5_MU_SLOT) /* 4 K scales per stage */
#define V5_OFF_BAR (V5_OFF_KS + V5_STAGES * 16)
#define V5_SMEM (V5_OFF_BAR + 256 + 1024)
#define V5_BAR_WG0 1 /* named barrier a consumer WG waits on before its turn */
#define V5_E4M3_ONE 0x38u
#define V5_BF16X2_128 0x43004300u /* BF16 128.0 twice: code 0 of the biased ExpCast */

/* %tid.x, read again (volatile: not merged with the read at the top) */
__device__ __forceinline__ uint32_t read_tid_x(void) {
    uint32_t x;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(x));
    return x;
}

__device__ __forceinline__ float v5_lds_f32(uint32_t saddr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(saddr) : "memory");
    return v;
}

/* ---- softmax of one block: S (int32 accumulator) -> P fragments ------------------------ */
/* m: running max (log2 units), alpha: exp2(m_old - m_new), lsum: FP32 row sum (sage2) */
template <int MODE, bool TAIL>
__device__ __forceinline__ void v5_softmax(const int32_t (&S)[64], float c, int nvalid, int t, float (&m)[2],
                                           float (&alpha)[2], float (&lsum)[2], uint32_t (&P)[4][4]) {
    float bias[2];
    const float c8 = 8.0f * c; /* exact */
    /* ExpCast reads the INT32 score s as the float M + s (M = 1.5 * 2^23: an
     * integer add on the bit pattern, exact for |s| < 2^22, so no I2F on the
     * ALU pipe); the bias absorbs -8c M before the max is known
     * (numerics.h, vc_expcast_biased_bracket) */
    const float bpre = vc_expcast_bias_pre(c8);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int mx = vc_row_max_s32<TAIL>(S, hh, t, nvalid);
        /* c > 0 and rounding is monotone: max_j fl(s_j c) = fl(max_j(s_j) c) */
        float tm = mx == INT_MIN ? -INFINITY : (float)mx * c;
        tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
        tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
        const float m_new = MODE == VC_MODE_EXPCAST ? fmaxf(m[hh], tm) : fmaxf(m[hh], tm - VC_SAGE2_P_LOG2_OFFSET);
        alpha[hh] = m[hh] == -INFINITY ? 0.0f : ex2_approx(m[hh] - m_new);
        if (MODE == VC_MODE_EXPCAST) {
            bias[hh] = vc_expcast_bias(bpre, m_new); /* one fma after the max */
        } else {
            bias[hh] = -m_new;
        }
        m[hh] = m_new;
        lsum[hh] = 0.0f;
    }
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
                    /* v = bracket + 128 (ONE FFMA per score); the BF16x2
                     * conversion is the RNE of two brackets, the BF16x2 max
                     * with 128 the clamp at code 0, and the low byte of each
                     * half is the code: bit-identical to
                     * vc_expcast_code_biased(fmaf(8c, s, b + 128)). */
                    float y[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        y[e] = fmaf(c8, __int_as_float(S[idx[e]] + VC_EXPCAST_INT_MAGIC_BITS), bias[hh]);
                        if (TAIL && col[e] >= nvalid) y[e] = 0.0f; /* code 0 */
                    }
                    const uint32_t h01 = max_bf16x2(cvt_bf16x2(y[0], y[1]), V5_BF16X2_128);
                    const uint32_t h23 = max_bf16x2(cvt_bf16x2(y[2], y[3]), V5_BF16X2_128);
                    P[kk][2 * i + hh] = prmt(h01, h23, 0x6420);
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
__global__ void __launch_bounds__(V5_THREADS, 1)
    vc_attention_v5(const __grid_constant__ vc_attn_args a, const __grid_constant__ vc_tma_maps maps) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sQ = smem + V5_OFF_Q, *sK = smem + V5_OFF_K, *sV = smem + V5_OFF_V, *sKS = smem + V5_OFF_KS,
            *sMU = smem + V5_OFF_MU;
    uint64_t *bar = (uint64_t *)(smem + V5_OFF_BAR);
    uint64_t *full_k = bar, *full_v = bar + V5_STAGES, *empty_k = bar + 2 * V5_STAGES, *empty_v = bar + 3 * V5_STAGES,
             *q_full = bar + 4 * V5_STAGES;
    /* V-Smooth methods: ones rows for r, and the mean restore on the tensor core */
    constexpr bool kVs = MODE != VC_MODE_SAGE2;

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int bh = blockIdx.y, qtile = blockIdx.x, nkb = a.nkb;

    if (tid == 0) {
        for (int s = 0; s < V5_STAGES; ++s) {
            mbarrier_init(&full_k[s], 1);
            mbarrier_init(&full_v[s], 1);
            mbarrier_init(&empty_k[s], 8);
            mbarrier_init(&empty_v[s], 8);
        }
        mbarrier_init(q_full, 1);
        fence_mbarrier_init();
    }
    /* rows 128..135 of every V^T stage: row 128 + j holds E4M3 ones at the 16
     * keys 16j..16j+15 (see attention_v4.cu): accumulator columns 128..135 sum
     * to r, the row sum of the quantized P as the product used it */
    if (kVs) {
        for (int i = tid; i < V5_STAGES * 256; i += V5_THREADS) {
            const int w = i % 256;
            reinterpret_cast<uint32_t *>(sV + (i / 256) * V5_V_BYTES + V5_K_BYTES)[w] =
                (w % 32) < 4 ? V5_E4M3_ONE * 0x01010101u : 0u;
        }
        /* the zero rows after each slot's means (the bulk copy writes 2048 B) */
        for (int i = tid; i < V5_MU_SLOTS * 32; i += V5_THREADS)
            reinterpret_cast<uint32_t *>(sMU + (i / 32) * V5_MU_SLOT + V5_MU_BYTES)[i % 32] = 0u;
    }
    fence_proxy_async_shared();
    __syncthreads();

    if (wg == 0) {
        /* ================= producer ================= */
        setmaxnreg_dec<24>();
        /* two loader threads, so that a late release of one ring does not hold
         * the other one's loads (one loop for both made the consumers wait on
         * full barriers in ~9% of their samples, v5c profile) */
        if (warp == 0 && lane == 0) {
            tma_prefetch_desc(&maps.q);
            tma_prefetch_desc(&maps.k);
            const float *kscale = a.k_scale + (int64_t)bh * nkb * 4;
            mbarrier_arrive_expect_tx(q_full, 128 * 128);
            tma_load_2d(sQ, &maps.q, q_full, 0, bh * a.sq_pad + qtile * VC_GPU_TILE_Q);
            for (int kb = 0; kb < nkb; ++kb) {
                const int st = kb % V5_STAGES;
                mbarrier_wait(&empty_k[st], ((kb / V5_STAGES) & 1) ^ 1);
                mbarrier_arrive_expect_tx(&full_k[st], V5_K_BYTES + 16);
                tma_load_2d(sK + st * V5_K_BYTES, &maps.k, &full_k[st], 0, bh * a.skv_pad + kb * VC_GPU_BLOCK_K);
                bulk_load_1d(sKS + st * 16, kscale + (int64_t)kb * 4, 16, &full_k[st]);
            }
        } else if (warp == 1 && lane == 0) {
            /* V^T of block kb, and its means into slot kb % 8 of the means
             * ring, both on full_v.  The ring needs no barrier of its own: slot
             * kb % 8 is rewritten only after block kb+4 was released by both
             * WGs (fold of turn kb+5), long after the restore that read it
             * (issued in turn kb+2, complete at that turn's fold). */
            tma_prefetch_desc(&maps.v);
            const uint4 *mu_tc = kVs ? a.v_mean_tc + (int64_t)bh * nkb * VC_GPU_DPAD : nullptr;
            for (int kb = 0; kb < nkb; ++kb) {
                const int st = kb % V5_STAGES;
                mbarrier_wait(&empty_v[st], ((kb / V5_STAGES) & 1) ^ 1);
                mbarrier_arrive_expect_tx(&full_v[st], V5_K_BYTES + (kVs ? V5_MU_BYTES : 0));
                tma_load_2d(sV + st * V5_V_BYTES, &maps.v, &full_v[st], kb * VC_GPU_BLOCK_K, bh * VC_GPU_DPAD);
                if (kVs)
                    bulk_load_1d(sMU + (kb % V5_MU_SLOTS) * V5_MU_SLOT, mu_tc + (int64_t)kb * VC_GPU_DPAD, V5_MU_BYTES,
                                 &full_v[st]);
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
    const uint32_t sks = smem_u32(sKS) + 4 * t; /* this thread's K scale (column group t) of stage 0 */
    const int tail_valid = a.Skv - (nkb - 1) * VC_GPU_BLOCK_K; /* keys of the last block */

    float O[64], acc[68];
    int32_t S[64];
    uint32_t PA[4][4];
    /* A operand of the restore: thread t's partial alpha r_t of the block
     * folded last (its 32 keys: accumulator columns 128 + 2t, 129 + 2t), as
     * FP16 hi (column 2t) and lo (column 2t + 1); B holds the means in columns
     * 0..7, so the product sums the quad's partials: (alpha r) mu^T.  l is kept
     * as the same per-thread partials and summed over the quad at the end. */
    uint32_t RA[4] = {0u, 0u, 0u, 0u};
    float rprev[2] = {0.0f, 0.0f}; /* this thread's r_t of the block folded last */
#pragma unroll
    for (int i = 0; i < 64; ++i) { O[i] = 0.0f; S[i] = 0; }
#pragma unroll
    for (int i = 0; i < 68; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) PA[i / 4][i % 4] = 0;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2] = {0.0f, 0.0f}, lsum[2] = {0.0f, 0.0f};

    const uint64_t desc_q = wgmma_desc_sw128(sQ + cw * 8192);
    mbarrier_wait(q_full, 0);
    if (cw == 1) named_barrier_arrive(V5_BAR_WG0, 256); /* WG1 goes first */

    /* NOTE: no wgmma sits under a run-time condition: ptxas then inserts its own
     * warpgroup.arrive and serializes every wgmma (C7520).  Hence the peeled
     * first turn (S_0 only) and last turn (P V of the last block only), and the
     * restore issued every turn (with A = 0 before the first block is folded). */
    /* stage s of a ring = the stage-0 descriptor + s * stage bytes / 16 (the
     * start address field; no carry out of its 14 bits below 256 KB) */
    const uint64_t desc_k0 = wgmma_desc_sw128(sK), desc_v0 = wgmma_desc_sw128(sV),
                   desc_mu0 = wgmma_desc_noswizzle(sMU, 0, 128);
    auto issue_s = [&](unsigned st) {
        const uint64_t desc_k = desc_k0 + st * (V5_K_BYTES >> 4);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
            wgmma_m64n128k32_s32_s8_ss(S, wgmma_desc_advance(desc_q, 32 * ks), wgmma_desc_advance(desc_k, 32 * ks), ks);
    };
    auto issue_pv = [&](unsigned pst, uint32_t (&P)[4][4]) {
        const uint64_t desc_v = desc_v0 + pst * (V5_V_BYTES >> 4);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            if (kVs)
                wgmma_m64n136k32_f32_e4m3_rs(acc, P[kk], wgmma_desc_advance(desc_v, 32 * kk), kk);
            else
                wgmma_m64n128k32_f32_e4m3_rs(acc, P[kk], wgmma_desc_advance(desc_v, 32 * kk), kk);
        }
    };
    /* acc += (alpha r) mu^T of the block whose means sit in stage mst: K-major,
     * no swizzle, channel n's 16 bytes at 16 n (SBO 128 B per 8 channels); the
     * second core matrix along K (columns 8..15, zero in A) re-reads the first.
     * N = 136 as the P V (one accumulator shape): rows 128..135 of B are the
     * zero rows after the means, so the r columns stay untouched. */
    auto issue_restore = [&](unsigned mst) {
        wgmma_m64n136k16_f32_f16_rs(acc, RA, desc_mu0 + mst * (V5_MU_SLOT >> 4), 1);
    };
    /* RA = FP16 hi + lo of sc * rprev (numerics.h, vc_rowsum_f16_split) */
    auto make_ra = [&](const float (&sc)[2]) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const float x = sc[hh] * rprev[hh];
            const float hi = __uint_as_float(__float_as_uint(x) & 0xFFFFE000u);
            RA[hh] = cvt_f16x2(hi, x - hi);
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
    auto fence_o = [&]() {
#pragma unroll
        for (int i = 0; i < 64; ++i) wgmma_fence_operand(O[i]);
    };
    /* fold block kb: O = al O + acc, l = al l + r_t (or + ls for sage2, both
     * per-thread partials); r_t is kept for the restore.  Releases block kb's
     * V^T stage (its means stay in the means ring). */
    auto fold = [&](unsigned kb, const float (&al)[2], const float (&ls)[2]) {
        float r[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            if (kVs) {
                r[hh] = acc[64 + 2 * hh] + acc[65 + 2 * hh]; /* this thread's 32 keys */
            } else {
                r[hh] = 0.0f;
            }
            l[hh] = fmaf(al[hh], l[hh], kVs ? r[hh] : ls[hh]);
        }
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i0 = 4 * j + 2 * hh;
                O[i0] = fmaf(al[hh], O[i0], acc[i0]);
                O[i0 + 1] = fmaf(al[hh], O[i0 + 1], acc[i0 + 1]);
            }
        rprev[0] = r[0];
        rprev[1] = r[1];
        __syncwarp();
        if (elect_one_sync()) mbarrier_arrive(&empty_v[kb & (V5_STAGES - 1)]);
    };
    /* barrier ids as immediates (a warp-uniform branch): held in a register,
     * the id was spilled and its reload sat right before the barrier (v5b) */
    auto begin_turn = [&]() {
        if (cw == 0) named_barrier_sync(V5_BAR_WG0, 256);
        else named_barrier_sync(V5_BAR_WG0 + 1, 256);
        wgmma_fence();
    };
    auto end_issue = [&]() {
        if (cw == 0) named_barrier_arrive(V5_BAR_WG0 + 1, 256);
        else named_barrier_arrive(V5_BAR_WG0, 256);
    };

    /* right after this turn's issue, while its own P V waits behind the other
     * WG's MMAs: the next turn's K stage (block kb+1) and the V^T stage of
     * block kb (read by the next turn's P V) */
    auto prepare_next = [&](unsigned kb) {
        if (kb + 1 < (unsigned)nkb) mbarrier_wait(&full_k[(kb + 1) & (V5_STAGES - 1)], ((kb + 1) / V5_STAGES) & 1);
        mbarrier_wait(&full_v[kb & (V5_STAGES - 1)], (kb / V5_STAGES) & 1);
    };
    /* wait for S_kb and run its softmax; the wgmma wait sits inside each branch
     * (its own basic block) so that ptxas keeps the fold above it (see v4) */
    auto finish_s = [&](unsigned kb) {
        const unsigned st = kb & (V5_STAGES - 1);
        const float c = cq * v5_lds_f32(sks + 16 * st); /* before the stage is released */
        if (kb == (unsigned)nkb - 1 && tail_valid < VC_GPU_BLOCK_K) {
            wgmma_wait<0>();
            fence_s();
            __syncwarp();
            if (elect_one_sync()) mbarrier_arrive(&empty_k[st]);
            v5_softmax<MODE, true>(S, c, tail_valid, t, m, alpha, lsum, PA);
        } else {
            wgmma_wait<0>();
            fence_s();
            __syncwarp();
            if (elect_one_sync()) mbarrier_arrive(&empty_k[st]);
            v5_softmax<MODE, false>(S, c, VC_GPU_BLOCK_K, t, m, alpha, lsum, PA);
        }
    };

    /* ---- first turn: S_0 ---- */
    {
        mbarrier_wait(&full_k[0], 0);
        begin_turn();
        issue_s(0);
        wgmma_commit();
        end_issue();
        prepare_next(0);
        finish_s(0);
    }
    /* RA = 0 here: the first restore (kb = 1) adds nothing */
    /* steady state: P_{kb-1} V_{kb-1}, the restore of block kb-2, then S_kb;
     * fold block kb-1 under S_kb.  Group 1 (P V + restore) has completed
     * (wait 1) before the fold touches acc and O. */
    for (unsigned kb = 1; kb < (unsigned)nkb; ++kb) {
        const unsigned st = kb & (V5_STAGES - 1), pst = (kb - 1) & (V5_STAGES - 1);
        /* block kb-2's means (RA = 0 at kb = 1); branch-free: a branch between
         * two wgmma makes ptxas inject a warpgroup.arrive (C7519) */
        const unsigned mst = (max(kb, 2u) - 2) & (V5_MU_SLOTS - 1);
        begin_turn();
        issue_pv(pst, PA);
        if (kVs) issue_restore(mst);
        wgmma_commit();
        issue_s(st);
        wgmma_commit();
        end_issue();
        prepare_next(kb);
        wgmma_wait<1>();
        fence_acc();
        __syncwarp();
        fold(kb - 1, alpha, lsum);
        finish_s(kb);
        if (kVs) make_ra(alpha); /* block kb-1's term rides in block kb's accumulator */
    }
    /* ---- last turn: P V of the last block (+ the restore of the one before),
     * then the restore of the last block on its own ---- */
    {
        const unsigned pst = (unsigned)(nkb - 1) & (V5_STAGES - 1), mst = (unsigned)max(nkb - 2, 0) & (V5_MU_SLOTS - 1);
        begin_turn();
        issue_pv(pst, PA);
        if (kVs) issue_restore(mst);
        wgmma_commit();
        if (cw == 0) named_barrier_arrive(V5_BAR_WG0 + 1, 256);
        wgmma_wait<0>();
        fence_acc();
        __syncwarp();
        fold(nkb - 1, alpha, lsum);
        if (kVs) {
            /* the last block's term, once, on the CUDA cores (O as a wgmma
             * accumulator would need registers the pipeline does not have) */
            const uint32_t smu = smem_u32(sMU + ((nkb - 1) & (V5_MU_SLOTS - 1)) * V5_MU_SLOT) + 32 * t;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                /* the quad's FP16-split partials, summed (s0 + s1) + (s2 + s3) */
                float rs = vc_rowsum_f16_split(rprev[hh]);
                rs += __shfl_xor_sync(0xffffffffu, rs, 1);
                rs += __shfl_xor_sync(0xffffffffu, rs, 2);
#pragma unroll
                for (int j = 0; j < 16; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float mu = __half2float(__ushort_as_half(
                            (unsigned short)(__float_as_uint(v5_lds_f32(smu + 128 * j + 16 * e)) & 0xFFFFu)));
                        O[4 * j + 2 * hh + e] = fmaf(rs, mu, O[4 * j + 2 * hh + e]);
                    }
            }
        }
    }

    /* the thread's rows from a fresh read of %tid.x: keeping warp / g live
     * through the loop cost a spill (ptxas -v) */
    const uint32_t u = read_tid_x() - 128; /* = 128 cw + 32 warp + lane */
    const int row0 = (int)((u >> 7) * 64 + ((u >> 5) & 3) * 16 + ((u & 31) >> 2)); /* cw*64 + warp*16 + g */
    vc_store_rows<MODE, OutT, true>(a, O, l, m, bh, qtile * VC_GPU_TILE_Q + row0, t);
}

/* ---- host: tensor maps and launch ------------------------------------------------------- */
template <int MODE, typename OutT>
static cudaError_t vc_v5_launch_t(const vc_attn_args &a, const vc_tma_maps &maps, int BH, cudaStream_t s) {
    auto kern = vc_attention_v5<MODE, OutT>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, V5_SMEM);
    if (e != cudaSuccess) return e;
    kern<<<dim3(a.sq_pad / VC_GPU_TILE_Q, BH), V5_THREADS, V5_SMEM, s>>>(a, maps);
    return cudaGetLastError();
}

cudaError_t vc_attn_v5_launch(const vc_attn_args &a, int BH, int mode, int out_bf16, cudaStream_t s) {
    vc_tma_maps maps;
    if (!vc_attn_make_maps(a, BH, &maps)) return cudaErrorInvalidValue;
    switch (mode) {
    case VC_MODE_SAGE2:
        return out_bf16 ? vc_v5_launch_t<VC_MODE_SAGE2, __nv_bfloat16>(a, maps, BH, s)
                        : vc_v5_launch_t<VC_MODE_SAGE2, __half>(a, maps, BH, s);
    case VC_MODE_VSMOOTH:
        return out_bf16 ? vc_v5_launch_t<VC_MODE_VSMOOTH, __nv_bfloat16>(a, maps, BH, s)
                        : vc_v5_launch_t<VC_MODE_VSMOOTH, __half>(a, maps, BH, s);
    default:
        return out_bf16 ? vc_v5_launch_t<VC_MODE_EXPCAST, __nv_bfloat16>(a, maps, BH, s)
                        : vc_v5_launch_t<VC_MODE_EXPCAST, __half>(a, maps, BH, s);
    }
}
