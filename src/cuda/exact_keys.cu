/* exact_keys.cu - the keys a V-Smooth method keeps out of the quantized pass (src/exact_keys.h):
 *   vc_key_norm     one thread per token: its V norm in channel order (the CPU's order);
 *   vc_key_top, vc_key_pick, vc_key_place  the n largest (a total order), then the plan's
 *                   order stably partitioned, them at its end (below: three wide kernels);
 *   vc_exact_merge_rows  a warp per 16 query rows at a time, on the tensor cores: the scores
 *                   against the n exact keys, their softmax and P V, merged with the
 *                   quantized pass's output and LSE.
 * The preprocessing runs the first two (the quantized pass reads the new order); the
 * attention call runs the merge after the attention kernel. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "exact_keys.h"
#include "gpu_common.cuh"
#include "ptx/mma_sync.cuh"

/* One thread per token: 8-byte loads, all issued before the sum, summed in channel order. */
template <typename T, int D>
__global__ void __launch_bounds__(256) vc_key_norm(vc_exact_args a) {
    const int bh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= a.S) return;
    const int b = bh / a.H, h = bh % a.H;
    const uint2 *row = reinterpret_cast<const uint2 *>((const T *)a.v + b * a.v_stride[0] + h * a.v_stride[1] +
                                                       (int64_t)t * a.v_stride[2]);
    uint2 w[D / 4];
#pragma unroll
    for (int i = 0; i < D / 4; ++i) w[i] = row[i];
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < D / 4; ++i) {
        const uint32_t h4[4] = {w[i].x & 0xFFFFu, w[i].x >> 16, w[i].y & 0xFFFFu, w[i].y >> 16};
#pragma unroll
        for (int e = 0; e < 4; ++e) acc = vc_exact_key_norm_step(acc, vc_bits_to_f32<T>((uint16_t)h4[e]));
    }
    a.norm[(int64_t)bh * a.S + t] = vc_exact_key_rank_norm(acc);
}

/* The order in three kernels, every one of them wide: the single-CTA form (n rounds of a
 * block-wide argmax over all S norms, then a block-serial partition) took 0.17-0.28 ms on one
 * CTA per head, on the preprocessing's critical path (docs/kernel-log.md).  The result is the
 * same bit for bit: the n largest in a total order are among the n largest of each chunk.
 *   vc_key_top     (chunks, B*H): each chunk's n largest -> candidates (norm, token) pairs,
 *                  written into the head's key_order row (its scratch until the partition);
 *   vc_key_pick    (B*H): the n largest of the candidates, their positions in the plan's order
 *                  (a scan of the order against the n tokens), sorted; the exact keys written
 *                  at the order's end and their positions into the head's first n norm slots
 *                  (the norms are not read after this);
 *   vc_key_place   (chunks, B*H): every other key to its place, j minus the exact keys before it. */
#define VC_TOP_THREADS 256
#define VC_TOP_PER_THREAD 16 /* a chunk: 4,096 norms, held in registers */
#define VC_TOP_CHUNK (VC_TOP_THREADS * VC_TOP_PER_THREAD)
#define VC_PICK_THREADS 1024
#define VC_PLACE_THREADS 256
#define VC_PLACE_CHUNK 2048

/* The better of (n, t, i) and (on, ot, oi) in the total order (i rides along: a slot). */
__device__ __forceinline__ void vc_key_better(float &n, int &t, int &i, float on, int ot, int oi) {
    if (vc_exact_key_before(on, ot, n, t)) { n = on; t = ot; i = oi; }
}

/* The block's best (norm, token, slot): every thread gets it.  red: 3 x warps words. */
template <int THREADS>
__device__ __forceinline__ void vc_key_block_best(float &n, int &t, int &i, float *red_n, int *red_t, int *red_i) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1)
        vc_key_better(n, t, i, __shfl_xor_sync(0xffffffffu, n, o), __shfl_xor_sync(0xffffffffu, t, o),
                      __shfl_xor_sync(0xffffffffu, i, o));
    if (lane == 0) { red_n[warp] = n; red_t[warp] = t; red_i[warp] = i; }
    __syncthreads();
    n = red_n[0]; t = red_t[0]; i = red_i[0];
    for (int w = 1; w < THREADS / 32; ++w) vc_key_better(n, t, i, red_n[w], red_t[w], red_i[w]);
    __syncthreads(); /* the words are free for the next call */
}

