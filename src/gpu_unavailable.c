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

vcattn_status vcattn_gpu_output_status(const vcattn_gpu_params *p, const void *workspace, size_t workspace_bytes,
                                       void *stream) {
    (void)p, (void)workspace, (void)workspace_bytes, (void)stream;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_reference_workspace_size(const vcattn_gpu_reference_params *p, size_t *bytes) {
    (void)p;
    (void)bytes;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_reference_rows(const vcattn_gpu_reference_params *p, void *workspace,
                                        size_t workspace_bytes, void *stream) {
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

vcattn_status vcattn_gpu_plan_create(int64_t layers, int64_t batch, int64_t heads, int64_t seq,
                                     int64_t head_dim, int clusters, vcattn_gpu_plan **plan) {
    (void)layers, (void)batch, (void)heads, (void)seq, (void)head_dim, (void)clusters;
    if (plan) *plan = NULL;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_plan_update(vcattn_gpu_plan *plan, int64_t layer, const void *v,
                                     vcattn_gpu_dtype dtype, const int64_t v_stride[3], int iterations,
                                     uint64_t seed, void *stream) {
    (void)plan, (void)layer, (void)v, (void)dtype, (void)v_stride, (void)iterations, (void)seed, (void)stream;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_plan_permutation(const vcattn_gpu_plan *plan, int64_t layer, const int32_t **perm) {
    (void)plan, (void)layer;
    if (perm) *perm = NULL;
    return VCATTN_STATUS_NOT_BUILT;
}

vcattn_status vcattn_gpu_plan_memory_bytes(const vcattn_gpu_plan *plan, size_t *bytes) {
    (void)plan, (void)bytes;
    return VCATTN_STATUS_NOT_BUILT;
}

void vcattn_gpu_plan_destroy(vcattn_gpu_plan *plan) { (void)plan; }

#else
typedef int vc_gpu_unavailable_unused; /* ISO C wants a non-empty unit */
#endif
