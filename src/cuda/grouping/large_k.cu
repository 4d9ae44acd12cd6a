/* large_k.cu - the GPU k-means path for k > 64 (the fused path, fused_*.cuh,
 * covers k <= 64, the default 64): one iteration = two launches,
 *   km_assign   per CTA 1024 tokens: distances as a tensor-core product (mma.sync
 *               m16n8k16 BF16, FP32 accumulate), argmin; then per-CTA partial
 *               sums (onehot^T V, a second mma product) and counts;
 *   km_update   new centroid = sum of the partials (in CTA order) / count.
 * After the last update: one more km_assign (labels and counts only), then
 * km_offsets (exclusive scan over (cluster, CTA)) and km_scatter.  Same algorithm and
 * contract as the fused path (kmeans.cu's header). */
#include "grouping/common.cuh"
#include "ptx/cp_async.cuh"

#define KM_THREADS 128      /* 4 warps; one thread per channel in the accumulation */
#define KM_SUB 128          /* tokens per tensor-core sub-tile (4 warps x 32 rows) */
#define KM_MAX_D 128
#define KM_PAD 8            /* bf16 padding per shared row: row stride = 4 banks mod 32 */

struct km_args {
    const void *v;
    int64_t vs0, vs1, vs2;
    int H, S, D, K, ntiles, is_bf16, accumulate;
    int vec16;          /* rows 16-byte aligned: cp.async loads */
    const float *cent;  /* (BH, K, D) */
    int32_t *labels;    /* (BH, S) */
    float *part_sum;    /* (BH, ntiles, K, D) */
    int *part_cnt;      /* (BH, ntiles, K) */
};

/* Two BF16 one-hot entries (tokens t, t+1 belong to cluster c?) packed. */
__device__ __forceinline__ uint32_t km_onehot2(const int *labels, int t, int valid, int c) {
    uint32_t lo = (t < valid && labels[t] == c) ? 0x3F80u : 0u;
    uint32_t hi = (t + 1 < valid && labels[t + 1] == c) ? 0x3F80u : 0u;
    return lo | (hi << 16);
}

/* ---- assignment (+ partial sums) ----------------------------------------------------- */