/* The candidates' slots in the head's key_order row: chunk c's n pairs at 2 n c. */
__global__ void __launch_bounds__(VC_TOP_THREADS) vc_key_top(vc_exact_args a) {
    __shared__ float red_n[VC_TOP_THREADS / 32];
    __shared__ int red_t[VC_TOP_THREADS / 32], red_i[VC_TOP_THREADS / 32];
    const int bh = blockIdx.y, c = blockIdx.x, tid = threadIdx.x;
    const float *norm = a.norm + (int64_t)bh * a.S;
    const int base = c * VC_TOP_CHUNK, valid = min(VC_TOP_CHUNK, a.S - base);
    float x[VC_TOP_PER_THREAD];
#pragma unroll
    for (int e = 0; e < VC_TOP_PER_THREAD; ++e) {
        const int j = e * VC_TOP_THREADS + tid;
        x[e] = j < valid ? norm[base + j] : -INFINITY;
    }
    int32_t *cand = a.order + (int64_t)bh * a.S + 2 * a.n * c;
    const int rounds = min(a.n, valid);
    for (int r = 0; r < rounds; ++r) {
        float bn = -INFINITY;
        int bt = 0x7fffffff, bi = -1;
#pragma unroll
        for (int e = 0; e < VC_TOP_PER_THREAD; ++e) {
            const int j = e * VC_TOP_THREADS + tid;
            if (j < valid) vc_key_better(bn, bt, bi, x[e], base + j, j);
        }
        vc_key_block_best<VC_TOP_THREADS>(bn, bt, bi, red_n, red_t, red_i);
        if (bi % VC_TOP_THREADS == tid) { /* the owner drops it from the next rounds */
#pragma unroll
            for (int e = 0; e < VC_TOP_PER_THREAD; ++e)
                if (e == bi / VC_TOP_THREADS) x[e] = -INFINITY;
        }
        if (tid == 0) { cand[2 * r] = __float_as_int(bn); cand[2 * r + 1] = bt; }
    }
    /* a chunk shorter than n: the rest of its slots rank below every key */
    for (int r = rounds + tid; r < a.n; r += VC_TOP_THREADS) {
        cand[2 * r] = __float_as_int(-INFINITY);
        cand[2 * r + 1] = 0x7fffffff;
    }
}

__global__ void __launch_bounds__(VC_PICK_THREADS) vc_key_pick(vc_exact_args a) {
    __shared__ float red_n[VC_PICK_THREADS / 32];
    __shared__ int red_t[VC_PICK_THREADS / 32], red_i[VC_PICK_THREADS / 32];
    __shared__ int tok[VC_EXACT_KEYS_MAX], pos[VC_EXACT_KEYS_MAX];
    const int bh = blockIdx.x, tid = threadIdx.x, n = a.n;
    int32_t *row = a.order + (int64_t)bh * a.S;
    const int ncand = n * ((a.S + VC_TOP_CHUNK - 1) / VC_TOP_CHUNK);
    for (int r = 0; r < n; ++r) {
        float bn = -INFINITY;
        int bt = 0x7fffffff, bi = -1;
        for (int i = tid; i < ncand; i += VC_PICK_THREADS)
            vc_key_better(bn, bt, bi, __int_as_float(row[2 * i]), row[2 * i + 1], i);
        vc_key_block_best<VC_PICK_THREADS>(bn, bt, bi, red_n, red_t, red_i);
        if (tid == 0) {
            tok[r] = bt;
            row[2 * bi] = __float_as_int(-INFINITY); /* taken: below every key from now on */
            row[2 * bi + 1] = 0x7fffffff;
        }
        __syncthreads();
    }
    /* where each sits in the plan's order */
    const int32_t *perm = a.perm ? a.perm + (int64_t)bh * a.S : nullptr;
    if (tid < n) pos[tid] = a.S; /* a plan that is no permutation leaves it past the end */
    __syncthreads();
    if (!perm) {
        if (tid < n) pos[tid] = tok[tid];
    } else {
        for (int j = tid; j < a.S; j += VC_PICK_THREADS) {
            const int t = perm[j];
            for (int k = 0; k < n; ++k)
                if (t == tok[k]) pos[k] = j;
        }
    }
    __syncthreads();
    if (tid == 0) { /* in the order's order: the stable partition's */
        for (int k = 1; k < n; ++k)
            for (int m = k; m > 0 && pos[m - 1] > pos[m]; --m) {
                const int p = pos[m]; pos[m] = pos[m - 1]; pos[m - 1] = p;
                const int t = tok[m]; tok[m] = tok[m - 1]; tok[m - 1] = t;
            }
    }
    __syncthreads();
    if (tid < n) {
        row[a.S - n + tid] = tok[tid];
        reinterpret_cast<int32_t *>(a.norm)[(int64_t)bh * a.S + tid] = pos[tid];
    }
}

