/* mainloop.cuh - a consumer warpgroup's loop over the key blocks: issue S and
 * P V on the tensor cores, take turns with the other consumer warpgroup
 * (ping-pong), fold each block's product into O, release ring stages.
 *
 * One turn of a consumer WG issues P_{kb-1} V_{kb-1} (+ the mean restore:
 * in turns kb = 9, 17, ... that of the group of blocks kb-9..kb-2;
 * restore.cuh) and then S_kb, hands the tensor cores to
 * the other WG, folds block kb-1 into O while S_kb runs, and runs the softmax
 * of S_kb (softmax.cuh).  The first turn (S_0 only) and the last (P V of the
 * last block only) are peeled.
 *
 * NOTE: no wgmma sits under a run-time branch: ptxas then inserts its own
 * warpgroup.arrive and serializes every wgmma (C7520).  Hence the peeled first
 * and last turns; the restore of every second turn is a guard predicate on
 * the one instruction (ptxas branches around it alone, C7519, measured cheap). */
#pragma once
#include "attention/consumer.cuh"
#include "attention/layout.cuh"
#include "attention/restore.cuh"
#include "attention/softmax.cuh"
#include "gpu_common.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"

/* Shared-memory operands as wgmma descriptors.  Stage s of a ring = the
 * stage-0 descriptor + s * stage bytes / 16 (the start address field; no
 * carry out of its 14 bits below 256 KB). */
struct vc_att_descs {
    uint64_t q, k0, v0, mu0;
};

/* S of the block in stage st: the K-steps over the head's DH channels (the codes' rows hold
 * VC_GPU_DPAD; the rest are zeros) */
template <int DH>
__device__ __forceinline__ void vc_att_issue_s(vc_att_consumer<DH> &cs, const vc_att_descs &d, unsigned st) {
    const uint64_t desc_k = d.k0 + st * (VC_ATT_K_BYTES >> 4);
    if constexpr (VC_ATT_DIAG == 2) {
        /* the softmax alone: S read from shared memory at the K stage (16 LDS.128 per thread and
         * turn, values the compiler cannot fold; a warp's lanes read consecutive 16 bytes, free of
         * bank conflicts; 32 KB from the stage's start, running into the next stage: distinct
         * addresses, or ptxas merges the loads and then the exponentials of equal scores), no
         * wgmma.  The values are whatever is there: timing only. */
        const uint32_t src = (uint32_t)(desc_k & 0x3FFFu) * 16u + (read_tid_x() % 128u) * 16u;
#pragma unroll
        for (int i = 0; i < VC_ATT_S_REGS / 4; ++i) {
            float x[4];
            lds_v4_f32(src + 2048u * i, x[0], x[1], x[2], x[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) cs.S[4 * i + e] = __float_as_int(x[e]);
        }
    } else {
#pragma unroll
        for (int ks = 0; ks < VC_ATT_QK_STEPS(DH); ++ks)
            wgmma_m64n128k32_s32_s8_ss(cs.S, wgmma_desc_advance(d.q, 32 * ks), wgmma_desc_advance(desc_k, 32 * ks),
                                       ks);
    }
}

/* P V of the block in stage pst; the methods with the quantized row sum use N = DH + 8 (the
 * ones rows give r) */
template <bool V_SMOOTH, int DH>
__device__ __forceinline__ void vc_att_issue_pv(vc_att_consumer<DH> &cs, const vc_att_descs &d, unsigned pst) {
    if (VC_ATT_DIAG == 2) {
        /* the softmax's output, used: P folded into the accumulator (so into O and the store;
         * an empty asm "use" leaves no PTX instruction, and ptxas then drops the softmax) */
        uint32_t x = 0u;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int j = 0; j < 4; ++j) x ^= cs.PA[kk][j];
        cs.acc[0] = __uint_as_float(x);
        return;
    }
    const uint64_t desc_v = d.v0 + pst * (VC_ATT_V_BYTES >> 4);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint64_t dv = wgmma_desc_advance(desc_v, 32 * kk);
        if constexpr (DH == 64) {
            if (V_SMOOTH) wgmma_m64n72k32_f32_e4m3_rs(cs.acc, cs.PA[kk], dv, kk);
            else wgmma_m64n64k32_f32_e4m3_rs(cs.acc, cs.PA[kk], dv, kk);
        } else {
            if (V_SMOOTH) wgmma_m64n136k32_f32_e4m3_rs(cs.acc, cs.PA[kk], dv, kk);
            else wgmma_m64n128k32_f32_e4m3_rs(cs.acc, cs.PA[kk], dv, kk);
        }
    }
}

template <int DH>
__device__ __forceinline__ void vc_att_fence_s(vc_att_consumer<DH> &cs) {
#pragma unroll
    for (int i = 0; i < VC_ATT_S_REGS; ++i) wgmma_fence_operand(cs.S[i]);
}
template <int DH>
__device__ __forceinline__ void vc_att_fence_acc(vc_att_consumer<DH> &cs) {
#pragma unroll
    for (int i = 0; i < VC_ATT_ACC_REGS(DH); ++i) wgmma_fence_operand(cs.acc[i]);
}

