/* kernel.cuh - the attention kernel: wires the roles and barriers of one CTA
 * (layout.cuh), and the host launch of one P path.  Built twice, for DH = 128 and
 * DH = 64 channels (head_dim_128.cu, head_dim_64.cu: two translation units that
 * compile side by side); launch.cu picks one per call.
 *
 *   tile.cuh      the tile's shape (rows, consumer warpgroups, key block, DH), named once
 *   producer.cuh  warpgroup 0: TMA rings (Q, K + K scales, V^T + means)
 *   mainloop.cuh  warpgroups 1, 2: S and P V issue, fold, ping-pong
 *   softmax.cuh   row max, exp path, ExpCast
 *   restore.cuh   the V-Smooth mean restore r mu^T
 *   epilogue.cuh  O / l, LSE, store
 *
 * The contract is the CPU simulation (src/simulate.c) with the numerics of
 * src/numerics.h; the history of the design is docs/kernel-log.md. */
#pragma once
#include <cuda.h>
#include <float.h>
#include <math.h>

#include "attention/consumer.cuh"
#include "attention/epilogue.cuh"
#include "attention/layout.cuh"
#include "attention/mainloop.cuh"
#include "attention/maps.cuh"
#include "attention/producer.cuh"
#include "attention/restore.cuh"
#include "gpu_common.cuh"
#include "method_list.h"
#include "ptx/cp_async.cuh" /* fence_proxy_async_shared */
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"

/* PP: the method's P path (p_path.h); the kernel takes the quantized row sum from the ones
 * rows it adds for V-Smooth's restore, so the two come together */
template <int PP, typename OutT, bool DIRECT, int DH>
__global__ void __launch_bounds__(VC_ATT_THREADS_OF(DH), 1)
    vc_attention_kernel(const __grid_constant__ vc_attn_args a, const __grid_constant__ vc_tma_maps maps) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sQ = smem + VC_ATT_OFF_Q, *sK = smem + VC_ATT_OFF_K, *sV = smem + VC_ATT_OFF_V,
            *sKS = smem + VC_ATT_OFF_KS, *sMU = smem + VC_ATT_OFF_MU;
    uint64_t *bar = (uint64_t *)(smem + VC_ATT_OFF_BAR);
    const vc_att_barriers b = {bar, bar + VC_ATT_STAGES, bar + 2 * VC_ATT_STAGES, bar + 3 * VC_ATT_STAGES,
                               bar + 4 * VC_ATT_STAGES};
    /* the quantized row sum from ones rows of V^T (r and l); V-Smooth's mean restore on the
     * tensor core, which needs that r */
    constexpr bool kOnes = VC_PP_ROWSUM_QUANTIZED(PP), kRestore = VC_PP_V_SMOOTH(PP);
    static_assert(kOnes || !kRestore, "the restore takes r from the ones rows");
    static_assert(VC_PP_IS(PP, E4M3) || VC_PP_IS(PP, EXPCAST) || VC_PP_IS(PP, SPLIT),
                  "the kernel writes E4M3 P by the exp path, ExpCast or the split");

    constexpr int NC = VC_ATT_CONSUMERS_OF(DH); /* consumer warpgroups */
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int bh = blockIdx.y, qtile = blockIdx.x, nkb = a.nkb;
    /* each tile runs in exactly one kernel: its head's P path (a.head_gate: the method's or the
     * exact sibling's) and DIRECT when one of its 64-row blocks has a score scale that needs the
     * two-rounding P (direct_rows.cu, from the preprocessing); the whole CTA leaves */
    unsigned tile = a.head_exact && a.head_exact[bh] ? VC_HEAD_EXACT : 0u;
    {
        const int qblocks = a.sq_pad / 64, b0 = qtile * (VC_ATT_TILE_ROWS(DH) / 64);
        const int b1 = min(b0 + VC_ATT_TILE_ROWS(DH) / 64, qblocks); /* a 192-row tile may reach past sq_pad */
        for (int blk = b0; blk < b1; ++blk) tile |= a.direct_rows[(size_t)bh * qblocks + blk];
    }
    if (tile != (a.head_gate | (DIRECT ? VC_HEAD_DIRECT : 0u))) return;

    if (tid == 0) {
        for (int s = 0; s < VC_ATT_STAGES; ++s) {
            mbarrier_init(&b.full_k[s], 1);
            mbarrier_init(&b.full_v[s], 1);
            mbarrier_init(&b.empty_k[s], 4 * NC); /* every consumer warp releases */
            mbarrier_init(&b.empty_v[s], 4 * NC);
        }
        mbarrier_init(b.q_full, 1);
        fence_mbarrier_init();
    }
    if (kRestore) {
        vc_att_restore_init<DH>(sV, sMU, tid);
        vc_att_keep_init<DH>(smem, tid);
    } else if (kOnes) {
        vc_att_ones_init<DH>(sV, tid);
        vc_att_keep_init<DH>(smem, tid); /* the block-max group floor's G lives there too */
    }
    fence_proxy_async_shared();
    __syncthreads();

    if (wg == 0) {
        setmaxnreg_dec<24>();
        vc_att_producer<kRestore, DH>(a, maps, smem, b, warp, lane, bh, qtile);
        return;
    }

    /* ================= consumers ================= */
    setmaxnreg_inc<VC_ATT_CONSUMER_REGS(DH)>();
    const int cw = wg - 1; /* consumer index: rows cw*64 .. cw*64+63 of the tile (VC_ATT_WG_ROWS) */
    const int g = lane / 4, t = lane % 4;
    /* the tile's 64-row block; a 192-row tile may reach past sq_pad (a multiple of 128): those
     * rows are never stored, their Q scale is clamped to the head's last block */
    const int qblk = NC == 2 ? qtile * NC + cw : min(qtile * NC + cw, a.sq_pad / 64 - 1);
    const float qs = a.q_scale[((int64_t)bh * (a.sq_pad / 64) + qblk) * 32 + warp * 8 + g];
    const float cq = a.c0 * qs;
    const uint32_t sks = smem_u32(sKS) + 4 * t; /* this thread's K scale (column group t) of stage 0 */
    const int tail_valid = a.Skv - (nkb - 1) * VC_BLOCK_K; /* keys of the last block */

    vc_att_consumer<DH> cs;
