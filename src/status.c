/* status.c - status strings and the version. */
#include "vcattn.h"

const char *vcattn_status_string(vcattn_status status) {
    switch (status) {
    case VCATTN_STATUS_SUCCESS: return "success";
    case VCATTN_STATUS_NULL_POINTER: return "a required pointer is NULL";
    case VCATTN_STATUS_BAD_SHAPE: return "bad shape: a size (B, H, S or D) is <= 0, e.g. an empty tensor, or sizes do not agree";
    case VCATTN_STATUS_BAD_STRIDE: return "bad stride: negative, or rows would overlap";
    case VCATTN_STATUS_UNSUPPORTED_HEAD_DIM: return "unsupported head dimension (64 or 128)";
    case VCATTN_STATUS_SIZE_OVERFLOW: return "size overflow: the tensor is too large to index";
    case VCATTN_STATUS_NON_FINITE: return "input contains NaN or Inf (Q, K or V must be finite; find the non-finite one with isfinite)";
    case VCATTN_STATUS_INVALID_ARGUMENT: return "invalid argument: an enum, name or option out of range (e.g. num_threads beyond 0..1024, sm_scale not finite)";
    case VCATTN_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VCATTN_STATUS_IO_ERROR: return "file could not be opened, read or written";
    case VCATTN_STATUS_BAD_FILE_FORMAT: return "unsupported or malformed .npy file (vcattn_npy_load_ex says why)";
    case VCATTN_STATUS_UNSUPPORTED_DEVICE: return "no supported CUDA device (needs sm_90, Hopper)";
    case VCATTN_STATUS_CUDA_ERROR: return "a CUDA call failed";
    case VCATTN_STATUS_NOT_BUILT: return "this build of vcattn has no CUDA support";
    case VCATTN_STATUS_SCORE_OVERFLOW:
        return "the scaled scores overflow float32 (finite inputs, but q.k * sm_scale or its scale factors are too large for the FP32 pipeline, or for FP64 in the reference): scale Q, K or sm_scale down";
    case VCATTN_STATUS_OUTPUT_NOT_FINITE:
        return "the GPU kernel wrote a non-finite output for finite inputs (scores or value scales beyond its FP32 pipeline: Q or K scaled up by ~1e3 and more, subnormal V; docs/method.md): use the CPU path, or scale the inputs into range";
    case VCATTN_STATUS_COUNT: break;
    }
    return "unknown status";
}

const char *vcattn_version_string(void) { return "0.1.0"; }