__global__ void __launch_bounds__(KM_THREADS) km_assign(const km_args a) {
    extern __shared__ __align__(16) unsigned char km_smem[];
    const int D = a.D, K = a.K, ld = D + KM_PAD;
    __nv_bfloat16 *cs = reinterpret_cast<__nv_bfloat16 *>(km_smem);   /* [K][ld] */
    __nv_bfloat16 *vs = cs + K * ld;                                  /* [KM_SUB][ld] */
    float *cnorm = reinterpret_cast<float *>(vs + KM_SUB * ld);       /* [K] */
    int *lab = reinterpret_cast<int *>(cnorm + K);                    /* [KM_TOKENS] */
    int *cnt_s = lab + KM_TOKENS;                                     /* [K] */
    float *sums = reinterpret_cast<float *>(cnt_s + KM_MAX_K);        /* [K][D] */

    const int bh = blockIdx.y, tile = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int b = bh / a.H, h = bh % a.H;
    const int t0 = tile * KM_TOKENS;
    const char *vbase = reinterpret_cast<const char *>(a.v) + (b * a.vs0 + h * a.vs1) * 2;

    /* centroids -> BF16 shared tile and their squared norms (of the rounded values) */
    const float *cent = a.cent + (int64_t)bh * K * D;
    for (int i = tid; i < K * D; i += KM_THREADS) cs[(i / D) * ld + i % D] = __float2bfloat16_rn(cent[i]);
    __syncthreads();
    for (int c = warp; c < K; c += KM_THREADS / 32) {
        float s = 0.0f;
        for (int d = lane; d < D; d += 32) {
            float x = __bfloat162float(cs[c * ld + d]);
            s = fmaf(x, x, s);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) cnorm[c] = s;
    }
    if (a.accumulate)
        for (int i = tid; i < K * D; i += KM_THREADS) sums[i] = 0.0f;
    for (int c = tid; c < K; c += KM_THREADS) cnt_s[c] = 0;

    for (int sub = 0; sub < KM_TOKENS / KM_SUB; ++sub) {
        const int s0 = t0 + sub * KM_SUB;
        if (s0 >= a.S) break;
        __syncthreads(); /* previous sub-tile fully consumed */
        if (a.vec16) {
            /* NOTE: the V tile is the latency that matters (2 CTAs per SM):
             * every 16-byte chunk of the tile is in flight at once. */
            const int chunks = D / 8;
            for (int i = tid; i < KM_SUB * chunks; i += KM_THREADS) {
                int r = i / chunks, c8 = (i % chunks) * 8, s = s0 + r;
                if (s < a.S)
                    cp_async_16(&vs[r * ld + c8], vbase + ((int64_t)s * a.vs2 + c8) * 2);
                else
                    *reinterpret_cast<uint4 *>(&vs[r * ld + c8]) = make_uint4(0, 0, 0, 0);
            }
            cp_async_commit();
            cp_async_wait<0>();
            if (!a.is_bf16) /* FP16 -> BF16 in place, each thread its own chunks */
                for (int i = tid; i < KM_SUB * chunks; i += KM_THREADS) {
                    int r = i / chunks, c8 = (i % chunks) * 8;
                    uint16_t *e = reinterpret_cast<uint16_t *>(&vs[r * ld + c8]);
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        e[j] = __bfloat16_as_ushort(__float2bfloat16_rn(__half2float(__ushort_as_half(e[j]))));
                }
        } else
        for (int i = tid; i < KM_SUB * D / 2; i += KM_THREADS) {
            int r = (2 * i) / D, d = (2 * i) % D, s = s0 + r;
            __nv_bfloat162 pair;
            if (s < a.S) {
                const void *row = vbase + (int64_t)s * a.vs2 * 2;
                float x0 = km_load_value(row, d, a.is_bf16), x1 = km_load_value(row, d + 1, a.is_bf16);
                pair = __floats2bfloat162_rn(x0, x1);
            } else {
                pair = __floats2bfloat162_rn(0.0f, 0.0f);
            }
            *reinterpret_cast<__nv_bfloat162 *>(&vs[r * ld + d]) = pair;
        }
        __syncthreads();

        /* dot products: this warp's 32 rows x all K centroids */
        float acc[2][KM_MAX_K / 8][4];
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int n = 0; n < KM_MAX_K / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;
        const int qr = lane / 4, qc = (lane % 4) * 2;
        for (int k0 = 0; k0 < D; k0 += 16) {
            uint32_t af[2][4];
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                const __nv_bfloat16 *r0 = vs + (warp * 32 + m * 16 + qr) * ld + k0 + qc;
                af[m][0] = *reinterpret_cast<const uint32_t *>(r0);
                af[m][1] = *reinterpret_cast<const uint32_t *>(r0 + 8 * ld);
                af[m][2] = *reinterpret_cast<const uint32_t *>(r0 + 8);
                af[m][3] = *reinterpret_cast<const uint32_t *>(r0 + 8 * ld + 8);
            }
#pragma unroll
            for (int n = 0; n < KM_MAX_K / 8; ++n) {
                if (n * 8 >= K) break;
                const __nv_bfloat16 *c0 = cs + (n * 8 + qr) * ld + k0 + qc;
                uint32_t bf[2] = {*reinterpret_cast<const uint32_t *>(c0),
                                  *reinterpret_cast<const uint32_t *>(c0 + 8)};
                mma_bf16_16816(acc[0][n], af[0], bf);
                mma_bf16_16816(acc[1][n], af[1], bf);
            }
        }
        /* argmin of |c|^2 - 2 v.c over this thread's columns, then over the quad */
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float best = INFINITY;
                int arg = 0;
#pragma unroll
                for (int n = 0; n < KM_MAX_K / 8; ++n) {
                    if (n * 8 >= K) break;
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        int c = n * 8 + qc + e;
                        float dist = cnorm[c] - 2.0f * acc[m][n][half * 2 + e];
                        if (dist < best) { best = dist; arg = c; }
                    }
                }
