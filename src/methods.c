/* methods.c - the named methods, each a set of flags on one simulation path. */
#include <string.h>

#include "vcattn.h"

typedef struct {
    const char *name;
    vcattn_method_config config;
} vc_method_entry;

/* NOTE: the recipes follow the code their authors ship (see docs/methods.md):
 * SageAttention2 sm90 = per_thread INT8 QK, K channel-mean smoothing,
 * per-channel E4M3 V, FP32 exp2 with P scaled to 448 and cast to E4M3, the row
 * sum from the FP32 P.  SageAttention3 = NVFP4 Q/K (16 along D), Q per-block
 * mean and K channel mean smoothing, NVFP4 V (16 along tokens), two-level P. */
static const vc_method_entry k_methods[VCATTN_METHOD_COUNT] = {
    [VCATTN_METHOD_FP8_NAIVE] = {"fp8-naive",
        {VCATTN_QK_FORMAT_E4M3, VCATTN_QK_GRANULARITY_BLOCK, 0, 0,
         VCATTN_V_FORMAT_E4M3_PER_BLOCK, 0, VCATTN_P_FORMAT_E4M3, 0, VCATTN_P_SCALE_RUNNING_MAX}},
    [VCATTN_METHOD_SAGE2_8BIT] = {"sage2-8bit",
        {VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0,
         VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 0, VCATTN_P_FORMAT_E4M3, 0, VCATTN_P_SCALE_RUNNING_MAX}},
    [VCATTN_METHOD_VSMOOTH_8BIT] = {"vsmooth-8bit",
        {VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0,
         VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_E4M3, 1, VCATTN_P_SCALE_RUNNING_MAX}},
    [VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT] = {"vsmooth-expcast-8bit",
        {VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0,
         VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_EXPCAST, 1, VCATTN_P_SCALE_RUNNING_MAX}},
    [VCATTN_METHOD_SAGE3_4BIT] = {"sage3-4bit",
        {VCATTN_QK_FORMAT_NVFP4, VCATTN_QK_GRANULARITY_BLOCK, 1, 1,
         VCATTN_V_FORMAT_NVFP4, 0, VCATTN_P_FORMAT_NVFP4, 0, VCATTN_P_SCALE_RUNNING_MAX}},
    [VCATTN_METHOD_VSMOOTH_4BIT] = {"vsmooth-4bit",
        {VCATTN_QK_FORMAT_NVFP4, VCATTN_QK_GRANULARITY_BLOCK, 1, 1,
         VCATTN_V_FORMAT_NVFP4, 1, VCATTN_P_FORMAT_NVFP4, 1, VCATTN_P_SCALE_RUNNING_MAX}},
    [VCATTN_METHOD_VSMOOTH_EXPCAST_TAIL_8BIT] = {"vsmooth-expcast-tail-8bit",
        {VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0,
         VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_EXPCAST_TAIL, 1, VCATTN_P_SCALE_RUNNING_MAX}},
    [VCATTN_METHOD_VSMOOTH_EXPCAST_BLOCKMAX_8BIT] = {"vsmooth-expcast-blockmax-8bit",
        {VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0,
         VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_EXPCAST, 1, VCATTN_P_SCALE_BLOCK_MAX}},
    [VCATTN_METHOD_VSMOOTH_BLOCKMAX_8BIT] = {"vsmooth-blockmax-8bit",
        {VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0,
         VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_E4M3, 1, VCATTN_P_SCALE_BLOCK_MAX}},
    [VCATTN_METHOD_VSMOOTH_SPLIT_BLOCKMAX_8BIT] = {"vsmooth-split-blockmax-8bit",
        {VCATTN_QK_FORMAT_INT8, VCATTN_QK_GRANULARITY_THREAD, 1, 0,
         VCATTN_V_FORMAT_E4M3_PER_CHANNEL, 1, VCATTN_P_FORMAT_SPLIT, 1, VCATTN_P_SCALE_BLOCK_MAX}},
};

const char *vcattn_method_name(vcattn_method method) {
    if ((int)method < 0 || method >= VCATTN_METHOD_COUNT) return NULL;
    return k_methods[method].name;
}

vcattn_status vcattn_method_from_name(const char *name, vcattn_method *method) {
    if (!name || !method) return VCATTN_STATUS_NULL_POINTER;
    for (int i = 0; i < VCATTN_METHOD_COUNT; ++i)
        if (strcmp(name, k_methods[i].name) == 0) {
            *method = (vcattn_method)i;
            return VCATTN_STATUS_SUCCESS;
        }
    return VCATTN_STATUS_INVALID_ARGUMENT;
}

vcattn_status vcattn_method_config_get(vcattn_method method, vcattn_method_config *config) {
    if (!config) return VCATTN_STATUS_NULL_POINTER;
    if ((int)method < 0 || method >= VCATTN_METHOD_COUNT) return VCATTN_STATUS_INVALID_ARGUMENT;
    *config = k_methods[method].config;
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_method_exact_p(const vcattn_method_config *config, vcattn_method_config *exact) {
    if (!config || !exact) return VCATTN_STATUS_NULL_POINTER;
    if (!config->v_smooth) return VCATTN_STATUS_INVALID_ARGUMENT;
    switch (config->p_format) {
    case VCATTN_P_FORMAT_E4M3:
    case VCATTN_P_FORMAT_EXPCAST:
    case VCATTN_P_FORMAT_EXPCAST_TAIL:
    case VCATTN_P_FORMAT_SPLIT:
        *exact = *config;
        exact->p_format = VCATTN_P_FORMAT_E4M3;
        return VCATTN_STATUS_SUCCESS;
    default:
        return VCATTN_STATUS_INVALID_ARGUMENT;
    }
}
