/* api.cu - the C entry points of the GPU path (include/vcattn.h):
 * validation, the workspace layout, and the launch sequence. */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "exact_keys.h"
#include "gpu_common.cuh"
#include "lengths.h"
#include "numerics.h"
#include "preprocess/launch.cuh"
#include "vcattn.h"

cudaError_t vc_attn_launch(const vc_attn_args &a, int BH, int pp, int exact_pp, int out_bf16, cudaStream_t s);

static int64_t vc_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static size_t vc_align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* The call's P path (p_path.h): the method's, with V-Smooth off when asked; -1 for a method
 * without a kernel (method_list.h). */
static int vc_path_of(const vcattn_gpu_params *p) {
    vcattn_method_config cfg;
    if (!vcattn_method_has_kernel(p->method) || vcattn_method_config_get(p->method, &cfg)) return -1;
    if (p->v_smooth_off) cfg.v_smooth = 0;
    return VC_P_PATH_OF(cfg);
}

/* The call's exact keys per (batch, head) (src/exact_keys.h): none without V-Smooth. */
static int vc_exact_keys_of(const vcattn_gpu_params *p) {
    vcattn_method_config cfg;
    if (vcattn_method_config_get(p->method, &cfg)) return 0;
    return vc_exact_keys_count(cfg.exact_keys, cfg.v_smooth && !p->v_smooth_off, p->seq_kv);
}

/* The P path of vcattn_method_exact_p (the exp path against the same scale), -1 if none. */
static int vc_exact_path_of(vcattn_method m) {
    vcattn_method_config cfg, exact;
    if (vcattn_method_config_get(m, &cfg) || vcattn_method_exact_p(&cfg, &exact)) return -1;
    return VC_P_PATH_OF(exact);
}

extern "C" vcattn_status vcattn_gpu_params_validate(const vcattn_gpu_params *p) {
    if (!p) return VCATTN_STATUS_NULL_POINTER;
    if (p->batch <= 0 || p->heads <= 0 || p->seq_q <= 0 || p->seq_kv <= 0 || p->head_dim <= 0)
        return VCATTN_STATUS_BAD_SHAPE;
    if (p->head_dim != 64 && p->head_dim != 128) return VCATTN_STATUS_UNSUPPORTED_HEAD_DIM;
    /* grid.y = B*H, int32 token indices inside the kernels */
    if (p->batch * p->heads > 65535 || p->seq_q > (1 << 30) || p->seq_kv > (1 << 30)) return VCATTN_STATUS_BAD_SHAPE;
    if (vc_path_of(p) < 0) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->head_exact && (p->v_smooth_off || vc_exact_path_of(p->method) < 0)) return VCATTN_STATUS_INVALID_ARGUMENT;
    if (p->v_smooth_off && p->perm) return VCATTN_STATUS_INVALID_ARGUMENT;
    if ((unsigned)p->input_dtype > VCATTN_GPU_DTYPE_FP16 || (unsigned)p->output_dtype > VCATTN_GPU_DTYPE_FP16)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    if (!(p->softmax_scale <= 0.0) && !isfinite(p->softmax_scale)) return VCATTN_STATUS_INVALID_ARGUMENT;
    {
        /* The kernel holds sm_scale and c0 = sm_scale * log2(e) in FP32
         * (a.sm, a.c0): they must be finite floats.  The ExpCast modes also
         * evaluate the bracket as fma(a, M + s, fl(-a M + ...)) with
         * a = 8 c0 q_scale k_scale (softmax_numerics.h, VC_EXPCAST_MAGIC_MAX_A):
         * SageAttention's INT8 scales are >= 1e-7 each, so c0 > 2^-7 / (8e-14)
         * makes a > 2^-7 for every input and the codes wrong; refuse it. */
        const double sm = p->softmax_scale > 0.0 ? p->softmax_scale : 1.0 / sqrt((double)p->head_dim);
        const double c0 = sm * VC_GPU_LOG2E;
        if (sm > FLT_MAX || c0 > FLT_MAX) return VCATTN_STATUS_SCORE_OVERFLOW;
        const int expcast = VC_PP_EXPCAST_CODES(vc_path_of(p));
        if (expcast && c0 > 0.0078125 / (8.0 * 1e-7 * 1e-7)) return VCATTN_STATUS_SCORE_OVERFLOW;
        /* The exp path writes p = ex2(fma(s, c, -m)) with m = fl(s_max c): the row
         * max's argument is the rounding error of s_max c, up to 2^-24 |s_max c|
         * log2 units, and ex2 of it overflows once that passes ~128.  With
         * |s| >= 1 and c >= c0 1e-14, c0 > 2^24 / 1e-14 puts |s_max c| beyond 2^24
         * (an argument of ~1 and up) for every input with a nonzero score: refuse
         * (measured: sm_scale 1e30 gave NaN rows from vsmooth-8bit and sage2-8bit). */
        if (!expcast && c0 > 16777216.0 / (1e-7 * 1e-7)) return VCATTN_STATUS_SCORE_OVERFLOW;
    }
    vcattn_status s;
    if ((s = vc_check_view(p->q, p->q_stride, p->batch, p->heads, p->seq_q, p->head_dim))) return s;
    if ((s = vc_check_view(p->k, p->k_stride, p->batch, p->heads, p->seq_kv, p->head_dim))) return s;
    if ((s = vc_check_view(p->v, p->v_stride, p->batch, p->heads, p->seq_kv, p->head_dim))) return s;
    if ((s = vc_check_view(p->o, p->o_stride, p->batch, p->heads, p->seq_q, p->head_dim))) return s;
    return vc_lengths_validate(p->batch, p->seq_q, p->seq_kv, p->q_lens, p->kv_lens);
}