/* Fold block kb: O = al O + acc, l = al l + r (V-Smooth: the row's r from
 * the all-ones rows of V^T; sage2: the thread's partial ls); r is kept for
 * the restore.  Releases block kb's V^T stage (its means stay in the means
 * ring). */
template <bool V_SMOOTH, int DH>
__device__ __forceinline__ void vc_att_fold(vc_att_consumer<DH> &cs, uint64_t *empty_v, unsigned kb,
                                            const float (&al)[2], const float (&ls)[2]) {
    float r[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        r[hh] = V_SMOOTH ? cs.acc[VC_ATT_O_REGS(DH) + 2 * hh] : 0.0f; /* column DH (+ 8 hh rows) */
        cs.l[hh] = fmaf(al[hh], cs.l[hh], V_SMOOTH ? r[hh] : ls[hh]);
    }
#pragma unroll
    for (int j = 0; j < DH / 8; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i0 = 4 * j + 2 * hh;
            cs.O[i0] = fmaf(al[hh], cs.O[i0], cs.acc[i0]);
            cs.O[i0 + 1] = fmaf(al[hh], cs.O[i0 + 1], cs.acc[i0 + 1]);
        }
    cs.rprev[0] = r[0];
    cs.rprev[1] = r[1];
    __syncwarp();
    if (elect_one_sync()) mbarrier_arrive(&empty_v[VC_ATT_STAGE(kb)]);
}

/* Turns, round robin over the NC consumer warpgroups: warpgroup cw waits on barrier
 * VC_ATT_BAR_WG0 + cw, which the one before it arrives at after its issue.  Barrier ids as
 * immediates (a warp-uniform branch): held in a register, the id was spilled and its reload
 * sat right before the barrier. */
template <int NC>
__device__ __forceinline__ void vc_att_begin_turn(int cw) {
    if (cw == 0) named_barrier_sync(VC_ATT_BAR_WG0, VC_ATT_TURN_THREADS);
    else if (NC == 2 || cw == 1) named_barrier_sync(VC_ATT_BAR_WG0 + 1, VC_ATT_TURN_THREADS);
    else named_barrier_sync(VC_ATT_BAR_WG0 + 2, VC_ATT_TURN_THREADS);
    wgmma_fence();
}
/* the next warpgroup's turn */
template <int NC>
__device__ __forceinline__ void vc_att_end_issue(int cw) {
    if (cw == 0) named_barrier_arrive(VC_ATT_BAR_WG0 + 1, VC_ATT_TURN_THREADS);
    else if (NC == 2 || cw == 2) named_barrier_arrive(VC_ATT_BAR_WG0, VC_ATT_TURN_THREADS);
    else named_barrier_arrive(VC_ATT_BAR_WG0 + 2, VC_ATT_TURN_THREADS);
}
/* after a warpgroup's last turn only the ones after it in this round still take theirs */
template <int NC>
__device__ __forceinline__ void vc_att_end_last_issue(int cw) {
    if (cw == 0) named_barrier_arrive(VC_ATT_BAR_WG0 + 1, VC_ATT_TURN_THREADS);
    else if (NC == 3 && cw == 1) named_barrier_arrive(VC_ATT_BAR_WG0 + 2, VC_ATT_TURN_THREADS);
}

/* Right after this turn's issue, while its own P V waits behind the other
 * WG's MMAs: the next turn's K stage (block kb+1) and the V^T stage of block
 * kb (read by the next turn's P V). */
__device__ __forceinline__ void vc_att_prepare_next(const vc_att_barriers &b, unsigned kb, int nkb) {
    if (kb + 1 < (unsigned)nkb) mbarrier_wait(&b.full_k[VC_ATT_STAGE(kb + 1)], VC_ATT_PHASE(kb + 1));
    mbarrier_wait(&b.full_v[VC_ATT_STAGE(kb)], VC_ATT_PHASE(kb));
}

/* Wait for S_kb and run its softmax; the wgmma wait sits inside each branch
 * (its own basic block) so that ptxas keeps the fold above it. */
template <int PP, bool DIRECT, int DH>
__device__ __forceinline__ void vc_att_finish_s(vc_att_consumer<DH> &cs, const vc_att_barriers &b, uint32_t sks, float cq,
                                                unsigned kb, int nkb, int tail_valid, int t, float a_descent,
                                                const float (&G)[2], const uint8_t *smem) {
    const unsigned st = VC_ATT_STAGE(kb);
    const float c = cq * lds_f32(sks + 16 * st); /* before the stage is released */
    if (kb == (unsigned)nkb - 1 && tail_valid < VC_BLOCK_K) {
        wgmma_wait<0>();
        vc_att_fence_s(cs);
        __syncwarp();
        if (elect_one_sync()) mbarrier_arrive(&b.empty_k[st]);
        if (VC_ATT_DIAG != 1)
            vc_att_softmax<PP, true, DIRECT>(cs.S, c, tail_valid, t, cs.m, cs.alpha, cs.lsum, a_descent, cs.PA, cs.RA,
                                             cs.rprev, kb, nkb, G, smem);
    } else {
        wgmma_wait<0>();
        vc_att_fence_s(cs);
        __syncwarp();
        if (elect_one_sync()) mbarrier_arrive(&b.empty_k[st]);
        if (VC_ATT_DIAG != 1)
            vc_att_softmax<PP, false, DIRECT>(cs.S, c, VC_BLOCK_K, t, cs.m, cs.alpha, cs.lsum, a_descent, cs.PA, cs.RA,
                                              cs.rprev, kb, nkb, G, smem);
    }
}

