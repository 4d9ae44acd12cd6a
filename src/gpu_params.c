/* gpu_params.c - defaults of the GPU parameter structs (plain host code, in
 * every build, with or without CUDA). */
#include <string.h>

#include "internal.h"

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
    p->method = VCATTN_METHOD_DEFAULT;
    p->softmax_scale = 0.0;
    p->input_dtype = VCATTN_GPU_DTYPE_BF16;
    p->output_dtype = VCATTN_GPU_DTYPE_BF16;
    p->q = q;
    p->k = k;
    p->v = v;
    p->o = o;
    /* overflowing sizes give INT64_MAX strides (refused by validation), not UB */
    int64_t sq[3], skv[3];
    vc_contiguous_strides(heads, seq_q, head_dim, sq);
    vc_contiguous_strides(heads, seq_kv, head_dim, skv);
    memcpy(p->q_stride, sq, sizeof sq);
    memcpy(p->o_stride, sq, sizeof sq);
    memcpy(p->k_stride, skv, sizeof skv);
    memcpy(p->v_stride, skv, sizeof skv);
}

void vcattn_gpu_kmeans_params_init(vcattn_gpu_kmeans_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->dtype = VCATTN_GPU_DTYPE_BF16;
    p->clusters = 64;
    p->iterations = 8;
}
