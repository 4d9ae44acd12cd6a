/* method_list.h - every named method, once: its config (vcattn_method_config's fields in
 * order) and whether the Hopper kernel implements it.  methods.c builds the method table
 * from it, the kernel (src/cuda/attention/kernel.cuh) its dispatch, api.cu its check, and
 * vcattn_method_has_kernel answers from it - Python reads that (vcattn.GPU_METHODS).
 *
 * Retired methods live in git history and docs/kernel-log.md ("Methods retired"); their P
 * formats stay in the simulation for the analyses (vcattn_research.h).
 *
 * X(id, name, qk_format, qk_granularity, smooth_k, smooth_q, v_format, v_smooth, p_format,
 *   rowsum_from_quantized_p, p_scale, exact_keys, gpu_kernel)
 *
 * exact_keys: the V-Smooth kernel methods keep the 16 keys of largest V norm per head out of
 * the quantized pass (src/exact_keys.h; docs/method.md, "Exact keys").
 *
 * The recipes follow the code their authors ship (docs/methods.md): SageAttention2 sm90 =
 * per_thread INT8 QK, K channel-mean smoothing, per-channel E4M3 V, FP32 exp2 with P scaled
 * to 448 and cast to E4M3, the row sum from the FP32 P.  SageAttention3 = NVFP4 Q/K (16
 * along D), Q per-block mean and K channel mean smoothing, NVFP4 V (16 along tokens),
 * two-level P.  A kernel method reads Q/K as SageAttention2's INT8 per-thread groups with K
 * smoothing and V as per-channel E4M3 (tests/test_methods.c checks that); its P path is
 * vc_p_path (p_path.h). */
#ifndef VCATTN_METHOD_LIST_H
#define VCATTN_METHOD_LIST_H

#include "vcattn.h"

#define VC_METHOD_LIST(X)                                                                                   \
    X(VCATTN_METHOD_FP8_NAIVE, "fp8-naive", VCATTN_QK_FORMAT_E4M3, VCATTN_QK_GRANULARITY_BLOCK, 0, 0,       \
      VCATTN_V_FORMAT_E4M3_PER_BLOCK, 0, VCATTN_P_FORMAT_E4M3, 0, VCATTN_P_SCALE_RUNNING_MAX, 0, 0)         \
    X(VCATTN_METHOD_SAGE2_8BIT, "sage2-8bit", VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0,    \
      VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 0, VCATTN_P_FORMAT_E4M3, 0, VCATTN_P_SCALE_RUNNING_MAX, 0, 1)       \
    X(VCATTN_METHOD_VSMOOTH_8BIT, "vsmooth-8bit", VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0, \
      VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_E4M3, 1, VCATTN_P_SCALE_RUNNING_MAX, 16, 1)      \
    X(VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT, "vsmooth-expcast-8bit", VCATTN_QK_FORMAT_INT8,                    \
      VCATTN_QK_GRANULARITY_THREAD, 1, 0, VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_EXPCAST, 1,  \
      VCATTN_P_SCALE_RUNNING_MAX, 16, 1)                                                                    \
    X(VCATTN_METHOD_SAGE3_4BIT, "sage3-4bit", VCATTN_QK_FORMAT_NVFP4, VCATTN_QK_GRANULARITY_BLOCK, 1, 1,    \
      VCATTN_V_FORMAT_NVFP4, 0, VCATTN_P_FORMAT_NVFP4, 0, VCATTN_P_SCALE_RUNNING_MAX, 0, 0)                 \
    X(VCATTN_METHOD_VSMOOTH_4BIT, "vsmooth-4bit", VCATTN_QK_FORMAT_NVFP4, VCATTN_QK_GRANULARITY_BLOCK, 1, 1, \
      VCATTN_V_FORMAT_NVFP4, 1, VCATTN_P_FORMAT_NVFP4, 1, VCATTN_P_SCALE_RUNNING_MAX, 0, 0)                 \
    X(VCATTN_METHOD_VSMOOTH_BLOCKMAX_8BIT, "vsmooth-blockmax-8bit", VCATTN_QK_FORMAT_INT8,                  \
      VCATTN_QK_GRANULARITY_THREAD, 1, 0, VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_E4M3, 1,     \
      VCATTN_P_SCALE_BLOCK_MAX, 16, 1)                                                                      \
    X(VCATTN_METHOD_VSMOOTH_SPLIT_BLOCKMAX_8BIT, "vsmooth-split-blockmax-8bit", VCATTN_QK_FORMAT_INT8,      \
      VCATTN_QK_GRANULARITY_THREAD, 1, 0, VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_SPLIT, 1,    \
      VCATTN_P_SCALE_BLOCK_MAX, 16, 1)

#endif
