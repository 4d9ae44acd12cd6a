/* plan.cu - the device plan: per-layer permutations and centroids kept in
 * device memory across denoising steps, refreshed by vcattn_gpu_kmeans. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "vcattn.h"

struct vcattn_gpu_plan {
    int64_t layers, batch, heads, seq, head_dim;
    int clusters;
    int32_t *perm;        /* device [layers][B*H*S] */
    float *centroids;     /* device [layers][B*H*k*D] */
    void *workspace;      /* device, vcattn_gpu_kmeans's */
    size_t workspace_bytes;
    unsigned char *have;  /* host [layers] */
};

static vcattn_status gp_cuda(cudaError_t e) {
    if (e == cudaSuccess) return VCATTN_STATUS_SUCCESS;
    return e == cudaErrorMemoryAllocation ? VCATTN_STATUS_OUT_OF_MEMORY : VCATTN_STATUS_CUDA_ERROR;
}

/* The k-means parameters of one layer (without v), as create and update see them. */
static vcattn_gpu_kmeans_params gp_kmeans_params(const vcattn_gpu_plan *p, int64_t layer) {
    vcattn_gpu_kmeans_params k;
    vcattn_gpu_kmeans_params_init(&k);
    k.batch = p->batch;
    k.heads = p->heads;
    k.seq = p->seq;
    k.head_dim = p->head_dim;
    k.clusters = p->clusters;
    size_t per_perm = (size_t)(p->batch * p->heads * p->seq);
    size_t per_cent = (size_t)(p->batch * p->heads * p->clusters * p->head_dim);
    k.perm = p->perm + (size_t)layer * per_perm;
    k.centroids = p->centroids + (size_t)layer * per_cent;
    return k;
}

extern "C" void vcattn_gpu_plan_destroy(vcattn_gpu_plan *plan) {
    if (!plan) return;
    cudaFree(plan->perm);
    cudaFree(plan->centroids);
    cudaFree(plan->workspace);
    free(plan->have);
    free(plan);
}

extern "C" vcattn_status vcattn_gpu_plan_create(int64_t layers, int64_t batch, int64_t heads, int64_t seq,
                                                int64_t head_dim, int clusters, vcattn_gpu_plan **out) {
    if (!out) return VCATTN_STATUS_NULL_POINTER;
    *out = NULL;
    if (layers <= 0 || layers > (1 << 20)) return layers <= 0 ? VCATTN_STATUS_BAD_SHAPE : VCATTN_STATUS_SIZE_OVERFLOW;
    vcattn_gpu_plan *p = (vcattn_gpu_plan *)calloc(1, sizeof *p);
    if (!p) return VCATTN_STATUS_OUT_OF_MEMORY;
    p->layers = layers;
    p->batch = batch;
    p->heads = heads;
    p->seq = seq;
    p->head_dim = head_dim;
    p->clusters = clusters;
    /* the k-means validation covers shapes, head_dim and clusters */
    vcattn_gpu_kmeans_params k = gp_kmeans_params(p, 0);
    k.v = (const void *)16;            /* placeholders: only the sizes are checked here */
    k.perm = (int32_t *)16;
    k.centroids = (float *)16;
    k.v_stride[2] = head_dim;
    k.v_stride[1] = seq * head_dim;
    k.v_stride[0] = heads * seq * head_dim;
    vcattn_status st = vcattn_gpu_kmeans_workspace_size(&k, &p->workspace_bytes);
    if (st) {
        free(p);
        return st;
    }
    size_t per_perm = (size_t)(batch * heads * seq), per_cent = (size_t)(batch * heads * clusters * head_dim);
    if (per_perm > SIZE_MAX / sizeof(int32_t) / (size_t)layers || per_cent > SIZE_MAX / sizeof(float) / (size_t)layers) {
        free(p);
        return VCATTN_STATUS_SIZE_OVERFLOW;
    }
    p->have = (unsigned char *)calloc((size_t)layers, 1);
    if (!p->have) {
        free(p);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    if ((st = gp_cuda(cudaMalloc((void **)&p->perm, (size_t)layers * per_perm * sizeof(int32_t)))) ||
        (st = gp_cuda(cudaMalloc((void **)&p->centroids, (size_t)layers * per_cent * sizeof(float)))) ||
        (st = gp_cuda(cudaMalloc(&p->workspace, p->workspace_bytes)))) {
        vcattn_gpu_plan_destroy(p);
        return st;
    }
    *out = p;
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_plan_update(vcattn_gpu_plan *plan, int64_t layer, const void *v,
                                                vcattn_gpu_dtype dtype, const int64_t v_stride[3],
                                                int iterations, uint64_t seed, void *stream) {
    if (!plan || !v || !v_stride) return VCATTN_STATUS_NULL_POINTER;
    if (layer < 0 || layer >= plan->layers) return VCATTN_STATUS_INVALID_ARGUMENT;
    vcattn_gpu_kmeans_params k = gp_kmeans_params(plan, layer);
    k.v = v;
    k.dtype = dtype;
    k.v_stride[0] = v_stride[0];
    k.v_stride[1] = v_stride[1];
    k.v_stride[2] = v_stride[2];
    k.iterations = iterations;
    k.seed = seed;
    /* warm start in place: k-means copies the initial centroids into its workspace first */
    k.init_centroids = plan->have[layer] ? k.centroids : NULL;
    vcattn_status st = vcattn_gpu_kmeans(&k, plan->workspace, plan->workspace_bytes, stream);
    if (st == VCATTN_STATUS_SUCCESS) plan->have[layer] = 1;
    return st;
}

extern "C" vcattn_status vcattn_gpu_plan_permutation(const vcattn_gpu_plan *plan, int64_t layer,
                                                     const int32_t **perm) {
    if (!plan || !perm) return VCATTN_STATUS_NULL_POINTER;
    if (layer < 0 || layer >= plan->layers) return VCATTN_STATUS_INVALID_ARGUMENT;
    *perm = plan->have[layer] ? gp_kmeans_params(plan, layer).perm : NULL;
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_plan_memory_bytes(const vcattn_gpu_plan *plan, size_t *bytes) {
    if (!plan || !bytes) return VCATTN_STATUS_NULL_POINTER;
    *bytes = (size_t)(plan->layers * plan->batch * plan->heads * plan->seq) * sizeof(int32_t) +
             (size_t)(plan->layers * plan->batch * plan->heads * plan->clusters * plan->head_dim) * sizeof(float) +
             plan->workspace_bytes;
    return VCATTN_STATUS_SUCCESS;
}
