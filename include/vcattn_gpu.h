/* vcattn_gpu.h - the GPU (CUDA, sm_90a) entry points of libvcattn.
 *
 * Plain C.  The lead will fold this into vcattn.h; until then include it
 * after vcattn.h (it includes it itself).
 *
 * One call = preprocessing (Q quantize; K smooth + gather + quantize;
 * V gather + block demean + per-channel E4M3 + transpose + FP16 means) and
 * the fused wgmma attention kernel, enqueued on the caller's stream.  Nothing
 * is allocated inside: the caller asks for the workspace size, allocates it
 * once (cudaMalloc) and reuses it.  Every failure is a vcattn_status; the
 * library never prints or exits.
 *
 * Methods: VCATTN_METHOD_SAGE2_8BIT, VCATTN_METHOD_VSMOOTH_8BIT,
 * VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT (the contract is the CPU simulation's,
 * vcattn_simulate_attention); anything else is INVALID_ARGUMENT.
 */
#ifndef VCATTN_GPU_H
#define VCATTN_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "vcattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vcattn_gpu_dtype {
    VCATTN_GPU_DTYPE_BF16 = 0,
    VCATTN_GPU_DTYPE_FP16
} vcattn_gpu_dtype;

/* All pointers are device pointers.  Strides are in elements for the
 * (batch, head, seq) axes; the head_dim axis must be contiguous.  A
 * (B, S, H, D) tensor is described by strides {S*H*D, D, H*D}.
 * Alignment: every row start must be 8-byte aligned (strides multiples of 4
 * elements, base pointers 8-byte aligned), else VCATTN_STATUS_BAD_STRIDE. */
typedef struct vcattn_gpu_params {
    int64_t batch, heads, seq_q, seq_kv, head_dim; /* head_dim 64 or 128 */
    vcattn_method method;
    double softmax_scale;          /* <= 0: 1/sqrt(head_dim) */
    vcattn_gpu_dtype input_dtype;  /* q, k, v */
    vcattn_gpu_dtype output_dtype; /* o */
    const void *q, *k, *v;
    void *o;
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    const int32_t *perm; /* optional (B, H, Skv) contiguous int32 permutation
                            (V-Smooth methods): permuted position j holds
                            original token perm[j]; NULL = identity */
    float *lse;          /* optional (B, H, Sq) contiguous FP32 natural-log LSE */
} vcattn_gpu_params;

/* Contiguous (B, H, S, D) strides for all four tensors, BF16 in and out,
 * method vsmooth-8bit, default scale, no permutation, no LSE. */
void vcattn_gpu_params_init(vcattn_gpu_params *p, int64_t batch, int64_t heads, int64_t seq_q,
                            int64_t seq_kv, int64_t head_dim, const void *q, const void *k,
                            const void *v, void *o);

/* Checks shapes, strides, alignment, method and pointers (not the data). */
vcattn_status vcattn_gpu_params_validate(const vcattn_gpu_params *p);

/* Bytes of device workspace vcattn_gpu_attention needs for these params. */
vcattn_status vcattn_gpu_workspace_size(const vcattn_gpu_params *p, size_t *bytes);

/* UNSUPPORTED_DEVICE unless the current device is compute capability 9.0. */
vcattn_status vcattn_gpu_device_check(void);

/* The full call: preprocessing + attention on `stream` (a cudaStream_t, NULL
 * for the default stream).  Asynchronous: errors of the kernels themselves
 * surface at the caller's next synchronization; launch errors are returned. */
vcattn_status vcattn_gpu_attention(const vcattn_gpu_params *p, void *workspace,
                                   size_t workspace_bytes, void *stream);

/* The two halves of vcattn_gpu_attention, for timing the kernel alone.
 * vcattn_gpu_attention_kernel reads only the workspace written by
 * vcattn_gpu_preprocess (and writes o, lse). */
vcattn_status vcattn_gpu_preprocess(const vcattn_gpu_params *p, void *workspace,
                                    size_t workspace_bytes, void *stream);
vcattn_status vcattn_gpu_attention_kernel(const vcattn_gpu_params *p, void *workspace,
                                          size_t workspace_bytes, void *stream);

/* Which attention kernel the calls use (process-wide, for benchmarks and
 * A/B checks): 1 = stage (a), cp.async + two warpgroups in lockstep;
 * 2 = warp-specialized TMA pipeline with ping-pong; 3 = the same with each
 * warpgroup folding block n-1 while its own S_n runs (the default). */
vcattn_status vcattn_gpu_set_kernel_version(int version);

/* Where the preprocessed operands live inside the workspace (byte offsets),
 * for tests that compare codes with a CPU implementation.  Layouts:
 *   q_codes  int8  (B*H, sq_pad, 128)        channels >= head_dim are 0
 *   q_scale  f32   (B*H, sq_pad/64, 32)      index blk*32 + warp*8 + lane/4
 *   k_codes  int8  (B*H, skv_pad, 128)       permuted order, zero past Skv
 *   k_scale  f32   (B*H, skv_pad/128, 4)
 *   k_mean   f32   (B*H, head_dim)
 *   v_codes  e4m3  (B*H, 128, skv_pad)       V^T; inside each 16 keys the
 *            physical position p holds key 16*(p/16) + {0,1,8,9,2,3,10,11,
 *            4,5,12,13,6,7,14,15}[p%16]
 *   v_scale  f32   (B*H, 128)
 *   v_mean   f32   (B*H, skv_pad/128, 128)  fp16_round(mu_b / v_scale) (V-Smooth only;
 *            FP16 values kept in FP32 words so the kernel needs no conversion) */
typedef struct vcattn_gpu_layout {
    int64_t sq_pad, skv_pad;
    size_t q_codes, q_scale, q_km, k_codes, k_scale, k_mean, k_partial, v_codes, v_scale,
        v_mean, v_block_mean, v_amax, total;
} vcattn_gpu_layout;

vcattn_status vcattn_gpu_workspace_layout(const vcattn_gpu_params *p, vcattn_gpu_layout *layout);

#ifdef __cplusplus
}
#endif
#endif /* VCATTN_GPU_H */
