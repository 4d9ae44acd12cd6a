/* maps.cuh - the attention kernel's three TMA tensor maps (host side): Q and K
 * codes (rows of 128 bytes, boxes of the tile's rows), V^T codes (VC_GPU_DPAD rows of skv_pad
 * bytes per head, boxes of the kernel's DH rows); 128B swizzle. */
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include "attention/tile.cuh" /* VC_ATT_TILE_ROWS */
#include "gpu_common.cuh"
#include "tma_encode.cuh"

/* 2-D map of bytes: `inner` bytes per row (row pitch = inner), `rows` rows, box 128 x box_rows, 128B swizzle */
static inline bool vc_tma_make_map(CUtensorMap *m, const void *base, uint64_t inner, uint64_t rows, uint32_t box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 fn = vc_tma_encode_fn();
    if (!fn) return false;
    cuuint64_t dims[2] = {inner, rows};
    cuuint64_t strides[1] = {inner};
    cuuint32_t box[2] = {128, box_rows};
    cuuint32_t estr[2] = {1, 1};
    return fn(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void *>(base), dims, strides, box, estr,
              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct vc_tma_maps {
    CUtensorMap q, k, v;
};
static inline bool vc_attn_make_maps(const vc_attn_args &a, int BH, int dh, vc_tma_maps *m) {
    return vc_tma_make_map(&m->q, a.q_codes, VC_GPU_DPAD, (uint64_t)BH * a.sq_pad, (uint32_t)VC_ATT_TILE_ROWS(dh)) &&
           vc_tma_make_map(&m->k, a.k_codes, VC_GPU_DPAD, (uint64_t)BH * a.skv_pad, 128) &&
           vc_tma_make_map(&m->v, a.v_codes, (uint64_t)a.skv_pad, (uint64_t)BH * VC_GPU_DPAD, (uint32_t)dh);
}