static int vc_has_lengths(const vcattn_gpu_params *p) { return p->q_lens || p->kv_lens; }

/* With valid lengths every batch element runs as its own (1, H, len_q, len_kv) problem, one
 * after another on the stream.  The workspace is then one output flag (shared: the call's
 * answer) followed by one region per batch element: the workspace of the (1, H, seq_q,
 * seq_kv) problem (a shorter element's fits in it), the element's contiguous permutation
 * and its contiguous LSE. */
typedef struct vc_len_regions {
    size_t base;   /* the first region (after the flag) */
    size_t stride; /* bytes per region */
    size_t perm;   /* offsets inside a region */
    size_t lse;
} vc_len_regions;

static vcattn_status vc_len_layout(const vcattn_gpu_params *p, vc_len_regions *R, vcattn_gpu_layout *sub_layout) {
    vcattn_gpu_params one = *p;
    one.batch = 1;
    one.q_lens = one.kv_lens = NULL;
    vcattn_status s = vcattn_gpu_workspace_layout(&one, sub_layout);
    if (s) return s;
    R->base = vc_align256(sizeof(unsigned));
    R->perm = sub_layout->total;
    R->lse = vc_align256(R->perm + (size_t)(p->heads * p->seq_kv) * sizeof(int32_t));
    R->stride = vc_align256(R->lse + (size_t)(p->heads * p->seq_q) * sizeof(float));
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_workspace_layout(const vcattn_gpu_params *p, vcattn_gpu_layout *L) {
    if (!L) return VCATTN_STATUS_NULL_POINTER;
    vcattn_status s = vcattn_gpu_params_validate(p);
    if (s) return s;
    if (vc_has_lengths(p)) {
        /* the offsets of batch element 0's operands (each element has its own region); the
         * output flag is the call's */
        vc_len_regions R;
        if ((s = vc_len_layout(p, &R, L))) return s;
        size_t *fields[] = {&L->q_codes, &L->q_scale, &L->q_km, &L->k_codes, &L->k_scale, &L->k_mean,
                            &L->k_partial, &L->v_codes, &L->v_scale, &L->v_mean, &L->v_block_mean,
                            &L->v_amax, &L->v_mean_tc, &L->direct_rows, &L->key_norm, &L->key_order,
                            &L->lse_q};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i) *fields[i] += R.base;
        L->output_flag = 0;
        L->total = R.base + (size_t)p->batch * R.stride;
        return VCATTN_STATUS_SUCCESS;
    }
    const size_t BH = (size_t)(p->batch * p->heads);
    const int n_exact = vc_exact_keys_of(p); /* the quantized pass runs the other keys */
    const int64_t sq_pad = vc_round_up(p->seq_q, VC_TILE_Q), skv_pad = vc_round_up(p->seq_kv - n_exact, VC_BLOCK_K);
    const size_t nkb = (size_t)(skv_pad / VC_BLOCK_K);
    const size_t nchunk = (size_t)((p->seq_kv + VC_GPU_KMEAN_CHUNK - 1) / VC_GPU_KMEAN_CHUNK);
    memset(L, 0, sizeof *L);
    L->sq_pad = sq_pad;
    L->skv_pad = skv_pad;
    L->exact_keys = n_exact;
    size_t off = 0;
#define VC_CARVE(field, bytes) do { L->field = off; off = vc_align256(off + (bytes)); } while (0)
    VC_CARVE(q_codes, BH * (size_t)sq_pad * VC_GPU_DPAD);
    VC_CARVE(q_scale, BH * (size_t)(sq_pad / 64) * 32 * sizeof(float));
    VC_CARVE(q_km, BH * (size_t)p->seq_q * sizeof(float));
    VC_CARVE(k_codes, BH * (size_t)skv_pad * VC_GPU_DPAD);
    VC_CARVE(k_scale, BH * nkb * 4 * sizeof(float));
    VC_CARVE(k_mean, BH * VC_GPU_DPAD * sizeof(float));
    VC_CARVE(k_partial, BH * nchunk * VC_GPU_DPAD * sizeof(double));
    VC_CARVE(v_codes, BH * VC_GPU_DPAD * (size_t)skv_pad);
    VC_CARVE(v_scale, BH * VC_GPU_DPAD * sizeof(float));
    VC_CARVE(v_mean, BH * nkb * VC_GPU_DPAD * sizeof(float));
    VC_CARVE(v_block_mean, BH * nkb * VC_GPU_DPAD * sizeof(float));
    VC_CARVE(v_amax, BH * 2 * VC_GPU_DPAD * sizeof(float));
    /* per group of 8 blocks 2 x 128 x 16 B (attention/restore.cuh) */
    VC_CARVE(v_mean_tc, BH * (size_t)(2 * ((nkb + 7) / 8)) * VC_GPU_DPAD * 16);
    VC_CARVE(output_flag, sizeof(unsigned));
    VC_CARVE(direct_rows, BH * (size_t)(sq_pad / 64) * sizeof(unsigned));
    if (n_exact) {
        VC_CARVE(key_norm, BH * (size_t)p->seq_kv * sizeof(float));
        VC_CARVE(key_order, BH * (size_t)p->seq_kv * sizeof(int32_t));
        VC_CARVE(lse_q, BH * (size_t)p->seq_q * sizeof(float));
    }
#undef VC_CARVE
    L->total = off;
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_workspace_size(const vcattn_gpu_params *p, size_t *bytes) {
    if (!bytes) return VCATTN_STATUS_NULL_POINTER;
    vcattn_gpu_layout L;
    vcattn_status s = vcattn_gpu_workspace_layout(p, &L);
    if (s) return s;
    *bytes = L.total;
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_device_check(void) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return VCATTN_STATUS_UNSUPPORTED_DEVICE;
    }
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        return VCATTN_STATUS_UNSUPPORTED_DEVICE;
    }
    return (major == 9 && minor == 0) ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_UNSUPPORTED_DEVICE;
}