#pragma unroll
                for (int o = 1; o <= 2; o <<= 1) {
                    float ob = __shfl_xor_sync(0xffffffffu, best, o);
                    int oa = __shfl_xor_sync(0xffffffffu, arg, o);
                    if (ob < best || (ob == best && oa < arg)) { best = ob; arg = oa; }
                }
                if (lane % 4 == 0) lab[sub * KM_SUB + warp * 32 + m * 16 + half * 8 + qr] = arg;
            }
        __syncthreads();
        if (a.accumulate) {
            /* partial sums as a second tensor-core product, deterministic:
             * sums[K x D] += onehot(labels)^T [K x tokens] . V [tokens x D].
             * Warp w owns cluster rows 16w.. (and +64): no two threads touch
             * the same sum, and no float atomics. */
            const int valid = min(KM_SUB, a.S - s0);
            const int *sl = lab + sub * KM_SUB;
            if (lane % 4 == 0)
                for (int h2 = 0; h2 < 2; ++h2)
                    for (int m = 0; m < 2; ++m) {
                        int r = warp * 32 + m * 16 + h2 * 8 + qr;
                        if (r < valid) atomicAdd(&cnt_s[sl[r]], 1); /* integers: order-free */
                    }
            for (int mt = warp; mt < K / 16; mt += KM_THREADS / 32) {
                float acc2[KM_MAX_D / 8][4];
#pragma unroll
                for (int n = 0; n < KM_MAX_D / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc2[n][e] = 0.0f;
                const int c0 = mt * 16 + qr;
                for (int k0 = 0; k0 < KM_SUB; k0 += 16) {
                    const int t = k0 + qc;
                    uint32_t af[4];
                    af[0] = km_onehot2(sl, t, valid, c0);
                    af[1] = km_onehot2(sl, t, valid, c0 + 8);
                    af[2] = km_onehot2(sl, t + 8, valid, c0);
                    af[3] = km_onehot2(sl, t + 8, valid, c0 + 8);
                    const int row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
                    for (int n0 = 0; n0 < KM_MAX_D; n0 += 16) {
                        if (n0 >= D) break;
                        uint32_t bf[4];
                        ldmatrix_x4_trans(bf, &vs[row * ld + n0 + (lane >> 4) * 8]);
                        const uint32_t b01[2] = {bf[0], bf[1]}, b23[2] = {bf[2], bf[3]};
                        mma_bf16_16816(acc2[n0 / 8], af, b01);
                        mma_bf16_16816(acc2[n0 / 8 + 1], af, b23);
                    }
                }
#pragma unroll
                for (int n = 0; n < KM_MAX_D / 8; ++n) {
                    if (n * 8 >= D) break;
                    float *r0 = sums + c0 * D + n * 8 + qc, *r8 = r0 + 8 * D;
                    r0[0] += acc2[n][0];
                    r0[1] += acc2[n][1];
                    r8[0] += acc2[n][2];
                    r8[1] += acc2[n][3];
                }
            }
        }
    }
    __syncthreads();
    const int valid = min(KM_TOKENS, a.S - t0);
    for (int i = tid; i < valid; i += KM_THREADS) a.labels[(int64_t)bh * a.S + t0 + i] = lab[i];
    if (!a.accumulate) /* counts only (for the permutation's offsets) */
        for (int i = tid; i < valid; i += KM_THREADS) atomicAdd(&cnt_s[lab[i]], 1);
    __syncthreads();
    for (int c = tid; c < K; c += KM_THREADS) a.part_cnt[((int64_t)bh * a.ntiles + tile) * K + c] = cnt_s[c];
    if (a.accumulate) {
        float *dst = a.part_sum + ((int64_t)bh * a.ntiles + tile) * K * D;
        for (int i = tid; i < K * D; i += KM_THREADS) dst[i] = sums[i];
    }
}

/* ---- centroid update: grid (K, BH), one thread per channel ------------------------------ */

__global__ void km_update(float *cent, const float *part_sum, const int *part_cnt, int K, int D, int ntiles) {
    const int c = blockIdx.x, bh = blockIdx.y, d = threadIdx.x;
    if (d >= D) return;
    double s = 0.0;
    int64_t n = 0;
    for (int t = 0; t < ntiles; ++t) {
        s += part_sum[(((int64_t)bh * ntiles + t) * K + c) * D + d];
        n += part_cnt[((int64_t)bh * ntiles + t) * K + c];
    }
    if (n > 0) cent[((int64_t)bh * K + c) * D + d] = (float)(s / (double)n);
}

/* ---- initial centroids: K distinct tokens, one drawn from each of K equal strides ---- */

__global__ void km_init(const km_args a, float *cent, uint64_t seed) {
    const int c = blockIdx.x, bh = blockIdx.y, d = threadIdx.x;
    if (d >= a.D) return;
    cent[((int64_t)bh * a.K + c) * a.D + d] = km_load_value(km_init_row(a, bh, c, seed), d, a.is_bf16);
}

