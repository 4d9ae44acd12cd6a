/* reference_rows.cu - FP32-accurate attention of a few query rows against every key, on the
 * tensor cores (include/vcattn.h, vcattn_gpu_reference_rows): the per-head policy's reference,
 * which judges each recipe on a few hundred sampled rows.
 *
 * Why it is accurate with BF16 tensor cores: the inputs are BF16, so each product of Q K^T is
 * exact in FP32 and the scores are FP32 sums; the softmax runs in FP32 (expf); P goes into the
 * P V product in two BF16 parts, hi = bf16(p) and lo = bf16(p - hi), whose sum is p to ~2^-17
 * relative, and both products accumulate in FP32 - in the tensor core for one 64-key block
 * (its FP32 additions truncate: one accumulator over a whole split of 75,600 keys drifted to
 * 2e-4, docs/kernel-log.md), then into O by FFMA - in one pass over K and V instead of the
 * (rows x keys) FP32 score matrices a framework materializes (several passes over memory each).
 *
 *   vc_reference_rows_part  a CTA = 4 warps x 16 rows; 64-key blocks of K and V in shared
 *                           memory, two stages filled by cp.async (the next block's copies run
 *                           under this one's products); mma.sync m16n8k16 (BF16 -> FP32)
 *                           with K's and V's fragments by ldmatrix; the online softmax in
 *                           FP32; a split of the keys per blockIdx.z writes its unnormalized
 *                           O, row max and row sum;
 *   vc_reference_rows_merge the splits' parts into O (one thread per output element).
 * Splits are a function of the shape alone (enough CTAs to fill the GPU), so the result does
 * not depend on the device. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gpu_common.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/mma_sync.cuh"

#define VC_REF_ROWS 64      /* query rows per CTA: 4 warps x 16 */
#define VC_REF_KEYS 64      /* keys per shared-memory block */
#define VC_REF_THREADS 128
#define VC_REF_TARGET_CTAS 1584 /* about four waves of three CTAs (shared memory's limit) per SM
                                   * on a 132-SM Hopper part: one CTA's chain of blocks is
                                   * latency-bound, so the SMs need several */
#define VC_REF_MIN_KEYS 1024   /* keys per split at least */
#define VC_REF_MAX_SPLITS 64

struct vc_ref_args {
    const __nv_bfloat16 *q, *k, *v;
    int64_t q_stride[3], k_stride[3], v_stride[3];
    float *o_part; /* (splits, BH, rows, D) unnormalized */
    float *m_part, *l_part; /* (splits, BH, rows) row max (scaled scores), row sum */
    float *o;      /* (BH, rows, D) */
    int H, rows, skv, keys_per_split, splits;
    float scale;
};

/* A stage of shared memory: 64 keys of K and of V in rows of D + 8 elements (the 4-byte
 * fragment loads of the 8 row groups of a warp fall on distinct banks).  Two stages: the next
 * block's copies (cp.async) run under this block's products. */
template <int D>
struct vc_ref_stage {
    __nv_bfloat16 k[VC_REF_KEYS][D + 8];
    __nv_bfloat16 v[VC_REF_KEYS][D + 8];
};

template <int D>
constexpr int vc_ref_smem_bytes() {
    return 2 * (int)sizeof(vc_ref_stage<D>);
}

/* Block kb's K and V rows into a stage, 8 bytes a copy (rows are 8-byte aligned); keys past
 * the split's end are zeros (their scores are masked, and V must not be NaN garbage). */
template <int D>
__device__ __forceinline__ void vc_ref_load(vc_ref_stage<D> &st, const __nv_bfloat16 *kg, const __nv_bfloat16 *vg,
                                            const vc_ref_args &a, int kb, int k_end) {
    for (int i = threadIdx.x; i < VC_REF_KEYS * (D / 4); i += VC_REF_THREADS) {
        const int key = i / (D / 4), c = (i % (D / 4)) * 4;
        if (kb + key < k_end) {
            cp_async_small<8>(&st.k[key][c], kg + (int64_t)(kb + key) * a.k_stride[2] + c);
            cp_async_small<8>(&st.v[key][c], vg + (int64_t)(kb + key) * a.v_stride[2] + c);
        } else {
            *(uint2 *)&st.k[key][c] = make_uint2(0u, 0u);
            *(uint2 *)&st.v[key][c] = make_uint2(0u, 0u);
        }
    }
    cp_async_commit();
}