static vcattn_status vc_begin(const vcattn_gpu_params *p, void *ws, size_t ws_bytes, vcattn_gpu_layout *L) {
    vcattn_status s = vcattn_gpu_workspace_layout(p, L);
    if (s) return s;
    if (!ws) return VCATTN_STATUS_NULL_POINTER;
    if (ws_bytes < L->total || (uintptr_t)ws % 256) return VCATTN_STATUS_INVALID_ARGUMENT;
    return vcattn_gpu_device_check();
}

static double vc_sm(const vcattn_gpu_params *p) {
    return p->softmax_scale > 0.0 ? p->softmax_scale : 1.0 / sqrt((double)p->head_dim);
}

/* The kernels' score scale in log2 units (vc_attn_args.c0): one rounding, shared by the
 * attention kernel, the exact keys' merge and the DIRECT-head test, which must agree on it. */
static float vc_c0(const vcattn_gpu_params *p) { return (float)(vc_sm(p) * VC_GPU_LOG2E); }

/* Where the attention kernel writes the LSE: the caller's, or with exact keys (whose merge
 * reads it) the workspace's when the caller asks none; NULL = no LSE (nor q . mean). */
static float *vc_lse_out(const vcattn_gpu_params *p, const uint8_t *w, const vcattn_gpu_layout &L) {
    return p->lse ? p->lse : L.exact_keys ? (float *)(w + L.lse_q) : NULL;
}

