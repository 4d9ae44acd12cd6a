/* layout.cuh - the attention kernel's CTA: thread roles, shared-memory map,
 * named-barrier ids.
 *
 * One CTA = one 128-query tile of one (batch, head).  384 threads: warpgroup 0
 * is the producer (two TMA loader threads), warpgroups 1 and 2 are the
 * consumers, 64 query rows each, taking turns on the tensor cores
 * (ping-pong).  Shared memory (1024-byte aligned for the 128B swizzle):
 *
 *   Q tile        128 rows x 128 B (INT8 codes; channels past DH are zeros and
 *                 the DH = 64 kernel's score product does not read them)
 *   K ring        STAGES x 128 keys x 128 B (INT8 codes)
 *   V^T ring      STAGES x (DH + 8) rows x 128 B (E4M3 codes; rows DH..DH+7
 *                 hold E4M3 ones so that the P V product also yields r, the
 *                 row sum of the quantized P, in accumulator columns DH..DH+7);
 *                 stages sized for DH = 128
 *   means ring    MU_SLOTS x (DH channels x 16 B + 8 zero rows): the FP16
 *                 means, the B operand of the restore, a group of 8 blocks
 *                 per two slots
 *   K scales      STAGES x 4 floats (one per 32-key column group)
 *   kept          256 consumer threads x 32 B: the grouped restore's pending
 *                 coefficients and the block-max group floor's G, from one
 *                 turn to the next (restore.cuh; in registers they spilled)
 *   mbarriers */
#pragma once
#include "attention/tile.cuh" /* the tile's shape: VC_ATT_THREADS, VC_ATT_Q_BYTES, ... */
#include "numerics.h"

#define VC_ATT_STAGES 4
#define VC_ATT_K_BYTES (VC_BLOCK_K * VC_GPU_DPAD) /* 128 keys x 128 B */
#define VC_ATT_V_BYTES 17408                 /* a V^T stage: 136 rows x 128 B (8 rows of ones), 1024-B aligned */
#define VC_ATT_V_CODE_BYTES(dh) (VC_BLOCK_K * (dh)) /* its DH rows of codes; the ones rows follow */
#define VC_ATT_MU_BYTES(dh) ((dh) * 16)      /* a half group's means: DH channels x 16 B */
#define VC_ATT_MU_SLOT 2176                  /* + 8 zero rows: B rows DH..DH+7 of the restore (N = DH + 8) */
#define VC_ATT_MU_SLOTS 8                    /* means ring: VC_ATT_MU_GROUP_SLOTS groups of two slots */
#define VC_ATT_RESTORE_GROUP ((unsigned)VC_RESTORE_GROUP) /* blocks per restore instruction (softmax_numerics.h) */
#define VC_ATT_MU_GROUP_SLOTS 4u             /* 4 group slots of 2 x 2176 B (a group's means) */
#define VC_ATT_KEEP_BYTES 32                 /* per consumer thread: 4 pending coefficients, G[2] */
#define VC_ATT_OFF_Q 0
#define VC_ATT_OFF_K VC_ATT_Q_BYTES
#define VC_ATT_OFF_V (VC_ATT_OFF_K + VC_ATT_STAGES * VC_ATT_K_BYTES)
#define VC_ATT_OFF_MU (VC_ATT_OFF_V + VC_ATT_STAGES * VC_ATT_V_BYTES)
#define VC_ATT_OFF_KS (VC_ATT_OFF_MU + VC_ATT_MU_SLOTS * VC_ATT_MU_SLOT) /* 4 K scales per stage */
#define VC_ATT_OFF_KEEP (VC_ATT_OFF_KS + VC_ATT_STAGES * 16) /* VC_ATT_KEEP_BYTES per consumer thread */
#define VC_ATT_OFF_BAR (VC_ATT_OFF_KEEP + VC_ATT_CONSUMER_THREADS * VC_ATT_KEEP_BYTES)
#define VC_ATT_SMEM (VC_ATT_OFF_BAR + 256 + 1024)
/* Ring stage and mbarrier phase parity of key block kb (any STAGES: a
 * power of two compiles to a mask and a shift) */
#define VC_ATT_STAGE(kb) ((unsigned)(kb) % VC_ATT_STAGES)
#define VC_ATT_PHASE(kb) (((unsigned)(kb) / VC_ATT_STAGES) & 1u)
#define VC_ATT_BAR_WG0 1 /* named barrier a consumer WG waits on before its turn (+1: the other WG) */
#define VC_ATT_E4M3_ONE 0x38u

/* The CTA's barriers: full/empty per ring stage (K and V^T), and the Q tile's. */
struct vc_att_barriers {
    uint64_t *full_k, *full_v, *empty_k, *empty_v, *q_full;
};