template <int D>
__global__ void __launch_bounds__(VC_REF_THREADS) vc_reference_rows_part(vc_ref_args a) {
    extern __shared__ __align__(16) uint8_t vc_ref_smem[];
    vc_ref_stage<D> *stages = reinterpret_cast<vc_ref_stage<D> *>(vc_ref_smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.y, b = bh / a.H, h = bh % a.H, split = blockIdx.z;
    const int k_begin = split * a.keys_per_split;
    const int k_end = min(a.skv, k_begin + a.keys_per_split);
    const int r0 = blockIdx.x * VC_REF_ROWS + warp * 16 + g, r1 = r0 + 8;
    const __nv_bfloat16 *q = a.q + b * a.q_stride[0] + h * a.q_stride[1];
    const __nv_bfloat16 *kg = a.k + b * a.k_stride[0] + h * a.k_stride[1];
    const __nv_bfloat16 *vg = a.v + b * a.v_stride[0] + h * a.v_stride[1];

    /* Q's A fragments for the D/16 channel steps; rows past the end are zeros */
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const int c = kk * 16 + t * 2;
        qf[kk][0] = r0 < a.rows ? *(const uint32_t *)(q + r0 * a.q_stride[2] + c) : 0u;
        qf[kk][1] = r1 < a.rows ? *(const uint32_t *)(q + r1 * a.q_stride[2] + c) : 0u;
        qf[kk][2] = r0 < a.rows ? *(const uint32_t *)(q + r0 * a.q_stride[2] + c + 8) : 0u;
        qf[kk][3] = r1 < a.rows ? *(const uint32_t *)(q + r1 * a.q_stride[2] + c + 8) : 0u;
    }
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows r0, r1 (l: this thread's part) */

    if (k_begin < k_end) vc_ref_load<D>(stages[0], kg, vg, a, k_begin, k_end);
    for (int kb = k_begin, it = 0; kb < k_end; kb += VC_REF_KEYS, ++it) {
        const vc_ref_stage<D> &sm = stages[it & 1];
        if (kb + VC_REF_KEYS < k_end) { /* the next block's copies, then wait for this one's */
            vc_ref_load<D>(stages[(it + 1) & 1], kg, vg, a, kb + VC_REF_KEYS, k_end);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        /* S = Q K^T: 8 tiles of 8 keys; B fragment (k = channel, n = key) = K[key][channel], two
         * tiles' fragments per ldmatrix (lanes 8i..8i+7: tile 2p + i/2, channels + 8 (i%2)) */
        float s[VC_REF_KEYS / 8][4];
#pragma unroll
        for (int nt = 0; nt < VC_REF_KEYS / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
            for (int np = 0; np < VC_REF_KEYS / 16; ++np) { /* 8 independent accumulators in flight */
                uint32_t kf[4];
                ldmatrix_x4(kf, &sm.k[(2 * np + lane / 16) * 8 + lane % 8][kk * 16 + (lane / 8) % 2 * 8]);
                const uint32_t b0[2] = {kf[0], kf[1]}, b1[2] = {kf[2], kf[3]};
                mma_bf16_16816(s[2 * np], qf[kk], b0);
                mma_bf16_16816(s[2 * np + 1], qf[kk], b1);
            }
        /* the online softmax in FP32; keys past the split's end take no part */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < VC_REF_KEYS / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const bool in = kb + nt * 8 + t * 2 + e < k_end;
                s[nt][e] = in ? s[nt][e] * a.scale : -INFINITY;
                s[nt][2 + e] = in ? s[nt][2 + e] * a.scale : -INFINITY;
                mx0 = fmaxf(mx0, s[nt][e]);
                mx1 = fmaxf(mx1, s[nt][2 + e]);
            }
#pragma unroll
        for (int d = 1; d < 4; d <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, d));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, d));
        }
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1); /* finite: every block has a key */
        const float al0 = expf(m0 - n0), al1 = expf(m1 - n1);   /* 0 on the first block */
        m0 = n0;
        m1 = n1;
        l0 *= al0;
        l1 *= al1;
        /* P in two BF16 parts, as A fragments of the 4 key steps of 16 */
        uint32_t phi[VC_REF_KEYS / 16][4], plo[VC_REF_KEYS / 16][4];