/* The inputs Q, K, V and their strides, as every kernel's arguments hold them. */
template <typename Args> static void vc_copy_inputs(Args &a, const vcattn_gpu_params *p) {
    a.q = p->q;
    a.k = p->k;
    a.v = p->v;
    memcpy(a.q_stride, p->q_stride, sizeof a.q_stride);
    memcpy(a.k_stride, p->k_stride, sizeof a.k_stride);
    memcpy(a.v_stride, p->v_stride, sizeof a.v_stride);
}

/* The exact keys' kernels' arguments of one problem (L.exact_keys > 0); the output flag is
 * the merge's to set (the call's, which with valid lengths is not the problem's region's). */
static vc_exact_args vc_exact_args_of(const vcattn_gpu_params *p, uint8_t *w, const vcattn_gpu_layout &L) {
    vc_exact_args x;
    memset(&x, 0, sizeof x);
    vc_copy_inputs(x, p);
    x.o = p->o;
    memcpy(x.o_stride, p->o_stride, sizeof x.o_stride);
    x.perm = p->perm;
    x.order = (int32_t *)(w + L.key_order);
    x.norm = (float *)(w + L.key_norm);
    x.lse = vc_lse_out(p, w, L);
    x.H = (int)p->heads;
    x.S = (int)p->seq_kv;
    x.Sq = (int)p->seq_q;
    x.D = (int)p->head_dim;
    x.n = (int)L.exact_keys;
    x.c0 = vc_c0(p);
    return x;
}

/* One problem's preprocessing into workspace w laid out as L (the flag is not touched). */
static vcattn_status vc_preprocess_one(const vcattn_gpu_params *p, uint8_t *w, const vcattn_gpu_layout &L,
                                       cudaStream_t stream) {
    const int pp = vc_path_of(p);
    vc_prep_args a;
    memset(&a, 0, sizeof a);
    vc_copy_inputs(a, p);
    a.v_smooth = VC_PP_V_SMOOTH(pp);
    a.perm = a.v_smooth ? p->perm : NULL; /* sage2 ignores the plan, as the simulation does */
    a.perm_stride = p->seq_kv;
    a.H = (int)p->heads;
    a.Sq = (int)p->seq_q;
    a.Skv = (int)(p->seq_kv - L.exact_keys);
    a.Sk_all = (int)p->seq_kv;
    a.D = (int)p->head_dim;
    a.sq_pad = (int)L.sq_pad;
    a.skv_pad = (int)L.skv_pad;
    a.nkb = (int)(L.skv_pad / VC_BLOCK_K);
    a.nchunk = (int)((p->seq_kv + VC_GPU_KMEAN_CHUNK - 1) / VC_GPU_KMEAN_CHUNK);
    a.sm = (float)vc_sm(p);
    a.q_codes = (int8_t *)(w + L.q_codes);
    a.q_scale = (float *)(w + L.q_scale);
    a.q_km = vc_lse_out(p, w, L) ? (float *)(w + L.q_km) : NULL; /* the LSE's q . mean */
    a.k_codes = (int8_t *)(w + L.k_codes);
    a.k_scale = (float *)(w + L.k_scale);
    a.k_mean = (float *)(w + L.k_mean);
    a.k_partial = (double *)(w + L.k_partial);
    a.v_codes = w + L.v_codes;
    a.v_scale = (float *)(w + L.v_scale);
    a.v_mean = (float *)(w + L.v_mean);
    a.v_mean_tc = (uint4 *)(w + L.v_mean_tc);
    a.v_block_mean = (float *)(w + L.v_block_mean);
    a.v_amax = (float *)(w + L.v_amax);
    const int bf16 = p->input_dtype == VCATTN_GPU_DTYPE_BF16;
    if (L.exact_keys) {
        /* the order with the exact keys at its end; the quantized pass reads it */
        vc_exact_args x = vc_exact_args_of(p, w, L);
        if (vc_exact_order_launch(x, (int)(p->batch * p->heads), bf16, stream) != cudaSuccess)
            return VCATTN_STATUS_CUDA_ERROR;
        a.perm = x.order;
    }
    cudaError_t e = vc_prep_launch(a, (int)(p->batch * p->heads), bf16, stream);
    /* which tiles need the DIRECT kernel: a function of the scales, so here, not in the kernel
     * half (which then writes nothing a concurrent run on this workspace reads) */
    if (e == cudaSuccess)
        e = vc_direct_rows_launch(a.q_scale, a.k_scale, a.sq_pad, a.nkb, vc_c0(p), (unsigned *)(w + L.direct_rows),
                                   (int)(p->batch * p->heads), stream);
    return e == cudaSuccess ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_CUDA_ERROR;
}

