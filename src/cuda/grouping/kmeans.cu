/* kmeans.cu - V-Smooth grouping on the GPU (host side): k-means over the value
 * tokens of every (batch, head) at once, and the permutation by a stable counting
 * sort; vcattn_gpu_kmeans dispatches to one of two paths.
 *
 * Two paths, the same algorithm (Lloyd iterations from the same initial centroids,
 * distances |c|^2 - 2 v.c from BF16 operands in FP32, argmin with ties to the lowest
 * index, new centroid = mean of its tokens in double, an empty cluster keeps its
 * centroid, final labels against the returned centroids, perm = stable argsort):
 *
 * K <= 64 (the default k = 64): the fused path (fused_kernels.cuh), one persistent
 *   launch for all iterations, the final labelling and the scatter (after a small
 *   init launch); both products by wgmma (sm_90a).
 * K > 64: large_k.cu, one iteration = two launches,
 *   mma.sync products.
 * Shared helpers: common.cuh; validation and the workspace layout: workspace.cu.
 *
 * V is read as BF16/FP16 (FP16 is rounded to BF16 for the product); the
 * centroids are kept in FP32 and rounded to BF16 for the product only.  No float
 * atomics anywhere: the result is bitwise reproducible for a given input.
 */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "grouping/common.cuh"
#include "grouping/fused_args.cuh"
#include "grouping/fused_kernels.cuh"
#include "tma_encode.cuh"

/* The V map of the fused path: dims (channels, tokens, heads, batch) with the caller's
 * strides, box 64 channels x 128 tokens, 128B swizzle, zero fill past S.  false (-> the
 * 2-byte load path) when V is not 16-byte aligned or the driver refuses the map. */
static bool vc_km_make_vmap(const vcattn_gpu_kmeans_params *p, CUtensorMap *m) {
    PFN_cuTensorMapEncodeTiled_v12000 fn = vc_tma_encode_fn();
    if (!fn || !km_vec16(p)) return false;
    cuuint64_t dims[4] = {(cuuint64_t)p->head_dim, (cuuint64_t)p->seq, (cuuint64_t)p->heads, (cuuint64_t)p->batch};
    cuuint64_t strides[3] = {(cuuint64_t)p->v_stride[2] * 2, (cuuint64_t)p->v_stride[1] * 2,
                             (cuuint64_t)p->v_stride[0] * 2};
    cuuint32_t box[4] = {64, VC_KM_SUB, 1, 1}, estr[4] = {1, 1, 1, 1};
    return fn(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void *>(p->v), dims, strides, box, estr,
              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D, bool FULL>
static vcattn_status vc_km_launch_fused(const vc_km_fused_args &a, const CUtensorMap &vmap, cudaStream_t stream) {
    const size_t smem = vc_km_smem<D>::TOTAL;
    vcattn_status st;
    if ((st = km_cuda(cudaFuncSetAttribute(vc_km_fused<D, FULL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))))
        return st;
    int dev = 0, sms = 0, per_sm = 0;
    if ((st = km_cuda(cudaGetDevice(&dev))) || (st = km_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))) ||
        (st = km_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vc_km_fused<D, FULL>, VC_KM_THREADS, smem))))
        return st;
    if (per_sm < 1) return VCATTN_STATUS_CUDA_ERROR;
    long long grid = (long long)sms * per_sm;
    if (grid > a.total) grid = a.total;
    vc_km_fused<D, FULL><<<(unsigned)grid, VC_KM_THREADS, smem, stream>>>(a, vmap);
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_kmeans(const vcattn_gpu_kmeans_params *p, void *workspace,
                                           size_t workspace_bytes, void *stream_ptr) {
    km_layout L;
    vcattn_status st = vc_km_validate(p, &L);
    if (st) return st;
    if (!workspace) return VCATTN_STATUS_NULL_POINTER;
    /* the partial sums are read as float4 and dropped from L2 in 128-byte lines */
    if (workspace_bytes < L.total || (uintptr_t)workspace % 256) return VCATTN_STATUS_INVALID_ARGUMENT;
    if ((st = vcattn_gpu_device_check())) return st;
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    char *ws = (char *)workspace;
    float *cent = (float *)(ws + L.cent);
    const int K = p->clusters, D = (int)p->head_dim;

    if (!L.fused) {
        st = vc_kmeans_large_k(p, L, ws, stream);
    } else {
        vc_km_fused_args a;
        km_args_from_call(a, p);
        a.BH = (int)L.bh;
        a.P = (int)L.P;
        a.nsub = (int)L.nsub;
        a.iters = p->iterations;
        CUtensorMap vmap;
        memset(&vmap, 0, sizeof vmap);
        a.tma = vc_km_make_vmap(p, &vmap);
        a.total = ((long long)p->iterations + 2) * L.bh * L.P;
        a.cent = cent;
        a.centb = (__nv_bfloat16 *)(ws + L.centb);
        a.cnorm = (float *)(ws + L.cnorm);
        a.part_sum = (float *)(ws + L.part_sum);
        a.part_cnt = (int *)(ws + L.part_cnt);
        a.offsets = (int *)(ws + L.offsets);
        a.labels = p->labels ? p->labels : (int32_t *)(ws + L.labels);
        a.perm = p->perm;
        a.next = (unsigned long long *)(ws + L.ctr);
        a.done = (int *)(ws + L.ctr + sizeof(unsigned long long));
        a.ready = a.done + L.bh;
        vc_km_fused_init<<<dim3(K, (unsigned)L.bh), 128, 0, stream>>>(a, D, p->init_centroids, p->seed);
        if (D == 128)
            st = K == VC_KM_FUSED_K ? vc_km_launch_fused<128, true>(a, vmap, stream) : vc_km_launch_fused<128, false>(a, vmap, stream);
        else
            st = K == VC_KM_FUSED_K ? vc_km_launch_fused<64, true>(a, vmap, stream) : vc_km_launch_fused<64, false>(a, vmap, stream);
    }
    if (st) return st;
    size_t cent_bytes = (size_t)L.bh * K * D * sizeof(float);
    if (p->centroids != cent)
        st = km_cuda(cudaMemcpyAsync(p->centroids, cent, cent_bytes, cudaMemcpyDeviceToDevice, stream));
    if (st) return st;
    return km_cuda(cudaGetLastError());
}
