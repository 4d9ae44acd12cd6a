/* methods.c - the named methods (method_list.h), each a set of flags on one simulation
 * path, and which of them the Hopper kernel runs. */
#include <string.h>

#include "method_list.h"
#include "vcattn.h"

typedef struct {
    const char *name;
    vcattn_method_config config;
    int gpu_kernel;
} vc_method_entry;

#define VC_METHOD_ENTRY(id, name, qkf, qkg, sk, sq, vf, vs, pf, rq, ps, ek, gpu) \
    [id] = {name, {qkf, qkg, sk, sq, vf, vs, pf, rq, ps, ek}, gpu},
static const vc_method_entry k_methods[VCATTN_METHOD_COUNT] = {VC_METHOD_LIST(VC_METHOD_ENTRY)};
#undef VC_METHOD_ENTRY

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

int vcattn_method_has_kernel(vcattn_method method) {
    return (int)method >= 0 && method < VCATTN_METHOD_COUNT && k_methods[method].gpu_kernel;
}

vcattn_method vcattn_method_default(void) { return VCATTN_METHOD_DEFAULT; }

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
