/* vcattn_gpu_kmeans.h - V-Smooth grouping on the GPU (to be folded into vcattn.h).
 *
 * k-means over the value tokens of every (batch, head) at once; the
 * permutation is the stable argsort of the labels (clusters contiguous in
 * ascending label order, sequence order inside a cluster), exactly like the
 * CPU planner vcattn_vsmooth_plan.  Deterministic for a given input, seed and
 * warm start (no floating-point atomics). */
#ifndef VCATTN_GPU_KMEANS_H
#define VCATTN_GPU_KMEANS_H

#include "vcattn_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vcattn_gpu_kmeans_params {
    int64_t batch, heads, seq, head_dim; /* head_dim 64 or 128 */
    vcattn_gpu_dtype dtype;              /* of v */
    const void *v;                       /* device (B,H,S,D), element strides below */
    int64_t v_stride[3];                 /* batch, head, seq; head_dim contiguous */
    int clusters;                        /* 8..128, a multiple of 8 (default 64) */
    int iterations;                      /* Lloyd iterations >= 0 (default 8) */
    uint64_t seed;                       /* initial centroids, when no warm start */
    const float *init_centroids;         /* optional device (B,H,k,D) FP32: warm start */
    float *centroids;                    /* device (B,H,k,D) FP32 out (may alias init) */
    int32_t *perm;                       /* device (B,H,S) out */
    int32_t *labels;                     /* optional device (B,H,S) out */
} vcattn_gpu_kmeans_params;

/* clusters 64, iterations 8, BF16, everything else zero. */
void vcattn_gpu_kmeans_params_init(vcattn_gpu_kmeans_params *p);
vcattn_status vcattn_gpu_kmeans_workspace_size(const vcattn_gpu_kmeans_params *p, size_t *bytes);
/* Enqueues the grouping on `stream` (cudaStream_t or NULL). */
vcattn_status vcattn_gpu_kmeans(const vcattn_gpu_kmeans_params *p, void *workspace,
                                size_t workspace_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif
