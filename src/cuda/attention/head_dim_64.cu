/* head_dim_64.cu - the attention kernel built for DH = 64 channels, every P path of
 * method_list.h (kernel.cuh).  One translation unit per DH so that the two builds compile
 * side by side. */
#include "attention/kernel.cuh"

cudaError_t vc_attn_launch_path_64(const vc_attn_args &a, const vc_tma_maps &maps, int BH, int pp, int out_bf16,
                                    cudaStream_t s) {
    return vc_attn_launch_path<64>(a, maps, BH, pp, out_bf16, s);
}
