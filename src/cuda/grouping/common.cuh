/* common.cuh - what the two GPU k-means paths share (internal to the library):
 * 16-bit value loads (the mma.sync and ldmatrix helpers: ptx/mma_sync.cuh), the seeded initial-centroid
 * token, the workspace layout and the host helpers.  The fused path (k <= 64) is
 * fused_*.cuh, launched by kmeans.cu with the public call; the k > 64 path is large_k.cu;
 * validation and the workspace layout are workspace.cu. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ptx/mma_sync.cuh"
#include "vcattn.h"

#define KM_TOKENS 1024      /* tokens per CTA of the k > 64 path (its tile of partial sums) */
#define KM_MAX_K 128

__device__ __forceinline__ float km_load_value(const void *base, int64_t off, int is_bf16) {
    uint16_t h = reinterpret_cast<const uint16_t *>(base)[off];
    return is_bf16 ? __uint_as_float((uint32_t)h << 16) : __half2float(__ushort_as_half(h));
}

/* ---- initial centroids: K distinct tokens, one drawn from each of K equal strides ---- */

__device__ __forceinline__ uint64_t km_mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The initial centroid c of head bh: one token drawn (seeded) from the c-th of
 * K equal strides of the sequence, or token c % S when S < K.  Returns its row. */
template <typename A>
__device__ __forceinline__ const void *km_init_row(const A &a, int bh, int c, uint64_t seed) {
    const int b = bh / a.H, h = bh % a.H;
    int64_t token;
    if (a.S >= a.K) {
        int64_t stride = a.S / a.K;
        token = (int64_t)c * stride + (int64_t)(km_mix(seed ^ km_mix((uint64_t)bh * 1315423911u + c)) % (uint64_t)stride);
    } else {
        token = c % a.S;
    }
    return reinterpret_cast<const char *>(a.v) + (b * a.vs0 + h * a.vs1 + token * a.vs2) * 2;
}

/* counting sort: tot[c] <- tot[0] + ... + tot[c-1], run by one thread (K <= 128) */
__device__ __forceinline__ void km_exclusive_scan(int *tot, int K) {
    int run = 0;
    for (int c = 0; c < K; ++c) {
        const int n = tot[c];
        tot[c] = run;
        run += n;
    }
}

/* ---- host side ---------------------------------------------------------------------------- */

typedef struct {
    int64_t bh, ntiles;
    int fused;          /* K <= 64: the persistent path */
    int64_t nsub, P;    /* fused: 128-token sub-tiles per (b, h), tiles per (b, h) */
    size_t cent, labels, part_sum, part_cnt, offsets, centb, cnorm, ctr, total;
} km_layout;

static inline vcattn_status km_cuda(cudaError_t e) {
    if (e == cudaSuccess) return VCATTN_STATUS_SUCCESS;
    return e == cudaErrorMemoryAllocation ? VCATTN_STATUS_OUT_OF_MEMORY : VCATTN_STATUS_CUDA_ERROR;
}

/* the fields both paths' kernel arguments take from the call: V, its strides, the shape */
template <typename A>
static inline void km_args_from_call(A &a, const vcattn_gpu_kmeans_params *p) {
    a.v = p->v;
    a.vs0 = p->v_stride[0];
    a.vs1 = p->v_stride[1];
    a.vs2 = p->v_stride[2];
    a.H = (int)p->heads;
    a.S = (int)p->seq;
    a.K = p->clusters;
    a.is_bf16 = p->dtype == VCATTN_GPU_DTYPE_BF16;
}

static inline int km_vec16(const vcattn_gpu_kmeans_params *p) {
    return ((uintptr_t)p->v % 16 == 0) && p->v_stride[0] % 8 == 0 && p->v_stride[1] % 8 == 0 && p->v_stride[2] % 8 == 0;
}

/* Checks a call and lays out its workspace in L (workspace.cu). */
vcattn_status vc_km_validate(const vcattn_gpu_kmeans_params *p, km_layout *L);

/* K > 64: one launch per step (large_k.cu).  L from vc_km_validate. */
vcattn_status vc_kmeans_large_k(const vcattn_gpu_kmeans_params *p, const km_layout &L, char *ws, cudaStream_t stream);
