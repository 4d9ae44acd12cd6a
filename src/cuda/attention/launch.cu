/* launch.cu - one attention call's kernels: the kernel built for the head's channels
 * (DH = 64 for a head_dim of 64 or fewer, whose codes' channels past 64 are zeros; DH = 128
 * otherwise), the method's P path, then the exact sibling's for the heads flagged exact. */
#include "attention/kernel.cuh"

static cudaError_t vc_attn_launch_path_dh(const vc_attn_args &a, const vc_tma_maps &maps, int BH, int dh, int pp,
                                          int out_bf16, cudaStream_t s) {
    return dh == 64 ? vc_attn_launch_path_64(a, maps, BH, pp, out_bf16, s)
                    : vc_attn_launch_path_128(a, maps, BH, pp, out_bf16, s);
}

/* The method's kernels, then (with per-head exact-P flags) the exact sibling's for the
 * flagged heads: the P path of a head is a launch choice, the kernels stay as they are. */
cudaError_t vc_attn_launch(const vc_attn_args &a, int BH, int pp, int exact_pp, int out_bf16, cudaStream_t s) {
    const int dh = a.D <= 64 ? 64 : VC_GPU_DPAD;
    vc_tma_maps maps;
    if (!vc_attn_make_maps(a, BH, dh, &maps)) return cudaErrorInvalidValue;
    vc_attn_args own = a;
    own.head_gate = 0u;
    cudaError_t e = vc_attn_launch_path_dh(own, maps, BH, dh, pp, out_bf16, s);
    if (e != cudaSuccess || !a.head_exact) return e;
    vc_attn_args exact = a;
    exact.head_gate = VC_HEAD_EXACT;
    return vc_attn_launch_path_dh(exact, maps, BH, dh, exact_pp, out_bf16, s);
}
