/* launch.cuh - the entry point of the preprocessing passes (preprocess/launch.cu),
 * called by api.cu: Q, K, V of BH heads -> the attention kernel's operands. */
#pragma once
#include <cuda_runtime.h>

#include "gpu_common.cuh"

cudaError_t vc_prep_launch(const vc_prep_args &a, int BH, int bf16, cudaStream_t s);
