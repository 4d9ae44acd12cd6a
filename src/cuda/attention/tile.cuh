/* tile.cuh - the attention tile's shape, named once (as FlashAttention-3's tile_size.h):
 * the query rows of a CTA (VC_TILE_Q, shared with the simulation in tiling.h), split over
 * VC_ATT_CONSUMERS consumer warpgroups of VC_ATT_WG_ROWS rows (one wgmma M each, taking
 * turns on the tensor cores), against key blocks of VC_BLOCK_K keys (the wgmma N of S)
 * and DH channels: the kernel is built for DH = 64 and DH = 128 (VC_GPU_DPAD, the width of
 * the codes in global memory; a head of 64 or fewer channels runs the DH = 64 kernel, which
 * issues half the products and folds half the accumulator).  Everything of the kernel that follows from the shape - thread
 * counts, the Q tile's bytes, a consumer's accumulator registers, the barrier counts - is
 * derived here; layout.cuh derives the shared-memory map from these. */
#pragma once
#include "gpu_common.cuh" /* VC_GPU_DPAD; tiling.h: VC_TILE_Q, VC_BLOCK_K */

/* VC_ATT_DIAG (CMake -DVCATTN_ATT_DIAG=N, never in a product build): 1 = the tensor cores
 * alone (the softmax stubbed: P stays a constant, no max, no exponentials), 2 = the softmax
 * alone (no wgmma issued: S read from the K stage in shared memory, P kept alive).  Timed by
 * scripts/device_check.sh diag: it separates "tensor idle" from "tensor slower than its rate"
 * (docs/kernel-log.md).  Outputs are garbage in both. */
#ifndef VC_ATT_DIAG
#define VC_ATT_DIAG 0
#endif

#define VC_ATT_CONSUMERS 2 /* consumer warpgroups (taking turns on the tensor cores) at DH = 128 */
/* at DH = 64 (A/B switch: three warpgroups on 192-row tiles, the registers allow it there) */
#ifndef VC_ATT_CONSUMERS_64
#define VC_ATT_CONSUMERS_64 2
#endif
#define VC_ATT_CONSUMERS_OF(dh) ((dh) == 64 ? VC_ATT_CONSUMERS_64 : VC_ATT_CONSUMERS)
#define VC_ATT_MAX_CONSUMERS (VC_ATT_CONSUMERS_64 > VC_ATT_CONSUMERS ? VC_ATT_CONSUMERS_64 : VC_ATT_CONSUMERS)
#define VC_ATT_WG_ROWS 64  /* query rows per consumer warpgroup: one m64 wgmma */
#define VC_ATT_WG_THREADS 128
#define VC_ATT_TILE_ROWS(dh) (VC_ATT_CONSUMERS_OF(dh) * VC_ATT_WG_ROWS) /* a CTA's query rows */
#define VC_ATT_THREADS_OF(dh) (VC_ATT_WG_THREADS * (1 + VC_ATT_CONSUMERS_OF(dh))) /* + the producer */
#define VC_ATT_MAX_THREADS (VC_ATT_WG_THREADS * (1 + VC_ATT_MAX_CONSUMERS))
/* a consumer's registers after setmaxnreg: what the register file leaves beside a 24-register
 * producer (multiple of 8) */
#define VC_ATT_CONSUMER_REGS(dh) (VC_ATT_CONSUMERS_OF(dh) == 2 ? 240 : 160)
#define VC_ATT_CONSUMER_THREADS (VC_ATT_MAX_CONSUMERS * VC_ATT_WG_THREADS) /* the keep area's threads */
#define VC_ATT_TURN_THREADS (2 * VC_ATT_WG_THREADS) /* a turn's named barrier: the one before and the next */
#define VC_ATT_Q_BYTES (VC_ATT_MAX_CONSUMERS * VC_ATT_WG_ROWS * VC_GPU_DPAD) /* the Q tile, INT8 codes */
#define VC_ATT_Q_TILE_BYTES(dh) (VC_ATT_TILE_ROWS(dh) * VC_GPU_DPAD)
#define VC_ATT_WG_Q_BYTES (VC_ATT_WG_ROWS * VC_GPU_DPAD)              /* one consumer's rows of it */
/* one consumer thread's share of an m64 accumulator: S (N = VC_BLOCK_K), O (N = DH), and a
 * block's P V with the 8 columns of the quantized row sum (N = DH + 8) */
#define VC_ATT_S_REGS (VC_ATT_WG_ROWS * VC_BLOCK_K / VC_ATT_WG_THREADS)
#define VC_ATT_O_REGS(dh) (VC_ATT_WG_ROWS * (dh) / VC_ATT_WG_THREADS)
#define VC_ATT_ACC_REGS(dh) (VC_ATT_O_REGS(dh) + 4)
/* the K-steps of 32 INT8 channels in the score product */
#define VC_ATT_QK_STEPS(dh) ((dh) / 32)

static_assert(VC_TILE_Q == VC_ATT_CONSUMERS * VC_ATT_WG_ROWS, "the tile's rows are the consumers' rows");
static_assert(VC_ATT_CONSUMERS_64 == 2 || VC_ATT_CONSUMERS_64 == 3, "two or three consumer warpgroups");
static_assert(VC_ATT_S_REGS == 64, "the softmax is written for 64 score registers");
static_assert(VC_GPU_DPAD == 128, "the codes' rows are 128 bytes (the 128B swizzle)");