#pragma unroll
    for (int i = 0; i < VC_ATT_O_REGS(DH); ++i) cs.O[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < VC_ATT_S_REGS; ++i) cs.S[i] = 0;
#pragma unroll
    for (int i = 0; i < VC_ATT_ACC_REGS(DH); ++i) cs.acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) cs.PA[i / 4][i % 4] = VC_ATT_DIAG == 1 ? 0x38383838u : 0u; /* diag 1: P = 1 */
#pragma unroll
    for (int i = 0; i < 4; ++i) cs.RA[i] = 0u;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        cs.rprev[hh] = 0.0f;
        cs.m[hh] = -INFINITY;
        cs.l[hh] = cs.alpha[hh] = cs.lsum[hh] = 0.0f;
    }

    const vc_att_descs d = {wgmma_desc_sw128(sQ + cw * VC_ATT_WG_Q_BYTES), wgmma_desc_sw128(sK), wgmma_desc_sw128(sV),
                            wgmma_desc_noswizzle(sMU, VC_ATT_MU_SLOT, 128)}; /* K step: restore.cuh */
    mbarrier_wait(b.q_full, 0);
    if (cw == NC - 1) named_barrier_arrive(VC_ATT_BAR_WG0, VC_ATT_TURN_THREADS); /* WG0 goes first */

    vc_att_mainloop<PP, DIRECT>(cs, b, d, smem, sks, cq, cw, nkb, tail_valid, t, a.bm_descent);

    /* the thread's rows from a fresh read of %tid.x: keeping warp / g live
     * through the loop cost a spill (ptxas -v) */
    const uint32_t u = read_tid_x() - 128; /* = 128 cw + 32 warp + lane */
    const int row0 = (int)((u >> 7) * VC_ATT_WG_ROWS + ((u >> 5) & 3) * 16 + ((u & 31) >> 2)); /* cw*64 + warp*16 + g */
    /* l: sage2 sums the quad's partials (epilogue.cuh); the V-Smooth modes hold the row's l */
    vc_store_rows<PP, OutT>(a, cs.O, cs.l, cs.m, bh, qtile * VC_ATT_TILE_ROWS(DH) + row0, t);
}

