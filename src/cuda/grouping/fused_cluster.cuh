/* fused_cluster.cuh - one work item of the fused path for a Lloyd iteration or the
 * final labelling: a tile of 128-token sub-tiles of one head, labelled against the
 * centroids by wgmma, its one-hot partial sums (iterations) or counts (final pass);
 * the CTA that completes the head's last tile reduces the partials in tile order
 * and publishes the next centroids (or the counting-sort offsets). */
#pragma once
#include <math.h>

#include "grouping/common.cuh"
#include "grouping/fused_args.cuh"
#include "grouping/fused_sync.cuh"
#include "grouping/fused_tiles.cuh"
#include "ptx/cp_async.cuh"

template <int D, bool FULL, bool ACC>
__device__ __forceinline__ void vc_km_cluster_item(const vc_km_fused_args &a, const CUtensorMap *vmap, uint64_t *vbar,
                                                 uint32_t &vpar, unsigned char *sm, int it, int bh, int tile) {
    typedef vc_km_smem<D> L;
    __nv_bfloat16 *cs = reinterpret_cast<__nv_bfloat16 *>(sm);                /* centroids */
    __nv_bfloat16 *vbuf = reinterpret_cast<__nv_bfloat16 *>(sm + L::CS);      /* [2] V sub-tiles */
    __nv_bfloat16 *oh = reinterpret_cast<__nv_bfloat16 *>(sm + L::CS + 2 * L::VB); /* one-hot */
    float *cn = reinterpret_cast<float *>(sm + L::CS + 2 * L::VB + L::OH);    /* [64] */
    int *cnt_s = reinterpret_cast<int *>(cn + VC_KM_FUSED_K);                          /* [64] */
    int *tot = cnt_s + VC_KM_FUSED_K;                                                  /* [64] */
    int *flag = tot + VC_KM_FUSED_K;                                                   /* [4] */
    uint16_t *lab16 = reinterpret_cast<uint16_t *>(flag + 4);                  /* [128] */

    const int K = FULL ? VC_KM_FUSED_K : a.K, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int qr = lane >> 2, qc = (lane & 3) * 2;
    const int wg = warp >> 2; /* warpgroup */
    constexpr bool accumulate = ACC; /* it < a.iters; a template so that no wgmma sits in a divergent branch */
    constexpr bool sums_wg = D == 128; /* D = 64: one 64-channel block, the sums by mma.sync */
    const int b = bh / a.H, h = bh % a.H;
    const char *vbase = reinterpret_cast<const char *>(a.v) + (b * a.vs0 + h * a.vs1) * 2;
    const int sb = (int)((int64_t)tile * a.nsub / a.P), se = (int)((int64_t)(tile + 1) * a.nsub / a.P);
    const int n = se - sb;
    const uint32_t cs_d = km_desc_lo((uint32_t)__cvta_generic_to_shared(cs)),
                   vb_d = km_desc_lo((uint32_t)__cvta_generic_to_shared(vbuf)),
                   oh_d = km_desc_lo((uint32_t)__cvta_generic_to_shared(oh));

    /* centroids (BF16, rows >= K zero) by cp.async and their norms; then the first V sub-tile */
    {
        const __nv_bfloat16 *cg = a.centb + (int64_t)bh * K * D;
        for (int i = tid; i < VC_KM_FUSED_K * (D / 8); i += VC_KM_THREADS) {
            int r = i / (D / 8), c8 = (i % (D / 8)) * 8;
            if (FULL || r < K)
                cp_async_16(&cs[km_sw<VC_KM_FUSED_K>(r, c8)], cg + r * D + c8);
            else
                *reinterpret_cast<uint4 *>(&cs[km_sw<VC_KM_FUSED_K>(r, c8)]) = make_uint4(0, 0, 0, 0);
        }
        if (tid < VC_KM_FUSED_K) {
            cn[tid] = tid < K ? __ldcg(a.cnorm + (int64_t)bh * K + tid) : INFINITY;
            cnt_s[tid] = 0;
        }
        if (tid < VC_KM_SUB) lab16[tid] = (uint16_t)VC_KM_BAD_LABEL;
        if (accumulate)
            for (int i = tid; i < L::OH / 16; i += VC_KM_THREADS) reinterpret_cast<uint4 *>(oh)[i] = make_uint4(0, 0, 0, 0);
        cp_async_commit();
        /* the scatter items use the V buffers as scratch (generic writes) before the TMA writes */
        km_fence_async_smem();
        __syncthreads();
        if (a.tma && tid == 0) vc_km_tma_v<D>(vmap, &vbar[0], vbuf, b, h, sb * VC_KM_SUB);
    }

    float accs[32];
#pragma unroll
    for (int e = 0; e < 32; ++e) accs[e] = 0.0f;
    const int chh = warp >> 2, g = warp & 3; /* mma.sync sums: cluster half, channel group */

    for (int j = 0; j < n; ++j) {
        const int s0 = (sb + j) * VC_KM_SUB;
        __nv_bfloat16 *vs = vbuf + (j & 1) * (L::VB / 2);
        const uint32_t vs_d = vb_d + (((j & 1) * L::VB) >> 4) + ((wg * 64 * 128) >> 4); /* this warpgroup's rows */
        const uint32_t vt_d = vb_d + (((j & 1) * L::VB) >> 4) + ((wg * (VC_KM_SUB * 128)) >> 4); /* its channels */
        if (!a.tma) { /* V not 16-byte aligned: 2-byte loads by every thread */
            for (int i = tid; i < VC_KM_SUB * D / 2; i += VC_KM_THREADS) {
                int r = (2 * i) / D, d = (2 * i) % D, s = s0 + r;
                __nv_bfloat162 pair;
                if (s < a.S) {
                    const void *row = vbase + (int64_t)s * a.vs2 * 2;
                    pair = __floats2bfloat162_rn(km_load_value(row, d, a.is_bf16), km_load_value(row, d + 1, a.is_bf16));
                } else {
                    pair = __floats2bfloat162_rn(0.0f, 0.0f);
                }
                *reinterpret_cast<__nv_bfloat162 *>(&vs[km_sw<VC_KM_SUB>(r, d)]) = pair;
            }
        }
        if (a.tma) { /* sub-tile j landed; buffer j & 1's parity flips with every use */
            mbarrier_wait(&vbar[j & 1], (vpar >> (j & 1)) & 1u);
            vpar ^= 1u << (j & 1);
        }
        if (j == 0) cp_async_wait<0>(); /* the centroids */
        if (a.tma && !a.is_bf16) /* FP16 -> BF16 in place, each thread its own chunks */
            for (int i = tid; i < VC_KM_SUB * (D / 8); i += VC_KM_THREADS) {
                int r = i / (D / 8), c8 = (i % (D / 8)) * 8;
                uint16_t *e = reinterpret_cast<uint16_t *>(&vs[km_sw<VC_KM_SUB>(r, c8)]);
#pragma unroll
                for (int q = 0; q < 8; ++q)
                    e[q] = __bfloat16_as_ushort(__float2bfloat16_rn(__half2float(__ushort_as_half(e[q]))));
            }
        if (j == 0 || !a.tma || !a.is_bf16)
            km_fence_async_smem(); /* this thread's shared writes (not the TMA's) -> visible to wgmma */
        if (accumulate && sums_wg) { /* the sums of sub-tile j-1 have read their V and one-hot */
            km_wgmma_wait0();
            km_reg_fence(accs);
        }
        __syncthreads(); /* sub-tile j visible; every warp is past sub-tile j-1 */
        if (a.tma && j + 1 < n && tid == 0)
            vc_km_tma_v<D>(vmap, &vbar[(j + 1) & 1], vbuf + ((j + 1) & 1) * (L::VB / 2), b, h, s0 + VC_KM_SUB);

        /* distances: warpgroup wg = tokens 64wg.. x all 64 centroids (B read once per
         * warpgroup); warp w holds tokens 16w.. of them */
        {
            float acc[32];
#pragma unroll
            for (int e = 0; e < 32; ++e) acc[e] = 0.0f;
            km_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const uint32_t koff = (kk & 3) * 32;
                const uint64_t da = km_desc_at(vs_d, (kk >> 2) * (VC_KM_SUB * 128) + koff);
                const uint64_t db = km_desc_at(cs_d, (kk >> 2) * (VC_KM_FUSED_K * 128) + koff);
                km_wgmma_64x64<0>(acc, da, db, kk > 0);
            }
            km_wgmma_commit();
            km_wgmma_wait0();
            km_reg_fence(acc);
            /* |c|^2 - 2 v.c with one rounding (2 v.c is exact): the same value as c - 2.0f * acc */
            float2 c2[8];
#pragma unroll
            for (int t = 0; t < 8; ++t)
                c2[t] = *reinterpret_cast<const float2 *>(&cn[t * 8 + qc]); /* INFINITY past K */
            int args[2];
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float best = INFINITY;
                int arg = 0;
#pragma unroll
                for (int t = 0; t < 8; ++t) {
                    if (t * 8 < K) {
                        const float d0 = __fmaf_rn(-2.0f, acc[4 * t + hf * 2], c2[t].x);
                        const float d1 = __fmaf_rn(-2.0f, acc[4 * t + hf * 2 + 1], c2[t].y);
                        if (d0 < best) { best = d0; arg = t * 8 + qc; }
                        if (d1 < best) { best = d1; arg = t * 8 + qc + 1; }
                    }
                }
#pragma unroll
                for (int o = 1; o <= 2; o <<= 1) {
                    float ob = __shfl_xor_sync(0xffffffffu, best, o);
                    int oa = __shfl_xor_sync(0xffffffffu, arg, o);
                    if (ob < best || (ob == best && oa < arg)) { best = ob; arg = oa; }
                }
                args[hf] = arg; /* every lane of the quad holds it now */
            }
            /* lane 0 of a quad writes the label of its row qr, lane 1 that of row qr + 8 (both
             * halves in one pass: half the issue of one writer per quad) */
            if ((lane & 3) < 2) {
                /* token r's column of the one-hot matrix is only touched by this thread */
                const int hf = lane & 1, arg = hf ? args[1] : args[0];
                const int r = warp * 16 + hf * 8 + qr;
                const bool valid = s0 + r < a.S;
                if (accumulate) {
                    const int old = lab16[r];
                    __nv_bfloat16 *ob = oh + (r >> 6) * (VC_KM_FUSED_K * 64); /* token block r / 64 */
                    if (old != (int)VC_KM_BAD_LABEL) ob[km_sw<VC_KM_FUSED_K>(old, r & 63)] = __float2bfloat16_rn(0.0f);
                    if (valid) ob[km_sw<VC_KM_FUSED_K>(arg, r & 63)] = __float2bfloat16_rn(1.0f);
                }
                lab16[r] = valid ? (uint16_t)arg : (uint16_t)VC_KM_BAD_LABEL;
                if (valid) atomicAdd(&cnt_s[arg], 1); /* integers: order-free */
            }
        }
        km_fence_async_smem();
        __syncthreads(); /* labels of sub-tile j visible */

        if (accumulate) {
            if (sums_wg) {
                /* onehot [64 clusters x 128 tokens] . V [128 tokens x 64 channels of warpgroup wg],
                 * accumulated over the tile; waited for before the next sub-tile's barrier */
                km_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < VC_KM_SUB / 16; ++kk) {
                    const uint64_t da = km_desc_at(oh_d, (kk >> 2) * (VC_KM_FUSED_K * 128) + (kk & 3) * 32);
                    const uint64_t db = km_desc_at(vt_d, kk * 16 * 128);
                    km_wgmma_64x64<1>(accs, da, db, 1);
                }
                km_wgmma_commit();
            } else if (chh * 32 < K) {
                constexpr int NCH = D / 4; /* channels per warp */
                const int br = (lane & 7) + ((lane >> 3) & 1) * 8, bc = g * NCH + (lane >> 4) * 8;
                const int orow = chh * 32 + (lane & 15), ocol = (lane >> 4) * 8;
                const bool m1 = FULL || chh * 32 + 16 < K;
#pragma unroll
                for (int k0 = 0; k0 < VC_KM_SUB; k0 += 16) {
                    uint32_t a0[4], a1[4];
                    const int tcol = k0 + ocol, tb = (tcol >> 6) * (VC_KM_FUSED_K * 64);
                    ldmatrix_x4(a0, oh + tb + km_sw<VC_KM_FUSED_K>(orow, tcol & 63));
                    if (m1) ldmatrix_x4(a1, oh + tb + km_sw<VC_KM_FUSED_K>(orow + 16, tcol & 63));
#pragma unroll
                    for (int n0 = 0; n0 < NCH; n0 += 16) {
                        uint32_t bf[4];
                        ldmatrix_x4_trans(bf, vs + km_sw<VC_KM_SUB>(k0 + br, bc + n0));
                        const uint32_t b01[2] = {bf[0], bf[1]}, b23[2] = {bf[2], bf[3]};
                        mma_bf16_16816(*reinterpret_cast<float(*)[4]>(&accs[(n0 / 8) * 4]), a0, b01);
                        mma_bf16_16816(*reinterpret_cast<float(*)[4]>(&accs[(n0 / 8 + 1) * 4]), a0, b23);
                        if (m1) {
                            mma_bf16_16816(*reinterpret_cast<float(*)[4]>(&accs[16 + (n0 / 8) * 4]), a1, b01);
                            mma_bf16_16816(*reinterpret_cast<float(*)[4]>(&accs[16 + (n0 / 8 + 1) * 4]), a1, b23);
                        }
                    }
                }
            }
        } else {
            /* final labelling: labels out (the scatter items read them) */
            if (tid < VC_KM_SUB && s0 + tid < a.S) a.labels[(int64_t)bh * a.S + s0 + tid] = lab16[tid];
        }
    }

    /* this tile's partial sums and counts */
    if (accumulate && sums_wg) {
        km_wgmma_wait0();
        km_reg_fence(accs);
    }
    __syncthreads();
    if (accumulate) {
        float *dst = a.part_sum + ((int64_t)bh * a.P + tile) * K * D;
        if (sums_wg) {
            /* thread: clusters 16(w%4) + g (+8), channels 64wg + 8j + 2t (+1) */
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int c = g * 16 + hh * 8 + qr;
                if (c < K)
#pragma unroll
                    for (int t = 0; t < 8; ++t)
                        __stcg(reinterpret_cast<float2 *>(&dst[c * D + wg * 64 + t * 8 + qc]),
                               make_float2(accs[4 * t + 2 * hh], accs[4 * t + 2 * hh + 1]));
            }
        } else if (chh * 32 < K) {
            constexpr int NCH = D / 4;
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                if (chh * 32 + m * 16 >= K) break;
                const int c0 = chh * 32 + m * 16 + qr;
#pragma unroll
                for (int t = 0; t < NCH / 8; ++t) {
                    const int col = g * NCH + t * 8 + qc;
                    __stcg(reinterpret_cast<float2 *>(&dst[c0 * D + col]), make_float2(accs[m * 16 + t * 4], accs[m * 16 + t * 4 + 1]));
                    __stcg(reinterpret_cast<float2 *>(&dst[(c0 + 8) * D + col]), make_float2(accs[m * 16 + t * 4 + 2], accs[m * 16 + t * 4 + 3]));
                }
            }
        }
    }
    const int64_t cbase = ((int64_t)bh * a.P) * K;
    if (tid < K) __stcg(&a.part_cnt[cbase + (int64_t)tile * K + tid], cnt_s[tid]);
    __threadfence();
    __syncthreads();
    if (tid == 0) flag[0] = atomicAdd(&a.done[bh], 1);
    __syncthreads();
    if (flag[0] != (it + 1) * a.P - 1) return;

    /* the last tile of (it, bh): reduce (or the offsets after the final labelling) */
    __threadfence();
    if (tid < K) {
        int s = 0;
        for (int t = 0; t < a.P; ++t) s += __ldcg(&a.part_cnt[cbase + (int64_t)t * K + tid]);
        tot[tid] = s;
    }
    __syncthreads();
    if (accumulate) {
        const int nv4 = K * D / 4; /* a multiple of 256 */
        const float4 *src = reinterpret_cast<const float4 *>(a.part_sum + (int64_t)bh * a.P * K * D);
        float4 *cent = reinterpret_cast<float4 *>(a.cent + (int64_t)bh * K * D);
        uint2 *centb = reinterpret_cast<uint2 *>(a.centb + (int64_t)bh * K * D);
        for (int base = 0; base < nv4; base += VC_KM_RED * VC_KM_THREADS) {
            double s[VC_KM_RED][4];
#pragma unroll
            for (int u = 0; u < VC_KM_RED; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[u][e] = 0.0;
            for (int t = 0; t < a.P; ++t) {
#pragma unroll
                for (int u = 0; u < VC_KM_RED; ++u) {
                    const int i = base + u * VC_KM_THREADS + tid;
                    if (i < nv4) {
                        const float4 x = __ldcg(src + (int64_t)t * nv4 + i);
                        s[u][0] += x.x; s[u][1] += x.y; s[u][2] += x.z; s[u][3] += x.w;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < VC_KM_RED; ++u) {
                const int i = base + u * VC_KM_THREADS + tid;
                if (i >= nv4) break; /* warp-uniform */
                const int c = i / (D / 4), cntc = tot[c];
                float4 x = __ldcg(cent + i);
                if (cntc > 0) {
                    const double dn = (double)cntc;
                    x = make_float4((float)(s[u][0] / dn), (float)(s[u][1] / dn), (float)(s[u][2] / dn),
                                    (float)(s[u][3] / dn));
                }
                __stcg(cent + i, x);
                const __nv_bfloat162 lo = __floats2bfloat162_rn(x.x, x.y), hi = __floats2bfloat162_rn(x.z, x.w);
                __stcg(centb + i, make_uint2(*reinterpret_cast<const uint32_t *>(&lo), *reinterpret_cast<const uint32_t *>(&hi)));
                const float2 fl = __bfloat1622float2(lo), fh = __bfloat1622float2(hi);
                float q = fl.x * fl.x;
                q = fmaf(fl.y, fl.y, q);
                q = fmaf(fh.x, fh.x, q);
                q = fmaf(fh.y, fh.y, q);
#pragma unroll
                for (int o = D / 8; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
                if ((lane & (D / 4 - 1)) == 0) __stcg(a.cnorm + (int64_t)bh * K + c, q);
            }
        }
#if VC_KM_DISCARD_PARTIALS
        __syncthreads(); /* every thread is done reading the partials */
        {
            const char *pb = reinterpret_cast<const char *>(src);
            const int lines = a.P * K * D * 4 / 128; /* K * D * 4 is a multiple of 4 KB */
            for (int i = tid; i < lines; i += VC_KM_THREADS) l2_discard_line(pb + (int64_t)i * 128);
        }
#endif
    } else {
        /* counting sort: offsets[(bh, tile, c)] = sum of earlier clusters + this cluster's earlier tiles */
        if (tid == 0) km_exclusive_scan(tot, K);
        __syncthreads();
        if (tid < K) {
            int run = tot[tid];
            for (int t = 0; t < a.P; ++t) {
                __stcg(&a.offsets[cbase + (int64_t)t * K + tid], run);
                run += __ldcg(&a.part_cnt[cbase + (int64_t)t * K + tid]);
            }
        }
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) km_st_release(&a.ready[bh], it + 1);
}
