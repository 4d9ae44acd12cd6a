/* p_path.h - a method's P path: how P is written (its format and scale) and whether
 * V-Smooth's restore and the quantized row sum come with it, as one integer of four
 * vcattn_method_config fields, and what follows from it.  The kernel is instantiated per
 * P path (src/cuda/attention/kernel.cuh) and the simulation derives its values from the
 * same traits (simulate.c), so neither restates what a format implies.
 *
 * Macros, not functions: each is a constant expression in C11 and in CUDA (template
 * arguments, constexpr), of the P path pp = VC_P_PATH(...). */
#ifndef VCATTN_P_PATH_H
#define VCATTN_P_PATH_H

#include "numerics.h" /* and softmax_numerics.h */
#include "tiling.h"
#include "vcattn.h"

#define VC_P_PATH(p_format, p_scale, v_smooth, rowsum_quantized) \
    ((int)(p_format) | ((int)(p_scale) << 4) | ((v_smooth) ? 1 << 5 : 0) | ((rowsum_quantized) ? 1 << 6 : 0))
#define VC_P_PATH_OF(cfg) VC_P_PATH((cfg).p_format, (cfg).p_scale, (cfg).v_smooth, (cfg).rowsum_from_quantized_p)

#define VC_PP_FORMAT(pp) ((vcattn_p_format)((pp) & 15))
/* each block's P against its own max (softmax_numerics.h, "the block-max P scale") */
#define VC_PP_BLOCK_MAX(pp) ((((pp) >> 4) & 1) != 0)
/* V-Smooth: the permuted, block-demeaned V and the mean restore r mu^T */
#define VC_PP_V_SMOOTH(pp) ((((pp) >> 5) & 1) != 0)
/* the row sum l (and the restore's r) from the quantized P, else from the FP32 P */
#define VC_PP_ROWSUM_QUANTIZED(pp) ((((pp) >> 6) & 1) != 0)

#define VC_PP_IS(pp, f) (VC_PP_FORMAT(pp) == VCATTN_P_FORMAT_##f)
/* E4M3 codes written from the score by ExpCast's bracket (the split's ExpCast keys too) */
#define VC_PP_EXPCAST_CODES(pp) (VC_PP_IS(pp, EXPCAST) || VC_PP_IS(pp, EXPCAST_TAIL) || VC_PP_IS(pp, SPLIT))
/* ExpCast's saturating one-FFMA form (plain, block-max and the split's; not the tail line) */
#define VC_PP_SATURATING_CODES(pp) (VC_PP_IS(pp, EXPCAST) || VC_PP_IS(pp, SPLIT))
/* the restore grouped 8 blocks at a time: every E4M3-class P (NVFP4's P~ of 2688 would not
 * fit the FP16 coefficient; FP32 P restores one block at a time) */
#define VC_PP_GROUPED_RESTORE(pp) (VC_PP_IS(pp, E4M3) || VC_PP_EXPCAST_CODES(pp))
/* log2 of the offset between the row max and the top of P's range: the exp path's 8.807
 * (448), the block-max exp path's 8 (256), SageAttention3's; 0 where the codes carry it */
#define VC_PP_P_LOG2_OFFSET(pp)                                                                        \
    (VC_PP_IS(pp, E4M3) ? (VC_PP_BLOCK_MAX(pp) ? VC_BLOCKMAX_E4M3_P_LOG2_OFFSET : VC_SAGE2_P_LOG2_OFFSET) \
     : VC_PP_IS(pp, NVFP4) ? VC_SAGE3_P_LOG2_OFFSET                                                    \
                           : 0.0f)
/* log2 of the P scale the LSE takes back out: the value of the row max's code */
#define VC_PP_LSE_LOG2_BIAS(pp)                     \
    (VC_PP_IS(pp, EXPCAST_TAIL) ? VC_EXPCAST_TAIL_P_LOG2_SCALE \
     : VC_PP_EXPCAST_CODES(pp)  ? VC_EXPCAST_P_LOG2_SCALE      \
                                : 0.0f)

#endif