/* The whole loop of one consumer WG (cw = 0 or 1) over nkb key blocks. */
template <int PP, bool DIRECT, int DH>
__device__ __forceinline__ void vc_att_mainloop(vc_att_consumer<DH> &cs, const vc_att_barriers &b, const vc_att_descs &d,
                                                const uint8_t *smem, uint32_t sks, float cq, int cw, int nkb,
                                                int tail_valid, int t, float descent) {
    constexpr bool kOnes = VC_PP_ROWSUM_QUANTIZED(PP), kRestore = VC_PP_V_SMOOTH(PP);
    constexpr int NC = VC_ATT_CONSUMERS_OF(DH);
    /* ---- first turn: S_0 ---- */
    {
        mbarrier_wait(&b.full_k[0], 0);
        vc_att_begin_turn<NC>(cw);
        vc_att_issue_s(cs, d, 0);
        wgmma_commit();
        vc_att_end_issue<NC>(cw);
        vc_att_prepare_next(b, 0, nkb);
        const float G0[2] = {0.0f, 0.0f}; /* no floor in block 0 */
        vc_att_finish_s<PP, DIRECT>(cs, b, sks, cq, 0, nkb, tail_valid, t, descent, G0, smem);
    }
    /* steady state: P_{kb-1} V_{kb-1}, in turns kb = 9, 17, ... the restore
     * of the group kb-9..kb-2 (restore.cuh), then S_kb; fold block
     * kb-1 under S_kb.  Group 1 (P V + restore) has completed (wait 1) before
     * the fold touches acc and O. */
    for (unsigned kb = 1; kb < (unsigned)nkb; ++kb) {
        const unsigned st = VC_ATT_STAGE(kb), pst = VC_ATT_STAGE(kb - 1);
        /* the slot of group (kb - 9) / 8 (blocks kb-9 .. kb-2), the restore in
         * turns kb = 9, 17, 25, ....  Branch-free: a branch between two wgmma
         * makes ptxas inject a warpgroup.arrive (C7519) */
        const unsigned mst = 2u * (((kb >> 3) - 1u) & (VC_ATT_MU_GROUP_SLOTS - 1u));
        const int restore = (kb & (VC_ATT_RESTORE_GROUP - 1u)) == 1u && kb >= VC_ATT_RESTORE_GROUP + 1u;
        vc_att_begin_turn<NC>(cw);
        vc_att_issue_pv<kOnes>(cs, d, pst);
        if (kRestore) vc_att_issue_restore(cs, d.mu0, mst, restore);
        wgmma_commit();
        vc_att_issue_s(cs, d, st);
        wgmma_commit();
        vc_att_end_issue<NC>(cw);
        vc_att_prepare_next(b, kb, nkb);
        wgmma_wait<1>();
        vc_att_fence_acc(cs);
        __syncwarp();
        vc_att_fold<kOnes>(cs, b.empty_v, kb - 1, cs.alpha, cs.lsum);
        float G[2] = {0.0f, 0.0f};
        if (VC_PP_BLOCK_MAX(PP) && vc_blockmax_needs_group_floor(descent))
            vc_att_group_max(G, cs.m, kb - 1, smem); /* m: block kb-1's scale */
        vc_att_finish_s<PP, DIRECT>(cs, b, sks, cq, kb, nkb, tail_valid, t, descent, G, smem);
    }
    /* ---- last turn: P V of the last block (+ the restore of the group of
     * block nkb-2, complete or not), then the last block's mean term on its
     * own ---- */
    {
        const unsigned pst = VC_ATT_STAGE(nkb - 1),
                       mst = 2u * ((((unsigned)max(nkb, 2) - 2u) >> 3) & (VC_ATT_MU_GROUP_SLOTS - 1u));
        vc_att_begin_turn<NC>(cw);
        vc_att_issue_pv<kOnes>(cs, d, pst);
        if (kRestore) vc_att_issue_restore(cs, d.mu0, mst, nkb >= 2);
        wgmma_commit();
        vc_att_end_last_issue<NC>(cw);
        wgmma_wait<0>();
        vc_att_fence_acc(cs);
        __syncwarp();
        vc_att_fold<kOnes>(cs, b.empty_v, nkb - 1, cs.alpha, cs.lsum);
        if (kRestore) vc_att_restore_last(cs, smem, nkb, t);
    }
}