/* ---- host: tensor maps and launch ------------------------------------------------------- */
template <int PP, typename OutT, bool DIRECT, int DH>
static cudaError_t vc_attn_launch_one(const vc_attn_args &a, const vc_tma_maps &maps, int BH, cudaStream_t s) {
    auto kern = vc_attention_kernel<PP, OutT, DIRECT, DH>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, VC_ATT_SMEM);
    if (e != cudaSuccess) return e;
    const int tiles = (a.sq_pad + VC_ATT_TILE_ROWS(DH) - 1) / VC_ATT_TILE_ROWS(DH);
    kern<<<dim3(tiles, BH), VC_ATT_THREADS_OF(DH), VC_ATT_SMEM, s>>>(a, maps);
    return cudaGetLastError();
}

/* The fast kernel (its CTAs of tiles flagged by direct_rows.cu leave at once) and the DIRECT
 * kernel behind it (only flagged tiles stay: for ordinary inputs none, a launch whose CTAs all
 * return). */
template <int PP, typename OutT, int DH>
static cudaError_t vc_attn_launch_t(const vc_attn_args &a, const vc_tma_maps &maps, int BH, cudaStream_t s) {
    cudaError_t e = vc_attn_launch_one<PP, OutT, false, DH>(a, maps, BH, s);
    if (e == cudaSuccess) e = vc_attn_launch_one<PP, OutT, true, DH>(a, maps, BH, s);
    return e;
}

/* One P path's kernels (either output type) for DH channels: its heads are those whose
 * exact-P flag (VC_HEAD_EXACT) equals a.head_gate.  One instantiation per method of method_list.h
 * that has a kernel. */
template <int DH>
static cudaError_t vc_attn_launch_path(const vc_attn_args &a, const vc_tma_maps &maps, int BH, int pp, int out_bf16,
                                       cudaStream_t s) {
#define VC_KERNEL_PATH(pp)                                                                     \
    case pp:                                                                                   \
        return out_bf16 ? vc_attn_launch_t<pp, __nv_bfloat16, DH>(a, maps, BH, s)              \
                        : vc_attn_launch_t<pp, __half, DH>(a, maps, BH, s);
/* a kernel method's P path, and for a V-Smooth method the same P path with V-Smooth off (a
 * schedule's off step: no permutation, no demean, no restore; the quantized row sum stays) */
#define VC_KERNEL_CASE_1_VS0(pf, ps, rq) VC_KERNEL_PATH(VC_P_PATH(pf, ps, 0, rq))
#define VC_KERNEL_CASE_1_VS1(pf, ps, rq) VC_KERNEL_PATH(VC_P_PATH(pf, ps, 1, rq)) VC_KERNEL_PATH(VC_P_PATH(pf, ps, 0, rq))
#define VC_KERNEL_CASE_1(pf, ps, vs, rq) VC_KERNEL_CASE_1_VS##vs(pf, ps, rq)
#define VC_KERNEL_CASE_0(pf, ps, vs, rq)
#define VC_KERNEL_CASE(id, name, qkf, qkg, sk, sq, vf, vs, pf, rq, ps, ek, gpu) VC_KERNEL_CASE_##gpu(pf, ps, vs, rq)
    switch (pp) {
        VC_METHOD_LIST(VC_KERNEL_CASE)
    default:
        return cudaErrorInvalidValue; /* api.cu admits only the list's kernel methods */
    }
#undef VC_KERNEL_CASE
#undef VC_KERNEL_CASE_0
#undef VC_KERNEL_CASE_1
#undef VC_KERNEL_CASE_1_VS0
#undef VC_KERNEL_CASE_1_VS1
#undef VC_KERNEL_PATH
}

/* The P path's kernels for DH = 128 (head_dim_128.cu) and DH = 64 (head_dim_64.cu). */
cudaError_t vc_attn_launch_path_128(const vc_attn_args &a, const vc_tma_maps &maps, int BH, int pp, int out_bf16,
                                    cudaStream_t s);
cudaError_t vc_attn_launch_path_64(const vc_attn_args &a, const vc_tma_maps &maps, int BH, int pp, int out_bf16,
                                   cudaStream_t s);