/* Batch element b's own problem (with valid lengths): batch 1, its valid rows and keys, views
 * into p's tensors; its permutation and LSE in its workspace region (contiguous (1, H, len)),
 * the region's layout.  lq = 0: nothing to run (no valid row, or no key). */
typedef struct vc_batch_problem {
    int64_t lq, lk;
    uint8_t *region;
    vcattn_gpu_params p;
    vcattn_gpu_layout L;
} vc_batch_problem;

static vcattn_status vc_batch_at(const vcattn_gpu_params *p, int64_t b, uint8_t *w, const vc_len_regions &R,
                                 vc_batch_problem *e) {
    const int64_t esz = 2; /* BF16 / FP16 */
    e->lk = vc_kv_len(p->kv_lens, p->seq_kv, b);
    e->lq = vc_q_len(p->q_lens, p->kv_lens, p->seq_q, p->seq_kv, b);
    if (e->lq == 0) return VCATTN_STATUS_SUCCESS;
    e->region = w + R.base + (size_t)b * R.stride;
    vcattn_gpu_params &one = e->p;
    one = *p;
    one.batch = 1;
    one.seq_q = e->lq;
    one.seq_kv = e->lk;
    one.q = (const uint8_t *)p->q + b * p->q_stride[0] * esz;
    one.k = (const uint8_t *)p->k + b * p->k_stride[0] * esz;
    one.v = (const uint8_t *)p->v + b * p->v_stride[0] * esz;
    one.o = (uint8_t *)p->o + b * p->o_stride[0] * esz;
    one.perm = p->perm ? (const int32_t *)(e->region + R.perm) : NULL;
    one.lse = p->lse ? (float *)(e->region + R.lse) : NULL;
    one.head_exact = p->head_exact ? p->head_exact + b * p->heads : NULL;
    one.q_lens = one.kv_lens = NULL;
    return vcattn_gpu_workspace_layout(&one, &e->L);
}

/* The preprocessing of validated params p over workspace ws laid out as L. */
static vcattn_status vc_preprocess(const vcattn_gpu_params *p, void *ws, const vcattn_gpu_layout &L, void *stream) {
    vcattn_status s;
    uint8_t *w = (uint8_t *)ws;
    cudaStream_t st = (cudaStream_t)stream;
    /* the kernel's non-finite-output flag, fresh for this call (same stream: ordered) */
    if (cudaMemsetAsync(w + L.output_flag, 0, sizeof(unsigned), st) != cudaSuccess) return VCATTN_STATUS_CUDA_ERROR;
    if (!vc_has_lengths(p)) return vc_preprocess_one(p, w, L, st);
    vc_len_regions R;
    vcattn_gpu_layout one_layout;
    if ((s = vc_len_layout(p, &R, &one_layout))) return s;
    for (int64_t b = 0; b < p->batch; ++b) {
        vc_batch_problem e;
        if ((s = vc_batch_at(p, b, w, R, &e))) return s;
        if (e.lq == 0) continue;
        /* the element's permutation: the first lk entries of each head, packed */
        if (p->perm && cudaMemcpy2DAsync(e.region + R.perm, (size_t)e.lk * 4, p->perm + b * p->heads * p->seq_kv,
                                         (size_t)p->seq_kv * 4, (size_t)e.lk * 4, (size_t)p->heads,
                                         cudaMemcpyDeviceToDevice, st) != cudaSuccess)
            return VCATTN_STATUS_CUDA_ERROR;
        if ((s = vc_preprocess_one(&e.p, e.region, e.L, st))) return s;
    }
    return VCATTN_STATUS_SUCCESS;
}