#pragma unroll
        for (int j = 0; j < VC_REF_KEYS / 16; ++j)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int nt = 2 * j + half;
                float p[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) p[e] = expf(s[nt][e] - (e < 2 ? n0 : n1));
                l0 += p[0] + p[1];
                l1 += p[2] + p[3];
                /* a0/a1: rows g / g+8 of keys 0-7 of the step; a2/a3: keys 8-15 */
                vc_mma16_split<__nv_bfloat16>(p[0], p[1], phi[j][2 * half + 0], plo[j][2 * half + 0]);
                vc_mma16_split<__nv_bfloat16>(p[2], p[3], phi[j][2 * half + 1], plo[j][2 * half + 1]);
            }
        /* O = O alpha + P V: B fragment (k = key, n = channel) = V[key][channel], two keys per
         * register.  The block's P V starts from zero in the tensor core and is added to O by an
         * FFMA: the tensor core's FP32 accumulation truncates, and over a whole split in one
         * accumulator (75,600 keys: ~4,700 steps) that bias reached 2e-4 of the output. */
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) { /* channel tiles 2dp, 2dp + 1 */
            /* four independent accumulators: the hi and lo parts of P for each of the two tiles */
            float ob[2][2][4] = {};
#pragma unroll
            for (int j = 0; j < VC_REF_KEYS / 16; ++j) {
                /* phi[j] as laid out above is {a0, a1, a2, a3} = {row g keys 0-7, row g+8 keys 0-7,
                 * row g keys 8-15, row g+8 keys 8-15}: the order the fragment wants.  V's B
                 * fragments, transposed by ldmatrix (lanes 8i..8i+7: keys + 8 (i%2), tile 2dp + i/2) */
                uint32_t vf[4];
                ldmatrix_x4_trans(vf, &sm.v[j * 16 + (lane / 8) % 2 * 8 + lane % 8][(2 * dp + lane / 16) * 8]);
                const uint32_t b0[2] = {vf[0], vf[1]}, b1[2] = {vf[2], vf[3]};
                mma_bf16_16816(ob[0][0], phi[j], b0);
                mma_bf16_16816(ob[1][0], phi[j], b1);
                mma_bf16_16816(ob[0][1], plo[j], b0);
                mma_bf16_16816(ob[1][1], plo[j], b1);
            }
#pragma unroll
            for (int h2 = 0; h2 < 2; ++h2) {
                float *od = o[2 * dp + h2];
                const float *hi = ob[h2][0], *lo = ob[h2][1];
                od[0] = fmaf(od[0], al0, hi[0] + lo[0]);
                od[1] = fmaf(od[1], al0, hi[1] + lo[1]);
                od[2] = fmaf(od[2], al1, hi[2] + lo[2]);
                od[3] = fmaf(od[3], al1, hi[3] + lo[3]);
            }
        }
        __syncthreads(); /* every warp is done with this stage before the next copies into it */
    }
    /* the row sums over the four threads of a row */
#pragma unroll
    for (int d = 1; d < 4; d <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, d);
        l1 += __shfl_xor_sync(0xffffffffu, l1, d);
    }
    const int64_t part = (int64_t)split * gridDim.y + bh;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = half ? r1 : r0;
        if (r >= a.rows) continue;
        float *op = a.o_part + (part * a.rows + r) * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
            *(float2 *)(op + dt * 8 + t * 2) = make_float2(o[dt][2 * half], o[dt][2 * half + 1]);
        if (t == 0) {
            a.m_part[part * a.rows + r] = half ? m1 : m0;
            a.l_part[part * a.rows + r] = half ? l1 : l0;
        }
    }
}

/* O = sum_s O_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s; an empty split has m = -inf. */
__global__ void vc_reference_rows_merge(vc_ref_args a, int D) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = i / D, bh = blockIdx.y;
    if (row >= a.rows) return;
    const int c = (int)(i % D);
    const int64_t BH = gridDim.y;
    float M = -INFINITY;
    for (int s = 0; s < a.splits; ++s) M = fmaxf(M, a.m_part[(s * BH + bh) * a.rows + row]);
    float L = 0.0f, acc = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
        const float m = a.m_part[(s * BH + bh) * a.rows + row];
        if (m == -INFINITY) continue;
        const float w = expf(m - M);
        L += a.l_part[(s * BH + bh) * a.rows + row] * w;
        acc += a.o_part[((s * BH + bh) * a.rows + row) * D + c] * w;
    }
    a.o[(bh * a.rows + row) * D + c] = acc / L;
}

static int64_t vc_ref_div_up(int64_t x, int64_t m) { return (x + m - 1) / m; }

