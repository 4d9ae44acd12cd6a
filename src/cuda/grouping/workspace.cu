/* workspace.cu - validation of a vcattn_gpu_kmeans call and the layout of its
 * workspace (both paths), vcattn_gpu_kmeans_workspace_size. */
#include <cuda_bf16.h>

#include "grouping/common.cuh"
#include "grouping/fused_args.cuh"

static size_t km_align(size_t x) { return (x + 255) & ~(size_t)255; }

vcattn_status vc_km_validate(const vcattn_gpu_kmeans_params *p, km_layout *L) {
    if (!p) return VCATTN_STATUS_NULL_POINTER;
    if (!p->v || !p->perm || !p->centroids) return VCATTN_STATUS_NULL_POINTER;
    if (p->batch <= 0 || p->heads <= 0 || p->seq <= 0) return VCATTN_STATUS_BAD_SHAPE;
    if (p->head_dim != 64 && p->head_dim != 128) return VCATTN_STATUS_UNSUPPORTED_HEAD_DIM;
    if (p->clusters < 16 || p->clusters > KM_MAX_K || p->clusters % 16 != 0 || p->iterations < 0)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->dtype != VCATTN_GPU_DTYPE_BF16 && p->dtype != VCATTN_GPU_DTYPE_FP16) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->seq > INT32_MAX / 2 || p->batch * p->heads > 65535) return VCATTN_STATUS_SIZE_OVERFLOW;
    for (int i = 0; i < 3; ++i)
        if (p->v_stride[i] < 0) return VCATTN_STATUS_BAD_STRIDE;
    if (p->seq > 1 && p->v_stride[2] < p->head_dim && p->v_stride[1] < p->head_dim) return VCATTN_STATUS_BAD_STRIDE;
    L->bh = p->batch * p->heads;
    L->fused = p->clusters <= VC_KM_FUSED_K;
    L->nsub = (p->seq + VC_KM_SUB - 1) / VC_KM_SUB;
    {
        const int64_t spi = vc_km_subs_per_item(L->bh, L->nsub);
        L->P = (L->nsub + spi - 1) / spi;
    }
    L->ntiles = L->fused ? L->P : (p->seq + KM_TOKENS - 1) / KM_TOKENS;
    if (L->fused && L->bh * L->P > INT32_MAX / 4) return VCATTN_STATUS_SIZE_OVERFLOW;
    size_t o = 0;
    L->cent = o;     o += km_align((size_t)L->bh * p->clusters * p->head_dim * sizeof(float));
    L->labels = o;   o += km_align((size_t)L->bh * p->seq * sizeof(int32_t));
    L->part_sum = o; o += km_align((size_t)L->bh * L->ntiles * p->clusters * p->head_dim * sizeof(float));
    L->part_cnt = o; o += km_align((size_t)L->bh * L->ntiles * p->clusters * sizeof(int));
    L->offsets = o;  o += km_align((size_t)L->bh * L->ntiles * p->clusters * sizeof(int));
    L->centb = o;    o += km_align((size_t)L->bh * p->clusters * p->head_dim * sizeof(__nv_bfloat16));
    L->cnorm = o;    o += km_align((size_t)L->bh * p->clusters * sizeof(float));
    L->ctr = o;      o += km_align(sizeof(unsigned long long) + 2 * (size_t)L->bh * sizeof(int));
    L->total = o;
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_kmeans_workspace_size(const vcattn_gpu_kmeans_params *p, size_t *bytes) {
    if (!bytes) return VCATTN_STATUS_NULL_POINTER;
    km_layout L;
    vcattn_status st = vc_km_validate(p, &L);
    if (st) return st;
    *bytes = L.total;
    return VCATTN_STATUS_SUCCESS;
}
