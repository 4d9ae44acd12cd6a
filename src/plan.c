/* plan.c - the per-layer CPU plan that carries the permutation and the centroids
 * from one grouping step to the next (warm start).  When to group: schedule.c. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct vcattn_plan {
    int64_t layers, batch, heads, seq, head_dim;
    int clusters;
    int32_t *perm;       /* [layers][B*H*S] */
    float *centroids;    /* [layers][B*H*k*D] */
    unsigned char *have; /* [layers] */
};

vcattn_status vcattn_plan_create(int64_t layers, int64_t batch, int64_t heads, int64_t seq,
                                 int64_t head_dim, int clusters, vcattn_plan **plan) {
    if (!plan) return VCATTN_STATUS_NULL_POINTER;
    *plan = NULL;
    if (layers <= 0 || batch <= 0 || heads <= 0 || seq <= 0 || head_dim <= 0) return VCATTN_STATUS_BAD_SHAPE;
    if (clusters < 1) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (seq > INT32_MAX) return VCATTN_STATUS_SIZE_OVERFLOW;
    int64_t nperm, ncent;
    vcattn_status st = vc_count4(layers, batch, heads, seq, sizeof(int32_t), &nperm);
    if (st) return st;
    if (!vc_mul_i64(layers * batch * heads, (int64_t)clusters, &ncent) || !vc_mul_i64(ncent, head_dim, &ncent) ||
        (uint64_t)ncent > SIZE_MAX / sizeof(float))
        return VCATTN_STATUS_SIZE_OVERFLOW;
    vcattn_plan *p = (vcattn_plan *)calloc(1, sizeof *p);
    if (!p) return VCATTN_STATUS_OUT_OF_MEMORY;
    *p = (vcattn_plan){layers, batch, heads, seq, head_dim, clusters, NULL, NULL, NULL};
    p->perm = (int32_t *)malloc((size_t)nperm * sizeof(int32_t));
    p->centroids = (float *)malloc((size_t)ncent * sizeof(float));
    p->have = (unsigned char *)calloc((size_t)layers, 1);
    if (!p->perm || !p->centroids || !p->have) {
        vcattn_plan_destroy(p);
        return VCATTN_STATUS_OUT_OF_MEMORY;
    }
    *plan = p;
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_plan_update(vcattn_plan *plan, int64_t layer, const float *v,
                                 const int64_t v_stride[3], int iterations, uint64_t seed,
                                 int num_threads) {
    if (!plan || !v || !v_stride) return VCATTN_STATUS_NULL_POINTER;
    if (layer < 0 || layer >= plan->layers) return VCATTN_STATUS_INVALID_ARGUMENT;
    size_t per_perm = (size_t)(plan->batch * plan->heads * plan->seq);
    size_t per_cent = (size_t)(plan->batch * plan->heads * plan->clusters * plan->head_dim);
    float *cent = plan->centroids + (size_t)layer * per_cent;
    vcattn_kmeans_params km;
    vcattn_kmeans_params_init(&km);
    km.clusters = plan->clusters;
    km.iterations = iterations;
    km.seed = seed;
    km.num_threads = num_threads;
    km.init_centroids = plan->have[layer] ? cent : NULL;
    /* k-means writes fresh centroids while reading the warm start: use a copy */
    float *warm = NULL;
    if (km.init_centroids) {
        warm = (float *)malloc(per_cent * sizeof(float));
        if (!warm) return VCATTN_STATUS_OUT_OF_MEMORY;
        memcpy(warm, cent, per_cent * sizeof(float));
        km.init_centroids = warm;
    }
    vcattn_status st = vcattn_vsmooth_plan(v, plan->batch, plan->heads, plan->seq, plan->head_dim, v_stride,
                                           &km, plan->perm + (size_t)layer * per_perm, NULL, cent);
    free(warm);
    if (st == VCATTN_STATUS_SUCCESS) plan->have[layer] = 1;
    return st;
}

vcattn_status vcattn_plan_permutation(const vcattn_plan *plan, int64_t layer, const int32_t **perm) {
    if (!plan || !perm) return VCATTN_STATUS_NULL_POINTER;
    if (layer < 0 || layer >= plan->layers) return VCATTN_STATUS_INVALID_ARGUMENT;
    *perm = plan->have[layer] ? plan->perm + (size_t)(layer * plan->batch * plan->heads * plan->seq) : NULL;
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_plan_memory_bytes(const vcattn_plan *plan, size_t *bytes) {
    if (!plan || !bytes) return VCATTN_STATUS_NULL_POINTER;
    *bytes = sizeof *plan + (size_t)(plan->layers * plan->batch * plan->heads * plan->seq) * sizeof(int32_t) +
             (size_t)(plan->layers * plan->batch * plan->heads * plan->clusters * plan->head_dim) * sizeof(float) +
             (size_t)plan->layers;
    return VCATTN_STATUS_SUCCESS;
}

void vcattn_plan_destroy(vcattn_plan *plan) {
    if (!plan) return;
    free(plan->perm);
    free(plan->centroids);
    free(plan->have);
    free(plan);
}
