/* tiling.h - the constants the CPU simulation and the CUDA kernels must agree
 * on, defined once for C and CUDA: the tile shape of the attention loop and
 * SageAttention's P offsets. */
#ifndef VCATTN_TILING_H
#define VCATTN_TILING_H

#define VC_TILE_Q 128  /* queries per tile (one CTA on the GPU: 2 warpgroups x 64 rows) */
#define VC_BLOCK_K 128 /* keys per block: the unit of the kernel's loop and of the V-Smooth demean */

/* log2 of the offset SageAttention subtracts from the row max before exp2:
 * the row max lands at 2^8.807 = 448, the E4M3 maximum (sage2), or at 2688 =
 * 448 x 6, the NVFP4 two-level maximum (sage3). */
#define VC_SAGE2_P_LOG2_OFFSET 8.807f
#define VC_SAGE3_P_LOG2_OFFSET 11.3923f

#endif
