/* tma_encode.cuh - host side of TMA: the driver's cuTensorMapEncodeTiled, looked up once
 * through the runtime (no -lcuda at link time).  Used by the attention kernels' maps
 * (attention/maps.cuh) and the k-means V loads (grouping/kmeans.cu). */
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

static inline PFN_cuTensorMapEncodeTiled_v12000 vc_tma_encode_lookup(void) {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        return (PFN_cuTensorMapEncodeTiled_v12000)p;
    return nullptr;
}

/* The driver's entry point, looked up once: a function-local static with an
 * initializer is initialized exactly once even when threads race to it (C++11),
 * so concurrent first calls do not race on the cached pointer. */
static inline PFN_cuTensorMapEncodeTiled_v12000 vc_tma_encode_fn(void) {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = vc_tma_encode_lookup();
    return fn;
}
