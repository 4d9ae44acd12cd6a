/* producer.cuh - warpgroup 0 of the attention kernel: the TMA loads.
 *
 * Two loader threads, one per ring, so that a late release of one ring does
 * not hold the other one's loads (one loop for both made the consumers wait
 * on full barriers in ~9% of their samples; docs/kernel-log.md).
 *   thread 0 (warp 0): the Q tile, then per key block its K stage and the
 *            block's 4 K scales (a 16-byte bulk copy on the same barrier);
 *   thread 32 (warp 1): per key block its V^T stage (the head's DH rows) and, for the V-Smooth
 *            methods, with every 8th block its group's FP16 means into a
 *            group slot, both on the V^T stage's full barrier. */
#pragma once
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "attention/layout.cuh"
#include "attention/maps.cuh"
#include "gpu_common.cuh"

template <bool V_SMOOTH, int DH>
__device__ __forceinline__ void vc_att_producer(const vc_attn_args &a, const vc_tma_maps &maps, uint8_t *smem,
                                                const vc_att_barriers &b, int warp, int lane, int bh, int qtile) {
    uint8_t *sQ = smem + VC_ATT_OFF_Q, *sK = smem + VC_ATT_OFF_K, *sV = smem + VC_ATT_OFF_V,
            *sKS = smem + VC_ATT_OFF_KS, *sMU = smem + VC_ATT_OFF_MU;
    const int nkb = a.nkb;
    if (warp == 0 && lane == 0) {
        tma_prefetch_desc(&maps.q);
        tma_prefetch_desc(&maps.k);
        const float *kscale = a.k_scale + (int64_t)bh * nkb * 4;
        mbarrier_arrive_expect_tx(b.q_full, VC_ATT_Q_TILE_BYTES(DH));
        tma_load_2d(sQ, &maps.q, b.q_full, 0, bh * a.sq_pad + qtile * VC_ATT_TILE_ROWS(DH));
        for (int kb = 0; kb < nkb; ++kb) {
            const int st = (int)VC_ATT_STAGE(kb);
            mbarrier_wait(&b.empty_k[st], VC_ATT_PHASE(kb) ^ 1u);
            mbarrier_arrive_expect_tx(&b.full_k[st], VC_ATT_K_BYTES + 16);
            tma_load_2d(sK + st * VC_ATT_K_BYTES, &maps.k, &b.full_k[st], 0, bh * a.skv_pad + kb * VC_BLOCK_K);
            bulk_load_1d(sKS + st * 16, kscale + (int64_t)kb * 4, 16, &b.full_k[st]);
        }
    } else if (warp == 1 && lane == 0) {
        /* The means ring needs no barrier of its own: group g's means (two
         * halves of DH x 16 B into two consecutive slots) come with block 8g's V^T
         * stage into group slot g % 4, read by the restore of turn 8g + 9 (or
         * the last turn) and rewritten with block 8g + 32, after block 8g + 28
         * was released. */
        tma_prefetch_desc(&maps.v);
        const int ngroups = (nkb + (int)VC_ATT_RESTORE_GROUP - 1) / (int)VC_ATT_RESTORE_GROUP;
        const uint4 *mu_tc = V_SMOOTH ? a.v_mean_tc + (int64_t)bh * ngroups * 2 * VC_GPU_DPAD : nullptr;
        for (int kb = 0; kb < nkb; ++kb) {
            const int st = (int)VC_ATT_STAGE(kb);
            const bool group_load = V_SMOOTH && kb % (int)VC_ATT_RESTORE_GROUP == 0;
            mbarrier_wait(&b.empty_v[st], VC_ATT_PHASE(kb) ^ 1u);
            mbarrier_arrive_expect_tx(&b.full_v[st],
                                      VC_ATT_V_CODE_BYTES(DH) + (group_load ? 2 * VC_ATT_MU_BYTES(DH) : 0));
            tma_load_2d(sV + st * VC_ATT_V_BYTES, &maps.v, &b.full_v[st], kb * VC_BLOCK_K, bh * VC_GPU_DPAD);
            if (group_load) {
                const int g = kb / (int)VC_ATT_RESTORE_GROUP;
                uint8_t *slot = sMU + 2 * (g % (int)VC_ATT_MU_GROUP_SLOTS) * VC_ATT_MU_SLOT;
                for (int half = 0; half < 2; ++half)
                    bulk_load_1d(slot + half * VC_ATT_MU_SLOT, mu_tc + ((int64_t)g * 2 + half) * VC_GPU_DPAD,
                                 VC_ATT_MU_BYTES(DH), &b.full_v[st]);
            }
        }
    }
}