__global__ void __launch_bounds__(VC_PLACE_THREADS) vc_key_place(vc_exact_args a) {
    __shared__ int pos[VC_EXACT_KEYS_MAX];
    const int bh = blockIdx.y, n = a.n;
    if (threadIdx.x < n) pos[threadIdx.x] = reinterpret_cast<const int32_t *>(a.norm)[(int64_t)bh * a.S + threadIdx.x];
    __syncthreads();
    const int32_t *perm = a.perm ? a.perm + (int64_t)bh * a.S : nullptr;
    int32_t *out = a.order + (int64_t)bh * a.S;
    const int j1 = min(a.S, (int)(blockIdx.x + 1) * VC_PLACE_CHUNK);
    for (int j = blockIdx.x * VC_PLACE_CHUNK + threadIdx.x; j < j1; j += VC_PLACE_THREADS) {
        int before = 0;
        bool exact = false;
        for (int k = 0; k < n; ++k) {
            before += pos[k] < j;
            exact |= pos[k] == j;
        }
        if (!exact) out[j - before] = perm ? perm[j] : j;
    }
}

/* The merge on the tensor cores (mma.sync m16n8k16: 16-bit inputs, exact products, FP32 sums): a
 * warp takes 16 query rows at a time.  S = Q K_e^T over the n exact keys, padded to 16 with
 * zero rows (P is 0 there; a zero V row keeps 0 * garbage out of u), gives each quad of lanes
 * one row's 16 scores in the accumulator's registers, so the row max and sum are two shuffles
 * each; P, split into two 16-bit parts (hi + lo: ~2^-17 relative in BF16), is the A operand of
 * u = P V_e as it lies in those registers.  K_e and V_e sit in shared memory (ldmatrix); Q and
 * O are read straight from global memory in the fragments' layout, every load of a tile issued
 * before its first product.  The quantized pass's own error is 1e-3 and up; the merge's
 * arithmetic adds ~1e-6 (its check: gpu_check against the simulation).  Why not FP32 FMAs on
 * the CUDA cores: per row they need 16 dot products reduced across the warp, and that form is
 * bound by issue, not by memory (docs/kernel-log.md, "The exact keys' merge on the tensor cores"). */
#define VC_MERGE_WARPS 4
#define VC_MERGE_TILES 8 /* 16-row tiles per warp: a block merges 512 rows */
#define VC_MERGE_PITCH(D) ((D) + 8) /* smem row pitch (elements): ldmatrix's 8 rows on distinct banks */