/* Splits of the keys: enough CTAs to fill the GPU, at least VC_REF_MIN_KEYS keys each. */
static int vc_ref_splits(const vcattn_gpu_reference_params *p) {
    const int64_t ctas = vc_ref_div_up(p->rows, VC_REF_ROWS) * p->batch * p->heads;
    int64_t s = vc_ref_div_up(VC_REF_TARGET_CTAS, ctas);
    const int64_t by_keys = vc_ref_div_up(p->seq_kv, VC_REF_MIN_KEYS);
    if (s > by_keys) s = by_keys;
    if (s > VC_REF_MAX_SPLITS) s = VC_REF_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

/* The shape the kernels take (vc_ref_validate adds the launch's bounds and the pointers). */
static vcattn_status vc_ref_check_shape(const vcattn_gpu_reference_params *p) {
    if (p->batch <= 0 || p->heads <= 0 || p->rows <= 0 || p->seq_kv <= 0) return VCATTN_STATUS_BAD_SHAPE;
    return p->head_dim == 64 || p->head_dim == 128 ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_UNSUPPORTED_HEAD_DIM;
}

static vcattn_status vc_ref_validate(const vcattn_gpu_reference_params *p) {
    if (!p) return VCATTN_STATUS_NULL_POINTER;
    vcattn_status s = vc_ref_check_shape(p);
    if (s) return s;
    if (p->batch * p->heads > 65535 || p->rows > (1 << 30) || p->seq_kv > (1 << 30)) return VCATTN_STATUS_BAD_SHAPE;
    if (!(p->softmax_scale <= 0.0) && !isfinite(p->softmax_scale)) return VCATTN_STATUS_INVALID_ARGUMENT;
    if ((s = vc_check_view(p->q, p->q_stride, p->batch, p->heads, p->rows, p->head_dim))) return s;
    if ((s = vc_check_view(p->k, p->k_stride, p->batch, p->heads, p->seq_kv, p->head_dim))) return s;
    if ((s = vc_check_view(p->v, p->v_stride, p->batch, p->heads, p->seq_kv, p->head_dim))) return s;
    return p->o ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_NULL_POINTER;
}

extern "C" vcattn_status vcattn_gpu_reference_workspace_size(const vcattn_gpu_reference_params *p, size_t *bytes) {
    if (!p || !bytes) return VCATTN_STATUS_NULL_POINTER;
    const vcattn_status s = vc_ref_check_shape(p);
    if (s) return s;
    const size_t per_split = (size_t)(p->batch * p->heads * p->rows);
    *bytes = (size_t)vc_ref_splits(p) * per_split * ((size_t)p->head_dim + 2) * sizeof(float);
    return VCATTN_STATUS_SUCCESS;
}

extern "C" vcattn_status vcattn_gpu_reference_rows(const vcattn_gpu_reference_params *p, void *workspace,
                                                    size_t workspace_bytes, void *stream) {
    vcattn_status s = vc_ref_validate(p);
    if (s) return s;
    size_t need = 0;
    if ((s = vcattn_gpu_reference_workspace_size(p, &need))) return s;
    if (!workspace) return VCATTN_STATUS_NULL_POINTER;
    if (workspace_bytes < need || (uintptr_t)workspace % 256) return VCATTN_STATUS_INVALID_ARGUMENT;
    const int BH = (int)(p->batch * p->heads), D = (int)p->head_dim;
    vc_ref_args a;
    memset(&a, 0, sizeof a);
    a.q = (const __nv_bfloat16 *)p->q;
    a.k = (const __nv_bfloat16 *)p->k;
    a.v = (const __nv_bfloat16 *)p->v;
    memcpy(a.q_stride, p->q_stride, sizeof a.q_stride);
    memcpy(a.k_stride, p->k_stride, sizeof a.k_stride);
    memcpy(a.v_stride, p->v_stride, sizeof a.v_stride);
    a.H = (int)p->heads;
    a.rows = (int)p->rows;
    a.skv = (int)p->seq_kv;
    a.splits = vc_ref_splits(p);
    a.keys_per_split = (int)(vc_ref_div_up(vc_ref_div_up(p->seq_kv, a.splits), VC_REF_KEYS) * VC_REF_KEYS);
    a.scale = (float)(p->softmax_scale > 0.0 ? p->softmax_scale : 1.0 / sqrt((double)D));
    const size_t per_split = (size_t)BH * (size_t)p->rows;
    a.o_part = (float *)workspace;
    a.m_part = a.o_part + (size_t)a.splits * per_split * (size_t)D;
    a.l_part = a.m_part + (size_t)a.splits * per_split;
    a.o = p->o;
    cudaStream_t st = (cudaStream_t)stream;
    const dim3 grid((unsigned)vc_ref_div_up(p->rows, VC_REF_ROWS), (unsigned)BH, (unsigned)a.splits);
    if (D == 64) {
        if (cudaFuncSetAttribute(vc_reference_rows_part<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 vc_ref_smem_bytes<64>()) != cudaSuccess)
            return VCATTN_STATUS_CUDA_ERROR;
        vc_reference_rows_part<64><<<grid, VC_REF_THREADS, vc_ref_smem_bytes<64>(), st>>>(a);
    } else {
        if (cudaFuncSetAttribute(vc_reference_rows_part<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 vc_ref_smem_bytes<128>()) != cudaSuccess)
            return VCATTN_STATUS_CUDA_ERROR;
        vc_reference_rows_part<128><<<grid, VC_REF_THREADS, vc_ref_smem_bytes<128>(), st>>>(a);
    }
    const dim3 mgrid((unsigned)vc_ref_div_up(p->rows * D, 256), (unsigned)BH);
    vc_reference_rows_merge<<<mgrid, 256, 0, st>>>(a, D);
    return cudaGetLastError() == cudaSuccess ? VCATTN_STATUS_SUCCESS : VCATTN_STATUS_CUDA_ERROR;
}