/* ---- permutation: offsets of each (cluster, tile), then the scatter ---------------------- */

__global__ void km_offsets(const int *part_cnt, int *offsets, int K, int ntiles) {
    /* one CTA per (batch, head); thread c sums its cluster, thread 0 scans */
    extern __shared__ int km_tot[];
    const int bh = blockIdx.x;
    const int *cnt = part_cnt + (int64_t)bh * ntiles * K;
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        int s = 0;
        for (int t = 0; t < ntiles; ++t) s += cnt[t * K + c];
        km_tot[c] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) km_exclusive_scan(km_tot, K);
    __syncthreads();
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        int run = km_tot[c];
        for (int t = 0; t < ntiles; ++t) {
            offsets[((int64_t)bh * ntiles + t) * K + c] = run;
            run += cnt[t * K + c];
        }
    }
}

__global__ void km_scatter(const int32_t *labels, const int *offsets, int32_t *perm, int S, int K, int ntiles) {
    __shared__ int lab[KM_TOKENS];
    const int tile = blockIdx.x, bh = blockIdx.y, t0 = tile * KM_TOKENS;
    const int valid = min(KM_TOKENS, S - t0);
    for (int i = threadIdx.x; i < valid; i += blockDim.x) lab[i] = labels[(int64_t)bh * S + t0 + i];
    __syncthreads();
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        int pos = offsets[((int64_t)bh * ntiles + tile) * K + c];
        int32_t *dst = perm + (int64_t)bh * S;
        for (int i = 0; i < valid; ++i)
            if (lab[i] == c) dst[pos++] = t0 + i;
    }
}

/* K > 64: one launch per step */
vcattn_status vc_kmeans_large_k(const vcattn_gpu_kmeans_params *p, const km_layout &L, char *ws, cudaStream_t stream) {
    vcattn_status st = VCATTN_STATUS_SUCCESS;
    float *cent = (float *)(ws + L.cent);
    const int K = p->clusters, D = (int)p->head_dim;

    km_args a;
    km_args_from_call(a, p);
    a.D = D;
    a.ntiles = (int)L.ntiles;
    a.cent = cent;
    a.labels = (int32_t *)(ws + L.labels);
    a.part_sum = (float *)(ws + L.part_sum);
    a.part_cnt = (int *)(ws + L.part_cnt);
    a.accumulate = 0;
    a.vec16 = 0;

    size_t cent_bytes = (size_t)L.bh * K * D * sizeof(float);
    if (p->init_centroids)
        st = km_cuda(cudaMemcpyAsync(cent, p->init_centroids, cent_bytes, cudaMemcpyDeviceToDevice, stream));
    else
        km_init<<<dim3(K, (unsigned)L.bh), 128, 0, stream>>>(a, cent, p->seed);
    if (st) return st;

    const int ld = D + KM_PAD;
    size_t smem = (size_t)(K + KM_SUB) * ld * 2 + K * sizeof(float) + (KM_TOKENS + KM_MAX_K) * sizeof(int) +
                  (size_t)K * D * sizeof(float);
    a.vec16 = km_vec16(p);
    if ((st = km_cuda(cudaFuncSetAttribute(km_assign, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))))
        return st;
    dim3 grid((unsigned)L.ntiles, (unsigned)L.bh);
    for (int it = 0; it < p->iterations; ++it) {
        a.accumulate = 1;
        km_assign<<<grid, KM_THREADS, smem, stream>>>(a);
        km_update<<<dim3(K, (unsigned)L.bh), 128, 0, stream>>>(cent, a.part_sum, a.part_cnt, K, D, a.ntiles);
    }
    /* final labels of the returned centroids, then the stable counting sort */
    a.accumulate = 0;
    km_assign<<<grid, KM_THREADS, smem, stream>>>(a);
    int *offsets = (int *)(ws + L.offsets);
    km_offsets<<<(unsigned)L.bh, 128, K * sizeof(int), stream>>>(a.part_cnt, offsets, K, a.ntiles);
    km_scatter<<<grid, 128, 0, stream>>>(a.labels, offsets, p->perm, a.S, K, a.ntiles);
    if (p->labels)
        st = km_cuda(cudaMemcpyAsync(p->labels, a.labels, (size_t)L.bh * p->seq * sizeof(int32_t),
                                     cudaMemcpyDeviceToDevice, stream));
    return st;
}