template <typename T, typename TO, int D>
__global__ void __launch_bounds__(32 * VC_MERGE_WARPS) vc_exact_merge_rows(vc_exact_args a) {
    constexpr int KS = D / 16, CT = D / 8, LD = VC_MERGE_PITCH(D);
    static_assert(VC_EXACT_KEYS_MAX <= 16, "the products are 16 keys wide");
    __shared__ __align__(16) uint16_t sk[16 * LD], sv[16 * LD];
    const int bh = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int b = bh / a.H, h = bh % a.H, n = a.n;
    const int32_t *tok = a.order + (int64_t)bh * a.S + (a.S - n);
    for (int i = threadIdx.x; i < 16 * (D / 4); i += blockDim.x) {
        const int j = i / (D / 4), c = (i % (D / 4)) * 4;
        uint2 kx = make_uint2(0u, 0u), vx = kx;
        if (j < n) {
            const int64_t tk = tok[j];
            kx = *reinterpret_cast<const uint2 *>((const T *)a.k + b * a.k_stride[0] + h * a.k_stride[1] +
                                                  tk * a.k_stride[2] + c);
            vx = *reinterpret_cast<const uint2 *>((const T *)a.v + b * a.v_stride[0] + h * a.v_stride[1] +
                                                  tk * a.v_stride[2] + c);
        }
        *reinterpret_cast<uint2 *>(&sk[j * LD + c]) = kx;
        *reinterpret_cast<uint2 *>(&sv[j * LD + c]) = vx;
    }
    __syncthreads();
    const T *qh = (const T *)a.q + b * a.q_stride[0] + h * a.q_stride[1];
    TO *oh = (TO *)a.o + b * a.o_stride[0] + h * a.o_stride[1];
    float *lse = a.lse + (int64_t)bh * a.Sq;
    /* ldmatrix's row of this lane: matrix lane / 8, its row lane % 8 */
    const int mi = lane / 8, mr = lane % 8;
    for (int tile = 0; tile < VC_MERGE_TILES; ++tile) {
        const int row0 = (blockIdx.x * VC_MERGE_TILES + tile) * (16 * VC_MERGE_WARPS) + warp * 16;
        if (row0 >= a.Sq) break; /* warp-uniform */
        /* rows g and g + 8 of the tile (past the end: the last row again, not stored) */
        const int rg[2] = {row0 + g, row0 + g + 8};
        const int ra = min(rg[0], a.Sq - 1), rb = min(rg[1], a.Sq - 1);
        const uint32_t *qa = reinterpret_cast<const uint32_t *>(qh + (int64_t)ra * a.q_stride[2]);
        const uint32_t *qb = reinterpret_cast<const uint32_t *>(qh + (int64_t)rb * a.q_stride[2]);
        uint32_t *oa = reinterpret_cast<uint32_t *>(oh + (int64_t)ra * a.o_stride[2]);
        uint32_t *ob = reinterpret_cast<uint32_t *>(oh + (int64_t)rb * a.o_stride[2]);
        /* A of S (row-major 16 x 16 per k-step): (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..);
         * O as the accumulator lies: (g, 8ct + 2t..), (g+8, 8ct + 2t..) */
        uint32_t qf[KS][4], of[CT][2];
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            qf[ks][0] = qa[8 * ks + t];
            qf[ks][1] = qb[8 * ks + t];
            qf[ks][2] = qa[8 * ks + 4 + t];
            qf[ks][3] = qb[8 * ks + 4 + t];
        }
#pragma unroll
        for (int ct = 0; ct < CT; ++ct) {
            of[ct][0] = oa[4 * ct + t];
            of[ct][1] = ob[4 * ct + t];
        }
        const float lq[2] = {lse[ra], lse[rb]};
        /* S: keys 0-7 and 8-15; B from K_e [key][channel] (matrices: keys 0-7 | 8-15 x channels
         * +0 | +8 of the k-step) */
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t kb[4];
            ldmatrix_x4(kb, &sk[((mi / 2) * 8 + mr) * LD + 16 * ks + (mi % 2) * 8]);
            const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
            vc_mma16<T>::mma(s[0], qf[ks], b0);
            vc_mma16<T>::mma(s[1], qf[ks], b1);
        }
        /* s[nt][e]: row g (e < 2) or g + 8, key 8 nt + 2t + e % 2; the row's 16 are the quad's */
        float mx[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nt][e] = 8 * nt + 2 * t + e % 2 < n ? s[nt][e] * a.c0 : -INFINITY;
                mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
            }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nt][e] = exp2f(s[nt][e] - mx[e / 2]);
                l[e / 2] += s[nt][e];
            }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        }
        /* P as the A operand of P V (k = the 16 keys): the accumulator of S as it lies */
        uint32_t ph[4], pl[4];
        vc_mma16_split<T>(s[0][0], s[0][1], ph[0], pl[0]);
        vc_mma16_split<T>(s[0][2], s[0][3], ph[1], pl[1]);
        vc_mma16_split<T>(s[1][0], s[1][1], ph[2], pl[2]);
        vc_mma16_split<T>(s[1][2], s[1][3], ph[3], pl[3]);
        /* u = P V_e, two channel tiles a load (matrices: keys 0-7 | 8-15 x tile ct | ct + 1) */
        float u[CT][4];
#pragma unroll
        for (int ct = 0; ct < CT; ++ct) u[ct][0] = u[ct][1] = u[ct][2] = u[ct][3] = 0.0f;