/* One problem's attention kernel over workspace w laid out as L, non-finite rows flagged in *flag. */
static vcattn_status vc_kernel_one(const vcattn_gpu_params *p, const uint8_t *w, const vcattn_gpu_layout &L,
                                   unsigned *flag, cudaStream_t stream) {
    vc_attn_args a;
    memset(&a, 0, sizeof a);
    a.q_codes = (const int8_t *)(w + L.q_codes);
    a.q_scale = (const float *)(w + L.q_scale);
    a.q_km = vc_lse_out(p, w, L) ? (const float *)(w + L.q_km) : NULL;
    a.k_codes = (const int8_t *)(w + L.k_codes);
    a.k_scale = (const float *)(w + L.k_scale);
    a.v_codes = w + L.v_codes;
    a.v_scale = (const float *)(w + L.v_scale);
    a.v_mean = (const float *)(w + L.v_mean);
    a.v_mean_tc = (const uint4 *)(w + L.v_mean_tc);
    a.o = p->o;
    memcpy(a.o_stride, p->o_stride, sizeof a.o_stride);
    a.lse = vc_lse_out(p, w, L);
    a.H = (int)p->heads;
    a.Sq = (int)p->seq_q;
    a.Skv = (int)(p->seq_kv - L.exact_keys);
    a.D = (int)p->head_dim;
    a.sq_pad = (int)L.sq_pad;
    a.skv_pad = (int)L.skv_pad;
    a.nkb = (int)(L.skv_pad / VC_BLOCK_K);
    a.c0 = vc_c0(p);
    a.bm_descent = vc_blockmax_descent(a.nkb);
    a.output_flag = flag;
    a.direct_rows = (const unsigned *)(w + L.direct_rows);
    a.head_exact = p->head_exact;
    const int BH = (int)(p->batch * p->heads);
    const int bf16 = p->output_dtype == VCATTN_GPU_DTYPE_BF16;
    cudaError_t e = vc_attn_launch(a, BH, vc_path_of(p), vc_exact_path_of(p->method), bf16, stream);
    if (e == cudaSuccess && L.exact_keys) {
        vc_exact_args x = vc_exact_args_of(p, (uint8_t *)w, L);
        x.output_flag = flag;
        e = vc_exact_merge_launch(x, BH, p->input_dtype == VCATTN_GPU_DTYPE_BF16, bf16, stream);
    }
    return e == cudaSuccess ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_CUDA_ERROR;
}

/* lse[h * pitch + i] = -inf for i < n, one block per head (the LSE of rows without a key;
 * a kernel: the driver API's 32-bit memset would tie the library to libcuda) */
__global__ void vc_fill_neg_inf(float *lse, int64_t pitch, int64_t n) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) lse[blockIdx.x * pitch + i] = -INFINITY;
}

/* Rows lq..Sq of batch element b: zeros, LSE -inf (no valid key for them). */
static vcattn_status vc_clear_rows(const vcattn_gpu_params *p, int64_t b, int64_t lq, cudaStream_t stream) {
    const int64_t esz = 2, n = p->seq_q - lq;
    const size_t width = (size_t)(p->head_dim * esz);
    const size_t pitch = n > 1 ? (size_t)(p->o_stride[2] * esz) : width;
    for (int64_t h = 0; h < p->heads; ++h) {
        uint8_t *o = (uint8_t *)p->o + (b * p->o_stride[0] + h * p->o_stride[1] + lq * p->o_stride[2]) * esz;
        if (cudaMemset2DAsync(o, pitch, 0, width, (size_t)n, stream) != cudaSuccess) return VCATTN_STATUS_CUDA_ERROR;
    }
    if (p->lse) {
        vc_fill_neg_inf<<<(unsigned)p->heads, 256, 0, stream>>>(p->lse + (b * p->heads) * p->seq_q + lq, p->seq_q, n);
        if (cudaGetLastError() != cudaSuccess) return VCATTN_STATUS_CUDA_ERROR;
    }
    return VCATTN_STATUS_SUCCESS;
}

