/* consumer.cuh - the registers and shared-memory handles of one consumer
 * thread (warpgroups 1 and 2 of the attention kernel), shared by the
 * mainloop, the softmax, the restore and the epilogue. */
#pragma once
#include <stdint.h>

#include "attention/layout.cuh"

template <int DH> /* the head's channels the kernel is built for: 64 or 128 (tile.cuh) */
struct vc_att_consumer {
    float O[VC_ATT_O_REGS(DH)];     /* output accumulator: rows g, g + 8 of the warp's 16, columns 8j + 2t + e */
    float acc[VC_ATT_ACC_REGS(DH)]; /* one block's P V (+ the restore), columns DH..DH + 7: r partials */
    int32_t S[VC_ATT_S_REGS]; /* one block's scores */
    uint32_t PA[4][4]; /* P of the block in flight, E4M3 A fragments */
    /* A operand of the restore: thread t's partial alpha r_t of the block
     * folded last (its 32 keys: accumulator columns DH + 2t, DH + 1 + 2t), as
     * FP16 hi (column 2t) and lo (column 2t + 1); B holds the means in columns
     * 0..7, so the product sums the quad's partials: (alpha r) mu^T.  l is kept
     * as the same per-thread partials and summed over the quad at the end. */
    uint32_t RA[4];
    float rprev[2];    /* this thread's r_t of the block folded last */
    float m[2], l[2], alpha[2], lsum[2];
};