#pragma unroll
        for (int ct = 0; ct < CT; ct += 2) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, &sv[((mi % 2) * 8 + mr) * LD + 8 * (ct + mi / 2)]);
            const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
            vc_mma16<T>::mma(u[ct], ph, b0);
            vc_mma16<T>::mma(u[ct], pl, b0);
            vc_mma16<T>::mma(u[ct + 1], ph, b1);
            vc_mma16<T>::mma(u[ct + 1], pl, b1);
        }
        const vc_exact_merge mg[2] = {vc_exact_merge_of(lq[0], mx[0], l[0]), vc_exact_merge_of(lq[1], mx[1], l[1])};
        bool finite = isfinite(mg[0].lse) && isfinite(mg[1].lse);
#pragma unroll
        for (int ct = 0; ct < CT; ++ct)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float2 o = vc_mma16<TO>::unpack(of[ct][r]);
                const float y0 = vc_exact_merge_out(mg[r], o.x, u[ct][2 * r]);
                const float y1 = vc_exact_merge_out(mg[r], o.y, u[ct][2 * r + 1]);
                finite &= isfinite(y0) && isfinite(y1);
                if (rg[r] < a.Sq) (r ? ob : oa)[4 * ct + t] = vc_mma16<TO>::pack(y0, y1);
            }
        if (t == 0) {
#pragma unroll
            for (int r = 0; r < 2; ++r)
                if (rg[r] < a.Sq) lse[rg[r]] = mg[r].lse;
        }
        if (__any_sync(0xffffffffu, !finite) && lane == 0) atomicOr(a.output_flag, 1u);
    }
}

cudaError_t vc_exact_order_launch(const vc_exact_args &a, int BH, int bf16, cudaStream_t s) {
    const dim3 grid((a.S + 255) / 256, BH);
    if (a.D == 128) {
        if (bf16) vc_key_norm<__nv_bfloat16, 128><<<grid, 256, 0, s>>>(a);
        else vc_key_norm<__half, 128><<<grid, 256, 0, s>>>(a);
    } else {
        if (bf16) vc_key_norm<__nv_bfloat16, 64><<<grid, 256, 0, s>>>(a);
        else vc_key_norm<__half, 64><<<grid, 256, 0, s>>>(a);
    }
    const int chunks = (a.S + VC_TOP_CHUNK - 1) / VC_TOP_CHUNK;
    vc_key_top<<<dim3(chunks, BH), VC_TOP_THREADS, 0, s>>>(a);
    vc_key_pick<<<BH, VC_PICK_THREADS, 0, s>>>(a);
    vc_key_place<<<dim3((a.S + VC_PLACE_CHUNK - 1) / VC_PLACE_CHUNK, BH), VC_PLACE_THREADS, 0, s>>>(a);
    return cudaGetLastError();
}

template <typename T, typename TO, int D>
static cudaError_t vc_exact_merge_one(const vc_exact_args &a, dim3 grid, cudaStream_t s) {
    vc_exact_merge_rows<T, TO, D><<<grid, 32 * VC_MERGE_WARPS, 0, s>>>(a);
    return cudaGetLastError();
}

template <int D>
static cudaError_t vc_exact_merge_t(const vc_exact_args &a, dim3 grid, int in_bf16, int out_bf16, cudaStream_t s) {
    if (in_bf16 && out_bf16) return vc_exact_merge_one<__nv_bfloat16, __nv_bfloat16, D>(a, grid, s);
    if (in_bf16) return vc_exact_merge_one<__nv_bfloat16, __half, D>(a, grid, s);
    if (out_bf16) return vc_exact_merge_one<__half, __nv_bfloat16, D>(a, grid, s);
    return vc_exact_merge_one<__half, __half, D>(a, grid, s);
}

cudaError_t vc_exact_merge_launch(const vc_exact_args &a, int BH, int in_bf16, int out_bf16, cudaStream_t s) {
    constexpr int rows = VC_MERGE_TILES * 16 * VC_MERGE_WARPS; /* a block's */
    const dim3 grid((a.Sq + rows - 1) / rows, BH);
    return a.D == 128 ? vc_exact_merge_t<128>(a, grid, in_bf16, out_bf16, s) : vc_exact_merge_t<64>(a, grid, in_bf16, out_bf16, s);
}