/* The attention kernels of validated params p over workspace ws laid out as L. */
static vcattn_status vc_attention(const vcattn_gpu_params *p, void *ws, const vcattn_gpu_layout &L, void *stream) {
    vcattn_status s;
    uint8_t *w = (uint8_t *)ws;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned *flag = (unsigned *)(w + L.output_flag);
    if (!vc_has_lengths(p)) return vc_kernel_one(p, w, L, flag, st);
    vc_len_regions R;
    vcattn_gpu_layout one_layout;
    if ((s = vc_len_layout(p, &R, &one_layout))) return s;
    for (int64_t b = 0; b < p->batch; ++b) {
        vc_batch_problem e;
        if ((s = vc_batch_at(p, b, w, R, &e))) return s;
        if (e.lq > 0) {
            if ((s = vc_kernel_one(&e.p, e.region, e.L, flag, st))) return s;
            /* the element's LSE rows into the caller's (B, H, Sq) */
            if (p->lse && cudaMemcpy2DAsync(p->lse + b * p->heads * p->seq_q, (size_t)p->seq_q * 4, e.region + R.lse,
                                            (size_t)e.lq * 4, (size_t)e.lq * 4, (size_t)p->heads,
                                            cudaMemcpyDeviceToDevice, st) != cudaSuccess)
                return VCATTN_STATUS_CUDA_ERROR;
        }
        if (e.lq < p->seq_q && (s = vc_clear_rows(p, b, e.lq, st))) return s;
    }
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_output_status(const vcattn_gpu_params *p, const void *ws, size_t ws_bytes,
                                                  void *stream) {
    vcattn_gpu_layout L;
    vcattn_status s = vc_begin(p, (void *)ws, ws_bytes, &L);
    if (s) return s;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &cap) != cudaSuccess) {
        cudaGetLastError();
        return VCATTN_STATUS_CUDA_ERROR;
    }
    if (cap != cudaStreamCaptureStatusNone) return VCATTN_STATUS_INVALID_ARGUMENT; /* it must synchronize */
    unsigned flag = 0;
    if (cudaMemcpyAsync(&flag, (const uint8_t *)ws + L.output_flag, sizeof flag, cudaMemcpyDeviceToHost,
                        (cudaStream_t)stream) != cudaSuccess ||
        cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess) {
        cudaGetLastError();
        return VCATTN_STATUS_CUDA_ERROR;
    }
    return flag ? VCATTN_STATUS_OUTPUT_NOT_FINITE : VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_preprocess(const vcattn_gpu_params *p, void *ws, size_t ws_bytes, void *stream) {
    vcattn_gpu_layout L;
    vcattn_status s = vc_begin(p, ws, ws_bytes, &L);
    return s ? s : vc_preprocess(p, ws, L, stream);
}

extern "C" vcattn_status vcattn_gpu_attention_kernel(const vcattn_gpu_params *p, void *ws, size_t ws_bytes,
                                                     void *stream) {
    vcattn_gpu_layout L;
    vcattn_status s = vc_begin(p, ws, ws_bytes, &L);
    return s ? s : vc_attention(p, ws, L, stream);
}

/* the params checked once for both halves */
extern "C" vcattn_status vcattn_gpu_attention(const vcattn_gpu_params *p, void *ws, size_t ws_bytes, void *stream) {
    vcattn_gpu_layout L;
    vcattn_status s = vc_begin(p, ws, ws_bytes, &L);
    if (s) return s;
    if ((s = vc_preprocess(p, ws, L, stream))) return s;
    return vc_attention(p, ws, L, stream);
}
