/* gpu_unavailable.c - the GPU entry points of a build without CUDA.
 *
 * A library built where nvcc was absent (or with -DVCATTN_CUDA=OFF) still
 * exports every GPU function, so programs and bindings link and load; each
 * call answers VCATTN_STATUS_NOT_BUILT instead of computing anything. */
#ifndef VCATTN_HAVE_CUDA

#include <string.h>

#include "vcattn.h"


vcattn_status vcattn_gpu_params_validate(const vcattn_gpu_params *p) {
    return p ? VCATTN_STATUS_NOT_BUILT : VCATTN_STATUS_NULL_POINTER;
}

vcattn_status vcattn_gpu_workspace_size(const vcattn_gpu_params *p, size_t *bytes) {
    (void)p;
    (void)bytes;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_workspace_layout(const vcattn_gpu_params *p, vcattn_gpu_layout *layout) {
    (void)p;
    (void)layout;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_device_check(void) { return VCATTN_STATUS_NOT_BUILT; }

vcattn_status vcattn_gpu_attention(const vcattn_gpu_params *p, void *workspace, size_t workspace_bytes,
                                   void *stream) {
    (void)p, (void)workspace, (void)workspace_bytes, (void)stream;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_preprocess(const vcattn_gpu_params *p, void *workspace, size_t workspace_bytes,
                                    void *stream) {
    (void)p, (void)workspace, (void)workspace_bytes, (void)stream;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_attention_kernel(const vcattn_gpu_params *p, void *workspace,
                                          size_t workspace_bytes, void *stream) {
    (void)p, (void)workspace, (void)workspace_bytes, (void)stream;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_set_kernel_version(int version) {
    (void)version;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_kmeans_workspace_size(const vcattn_gpu_kmeans_params *p, size_t *bytes) {
    (void)p;
    (void)bytes;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_kmeans(const vcattn_gpu_kmeans_params *p, void *workspace, size_t workspace_bytes,
                                void *stream) {
    (void)p, (void)workspace, (void)workspace_bytes, (void)stream;
    return VCATTN_STATUS_NOT_BUILT;
}

#else
typedef int vc_gpu_unavailable_unused; /* ISO C wants a non-empty unit */
#endif
