/* gpu_unavailable.c - the GPU entry points of a build without CUDA.
 *
 * A library built where nvcc was absent (or with -DVCATTN_CUDA=OFF) still
 * exports every GPU function, so programs and bindings link and load; each
 * call answers VCATTN_STATUS_NOT_BUILT instead of computing anything. */
#ifndef VCATTN_HAVE_CUDA

#include <string.h>

#include "vcattn.h"


void vcattn_gpu_params_init(vcattn_gpu_params *p, int64_t batch, int64_t heads, int64_t seq_q,
                            int64_t seq_kv, int64_t head_dim, const void *q, const void *k,
                            const void *v, void *o) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->batch = batch;
    p->heads = heads;
    p->seq_q = seq_q;
    p->seq_kv = seq_kv;
    p->head_dim = head_dim;
    p->method = VCATTN_METHOD_VSMOOTH_8BIT;
    p->q = q;
    p->k = k;
    p->v = v;
    p->o = o;
}

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

void vcattn_gpu_kmeans_params_init(vcattn_gpu_kmeans_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->clusters = 64;
    p->iterations = 8;
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
