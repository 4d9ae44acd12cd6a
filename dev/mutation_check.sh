#!/usr/bin/env bash
# dev/mutation_check.sh - do the tests catch real bugs?  (a dev script, not CI)
#
# Copies the tree (tracked and untracked-but-not-ignored files) to a scratch
# directory, builds it once (CPU only, Release), checks that ctest passes,
# then for each mutation below: applies it (a sed on one file), rebuilds,
# runs ctest (for a file under python/: the Python tests, on the CPU), restores
# the file.  A mutation is "caught" when the tests fail.
# A sed that does not change its file is reported as "NOT APPLIED" (the
# source moved on: fix the pattern).  Equivalent mutations (no input can see
# them) are left out: e.g. rounding a 16-key sum of E4M3 P values to FP32,
# which is always exact (2^-9 .. 2^12 spans 22 bits), or Q groups laid over
# 128 rows (blk * 32 + (r / 16) * 8 is (row / 16) * 8 for any 64-row block).
#
#   dev/mutation_check.sh            all mutations
#   dev/mutation_check.sh NAME...    only those
#   MUT_DIR=/tmp/x MUT_JOBS=2 dev/mutation_check.sh
# Exit status: 0 when every applied mutation was caught.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${MUT_DIR:-/tmp/vcattn-mutation-$$}"
jobs="${MUT_JOBS:-2}"

# name @ file @ sed expression (applied with sed -E -i) @ what the bug is
mutations=(
  "ref_v_with_k_strides@src/reference.c@s/vc_row\(p->v, p->v_stride/vc_row(p->v, p->k_stride/@FP64 reference reads V with K's strides"
  "sim_v_with_k_strides@src/simulate_operands.c@s/vc_row\(p->v, p->v_stride, c->b, c->h, orig_token/vc_row(p->v, p->k_stride, c->b, c->h, orig_token/@simulation reads V with K's strides"
  "ref_o_with_q_strides@src/reference.c@s/p->o \+ b \* p->o_stride\[0\] \+ h \* p->o_stride\[1\] \+ r \* p->o_stride\[2\]/p->o + b * p->q_stride[0] + h * p->q_stride[1] + r * p->q_stride[2]/@FP64 reference writes O with Q's strides"
  "sim_o_with_q_strides@src/simulate_tile.c@s/p->o \+ c->b \* p->o_stride\[0\] \+ c->h \* p->o_stride\[1\] \+ orw \* p->o_stride\[2\]/p->o + c->b * p->q_stride[0] + c->h * p->q_stride[1] + orw * p->q_stride[2]/@simulation writes O with Q's strides"
  "sage2_q_group_pairs@src/simulate_internal.h@s/return blk \* 32 \+ \(r \/ 16\) \* 8 \+ \(r % 8\);/return blk * 32 + (r \/ 16) * 8 + (r % 16) \/ 2;/@SageAttention2 Q groups = row pairs {2g, 2g+1} instead of {g, g+8}"
  "sage2_q_group_stride32@src/simulate_internal.h@s/return blk \* 32 \+ \(r \/ 16\) \* 8 \+ \(r % 8\);/return blk * 32 + (r % 32);/@SageAttention2 Q groups = rows {r, r+32} of a 64-row block"
  "sage2_k_group_mod4@src/simulate_internal.h@s/\(key_in_block % 8\) \/ 2/key_in_block % 4/@SageAttention2 K groups = key % 4 instead of (key % 8) / 2"
  "kmeans_one_update_fewer@src/vsmooth_plan.c@s/if \(it == c->iterations \|\| !changed\) break;/if (it + 1 == c->iterations || !changed) break;/@k-means planner runs one Lloyd update fewer"
  "fp16_mean_guard_removed@src/numerics.h@s/if \(mean_amax > s \* VC_FP16_MAX\) \{/if (0) {/@V-Smooth: FP16 overflow guard of the block means removed"
  "npy_f64_byte_order@src/npy.c@s/for \(int k = 7; k >= 0; --k\) u = \(u << 8\) \| b\[k\];/for (int k = 0; k < 8; ++k) u = (u << 8) | b[k];/@.npy float64 decoded with the bytes reversed"
  "npy_f64_range_check_removed@src/npy.c@s/if \(isfinite\(x\) && !isfinite\(y\)\) \{/if (0) {/@.npy float64 beyond float32 silently becomes Inf"
  "npy_fortran_reason_wrong@src/npy.c@s/return npy_fail\(e, VCATTN_NPY_FORTRAN_ORDER,/return npy_fail(e, VCATTN_NPY_BAD_HEADER,/@.npy Fortran order reported as a malformed header"
  "blockmax_no_descent@src/softmax_numerics.h@s/return d < VC_BLOCKMAX_DESCENT \? d : VC_BLOCKMAX_DESCENT;/return 0.0f;/@block-max scale degenerates to the running max (d = 0)"
  "blockmax_unbounded_descent@src/softmax_numerics.h@s/return d < VC_BLOCKMAX_DESCENT \? d : VC_BLOCKMAX_DESCENT;/return VC_BLOCKMAX_DESCENT;/@block-max descent not bounded by 64 over the row"
  "blockmax_rule_ignored@src/simulate_tile.c@s/if \(cfg->p_scale == VCATTN_P_SCALE_BLOCK_MAX\) \{/if (0) {/@simulation ignores the block-max scale (running max)"
  "group_coef_without_alpha@src/simulate_tile.c@s/for \(int s = 0; s < VC_RESTORE_GROUP; \+\+s\) cf\[s\] = \(float\)alpha \* cf\[s\];/for (int s = 0; s < VC_RESTORE_GROUP; ++s) cf[s] = cf[s];/@grouped mean restore: the pending coefficients miss the alphas of later blocks"
  "group_last_partial_dropped@src/simulate_tile.c@s/if \(closes \|\| kb == c->hd\.nblk - 1\) \{/if (closes) {/@grouped mean restore: the last, partial group never restored"
  "group_first_block_dropped@src/simulate_tile.c@s/for \(int64_t s = 0; s <= b - g0; \+\+s\)/for (int64_t s = 1; s <= b - g0; ++s)/@grouped mean restore: each group's first block's mean term lost"
  "blockmax_group_floor_dropped@src/softmax_numerics.h@s/return fmaxf\(m, group_max - VC_BLOCKMAX_GROUP_FLOOR\);/return m;/@block-max group floor lost (the FP16 coefficient of the grouped restore overflows)"
  "blockmax_scale_below_block_max@src/softmax_numerics.h@s/return fmaxf\(m_prev - descent, block_max\);/return m_prev - descent;/@block-max scale may sit below the block's max (codes above the top)"
  "npy_truncation_reason_wrong@src/npy.c@s/return npy_fail\(e, VCATTN_NPY_TRUNCATED,/return npy_fail(e, VCATTN_NPY_BAD_HEADER,/@.npy short data reported as a malformed header"
  "e4m3_subnormal_half_flushed@src/numerics.h@s/if \(e < q - 1\) return 0\.0f;/if (e < q) return 0.0f;/@minifloat rounding flushes [quantum\/2, quantum) to 0"
  "minifloat_round_half_up@src/numerics.h@s/u = \(u \+ \(1u << \(drop - 1\)\) - 1u \+ lsb\) \& ~/u = (u + (1u << (drop - 1))) \& ~/@minifloat rounding: ties round up instead of to even"
  "e4m3_encode_subnormal_threshold@src/numerics.h@s/if \(r < 0\.015625f\) \{/if (r < 0.0078125f) {/@E4M3 encoder: [2^-7, 2^-6) coded as normals"
  "int8_clamp_minus_128@src/numerics.h@s/if \(r < -127\.0f\) r = -127\.0f;/if (r < -128.0f) r = -128.0f;/@INT8 codes clamp at -128 (asymmetric)"
  "sage_int8_round_half_even@src/numerics.h@s/float r = roundf\(x \/ scale\);/float r = rintf(x \/ scale);/@SageAttention2 INT8: ties to even instead of away from zero"
  "sage_int8_scale_eps_dropped@src/numerics.h@s/return amax \/ 127\.0f \+ 1e-7f;/return amax \/ 127.0f;/@SageAttention2 INT8 scale without its +1e-7"
  "bf16_round_half_up@src/numerics.h@s/u \+= 0x7FFFu \+ \(\(u >> 16\) \& 1u\);/u += 0x8000u;/@BF16 rounding: ties round up instead of to even"
  "fp16_range_exp_off_by_one@src/numerics.h@s/return ilogbf\(amax\) - 14;/return ilogbf(amax) - 15;/@FP16 range shift one octave too high (the largest mean saturates)"
  "v_channel_zero_scale@src/numerics.h@s/if \(!\(amax > 0\.0f\)\) s = 1\.0f;/if (0) s = 1.0f;/@V channel scale 0 for an all-zero channel"
  "expcast_const_wrong@src/softmax_numerics.h@s/#define VC_EXPCAST_CONST 119\.65f/#define VC_EXPCAST_CONST 119.5f/@ExpCast's kernel constant no longer 120 + beta"
  "expcast_sat_scale_2e-23@src/softmax_numerics.h@s/#define VC_EXPCAST_SAT_SCALE 0x1p-24f/#define VC_EXPCAST_SAT_SCALE 0x1p-23f/@ExpCast's saturated form scaled by 2^-23 (FP16 subnormal codes doubled)"
  "expcast_direct_branch_late@src/softmax_numerics.h@s/#define VC_EXPCAST_MAGIC_MAX_A 0\.0078125f/#define VC_EXPCAST_MAGIC_MAX_A 0.5f/@ExpCast keeps the one-FMA bracket for huge score scales"
  "tail_slope_wrong@src/softmax_numerics.h@s/#define VC_EXPCAST_TAIL_SLOPE 0\.2197265625f/#define VC_EXPCAST_TAIL_SLOPE 0.25f/@ExpCast tail line with the wrong slope"
  "rowsum_split_single_fp16@src/softmax_numerics.h@s/return vc_fp16_round\(hi\) \+ vc_fp16_round\(r - hi\);/return vc_fp16_round(r);/@mean restore's row sum in one FP16 (11 bits) instead of hi + lo"
  "tail_p_scale_448@src/softmax_numerics.h@s/#define VC_EXPCAST_TAIL_P_SCALE 430\.53896f/#define VC_EXPCAST_TAIL_P_SCALE 448.0f/@ExpCast tail: P scale taken as 448 (LSE bias)"
  "e2m1_no_subnormal@src/numerics.h@s/vc_round_minifloat_abs\(a, 1, 0\)/vc_round_minifloat_abs(a, 1, 1)/@E2M1 rounding loses its subnormal 0.5"
  "ref_lse_without_max@src/reference.c@s/const float lse = \(float\)\(mx\[r - r0\] \+ log\(sum\[r - r0\]\)\);/const float lse = (float)(log(sum[r - r0]));/@FP64 reference LSE misses the row max"
  "ref_lse_log2@src/reference.c@s/\+ log\(sum\[r - r0\]\)\);/+ log2(sum[r - r0]));/@FP64 reference LSE in log2 units"
  "ref_lse_row_index@src/reference.c@s/p->lse\[\(b \* p->heads \+ h\) \* c->n_out \+ r\] = lse;/p->lse[(b * p->heads + h) * c->n_out + r - r0] = lse;/@FP64 reference writes each tile's LSE over the first rows"
  "psnr_10log@src/metrics.c@s/20\.0 \* log10\(peak \/ rmse\)/10.0 * log10(peak \/ rmse)/@PSNR with 10 log10 of an amplitude ratio"
  "rel_l2_squared@src/metrics.c@s/sqrt\(err2 \/ ref2\)/(err2 \/ ref2)/@rel-L2 without the square root"
  "budget_value_vs_ref@src/metrics.c@s/val2 \+= \(e - o\) \* \(e - o\);/val2 += (r - o) * (r - o);/@error budget: value error measured against the reference"
  "cosine_unnormalized@src/metrics.c@s/dot \/ sqrt\(ref2 \* out2\)/dot \/ ref2/@cosine not normalized by |out|"
  "sim_alpha_inverted@src/simulate_tile.c@s/R\(c, exp2\(R\(c, m\[i\] - m_new\)\)\)/R(c, exp2(R(c, m_new - m[i])))/@online softmax rescale 2^(m_new - m) instead of 2^(m - m_new)"
  "sim_lse_bias_dropped@src/simulate_tile.c@s/double lse2 = m\[i\] \+ log2\(l\[i\]\) - c->lse_log2_bias;/double lse2 = m[i] + log2(l[i]);/@simulation LSE keeps the P format's scale"
  "sim_lse_kmean_dropped@src/simulate_tile.c@s/\(lse2 \* LN2 \+ qk \* vc_softmax_scale\(p\)\)/(lse2 * LN2)/@simulation LSE misses q . mean(k) after K smoothing"
  "sim_l_partials_order@src/simulate_tile.c@s/l\[i\] = \(double\)\(\(float\)l4\[i\]\[0\] \+ \(float\)l4\[i\]\[1\]\) \+ \(double\)\(\(float\)l4\[i\]\[2\] \+ \(float\)l4\[i\]\[3\]\);/l[i] = (double)(((float)l4[i][0] + (float)l4[i][1]) + (float)l4[i][2]) + (double)((float)l4[i][3]);/@row sum's four partials added in another order (FP32 rounding)"
  "sim_blockmax_without_offset@src/simulate_tile.c@s/const double bmax = R\(c, rowmax - c->p_log2_offset\);/const double bmax = R(c, rowmax);/@block scale ignores the P format's log2 offset"
  "sim_channel_scale_dropped@src/simulate_tile.c@s/out\[d\] = \(float\)\(t->o\[i \* D \+ d\] \* inv_l \* hd->chan_scale\[d\]\);/out[d] = (float)(t->o[i * D + d] * inv_l);/@epilogue forgets V's channel scale"
  "sim_kmean_unrounded@src/simulate_operands.c@s/hd->kmean\[d\] = \(double\)\(float\)\(hd->kmean\[d\] \/ \(double\)Skv\);/hd->kmean[d] = hd->kmean[d] \/ (double)Skv;/@K mean kept in FP64 (the kernel holds it in FP32)"
  "sim_vmean_over_full_block@src/simulate_operands.c@s/mu\[d\] = R\(c, mu\[d\] \/ \(double\)\(j1 - j0\)\);/mu[d] = R(c, mu[d] \/ (double)VC_BLOCK_K);/@V block mean divides by 128 in a short last block"
  "sim_k_groups_collapsed@src/simulate_operands.c@s/int64_t groups = cfg->qk_granularity == VCATTN_QK_GRANULARITY_THREAD \? 4 : 1;/int64_t groups = 1;/@K per-thread groups collapse to one per block"
  "schedule_window_floor@src/schedule.c@s/int window = \(int\)ceil\(/int window = (int)floor(/@grouping window rounded down"
  "schedule_refresh_phase@src/schedule.c@s/step % s->refresh_every == 0/step % s->refresh_every == 1/@grouping at steps 1, 5, 9 instead of 0, 4, 8"
  "kmeans_ties_to_last@src/vsmooth_plan.c@s/if \(dist < best\[t\]\) \{/if (dist <= best[t]) {/@k-means ties go to the highest centroid index"
  "kmeans_empty_cluster_zeroed@src/vsmooth_plan.c@s/if \(w->counts\[j\] == 0\) continue;/if (w->counts[j] == 0) { for (int64_t d = 0; d < d_n; ++d) w->cen[j * d_n + d] = 0.0; continue; }/@k-means: an empty cluster's centroid moves to the origin"
  "kmeans_origin_unrounded@src/vsmooth_plan.c@s/w->origin\[d\] = \(double\)w->originf\[d\];/w->origin[d] = w->origin[d] \/ (double)s_n;/@k-means origin not rounded to float"
  "params_head_dim_96@src/params.c@s/if \(p->head_dim != 64 \&\& p->head_dim != 128\)/if (p->head_dim != 64 \&\& p->head_dim != 96 \&\& p->head_dim != 128)/@head_dim 96 accepted (the tiles assume 64 or 128)"
  "rows_unsorted_accepted@src/params.c@s/\(i > 0 \&\& rows\[i\] <= rows\[i - 1\]\)/(i > 0 \&\& rows[i] < rows[i - 1])/@sampled rows may repeat"
  "strided_rows_off@src/params.c@s/rows\[i\] = i \* seq_q \/ n_rows;/rows[i] = (i * seq_q + n_rows - 1) \/ n_rows;/@strided rows rounded up (the last may pass seq_q - 1 differently)"
  "softmax_scale_default_dim@src/params.c@s/1\.0 \/ sqrt\(\(double\)p->head_dim\)/1.0 \/ (double)p->head_dim/@default softmax scale 1\/D instead of 1\/sqrt(D)"
  "plan_warm_start_ignored@src/plan.c@s/km\.init_centroids = plan->have\[layer\] \? cent : NULL;/km.init_centroids = NULL;/@CPU plan never warm-starts from the last grouping"
  "plan_permutation_of_layer0@src/plan.c@s/\*perm = plan->have\[layer\] \? plan->perm \+ \(size_t\)\(layer \* plan->batch \* plan->heads \* plan->seq\) : NULL;/*perm = plan->have[layer] ? plan->perm : NULL;/@CPU plan hands every layer layer 0's permutation"
  "plan_have_never_set@src/plan.c@s/if \(st == VCATTN_STATUS_SUCCESS\) plan->have\[layer\] = 1;/(void)st;/@CPU plan forgets that a layer was grouped"
  "sim_perm_duplicates_accepted@src/simulate.c@s/if \(perm\[j\] < 0 \|\| perm\[j\] >= n \|\| seen\[perm\[j\]\]\) return 0;/if (perm[j] < 0 || perm[j] >= n) return 0;/@simulation accepts a permutation with repeated keys"
  "sim_restore_single_for_plain_expcast@src/p_path.h@s/^#define VC_PP_GROUPED_RESTORE\(pp\) \(VC_PP_IS\(pp, E4M3\) \|\| VC_PP_EXPCAST_CODES\(pp\)\)/#define VC_PP_GROUPED_RESTORE(pp) (VC_PP_IS(pp, E4M3) || VC_PP_IS(pp, EXPCAST_TAIL) || VC_PP_IS(pp, SPLIT))/@plain ExpCast simulated with the single restore (its kernel restores eight blocks per instruction)"
  "sim_restore_single_for_split@src/p_path.h@s/^#define VC_PP_GROUPED_RESTORE\(pp\) \(VC_PP_IS\(pp, E4M3\) \|\| VC_PP_EXPCAST_CODES\(pp\)\)/#define VC_PP_GROUPED_RESTORE(pp) (VC_PP_IS(pp, E4M3) || VC_PP_IS(pp, EXPCAST) || VC_PP_IS(pp, EXPCAST_TAIL))/@the split simulated with the single restore (its kernel restores eight blocks per instruction)"
  "split_all_keys_exp@src/softmax_numerics.h@s/return \(key_in_block \& 16\) == 0 \&\& \(key_in_block >> 5\) \* 16 \+ \(key_in_block \& 15\) < VC_SPLIT_EXP_KEYS;/return 1;/@the split writes every key by the exp path"
  "split_no_keys_exp@src/softmax_numerics.h@s/return \(key_in_block \& 16\) == 0 \&\& \(key_in_block >> 5\) \* 16 \+ \(key_in_block \& 15\) < VC_SPLIT_EXP_KEYS;/return 0;/@the split writes every key by ExpCast"
  "split_more_keys_exp@src/softmax_numerics.h@s/#define VC_SPLIT_EXP_KEYS 32 /#define VC_SPLIT_EXP_KEYS 48 /@the split writes 3\/8 of the keys by the exp path (the kernel: 1\/4)"
  "split_exp_keys_paper_scale@src/softmax_numerics.h@s/#define VC_SPLIT_EXP_LOG2_OFFSET 8\.001472f/#define VC_SPLIT_EXP_LOG2_OFFSET 8.014338f/@the split's exp keys in the paper-beta ExpCast's scale, 1% off the split's codes"
  "split_exp_keys_at_448@src/softmax_numerics.h@s/#define VC_SPLIT_EXP_LOG2_OFFSET 8\.001472f/#define VC_SPLIT_EXP_LOG2_OFFSET 8.807f/@the split's exp keys with SageAttention2's 448 offset"
  "split_expcast_paper_beta@src/softmax_numerics.h@s/#define VC_SPLIT_EXPCAST_CONST 119\.547f/#define VC_SPLIT_EXPCAST_CONST 119.65f/@the split's ExpCast codes with the paper's beta: the top key 0.9% light against the rest"
  "sim_split_expcast_plain_const@src/simulate_tile.c@s/expcast_score_code\(0, VC_SPLIT_EXPCAST_CONST,/expcast_score_code(0, VC_EXPCAST_CONST,/@the simulation's split takes the paper's constant (the kernel: the split's)"
  "sim_blockmax_e4m3_top_at_448@src/p_path.h@s/\(VC_PP_BLOCK_MAX\(pp\) \? VC_BLOCKMAX_E4M3_P_LOG2_OFFSET : VC_SAGE2_P_LOG2_OFFSET\)/(VC_PP_BLOCK_MAX(pp) ? VC_SAGE2_P_LOG2_OFFSET : VC_SAGE2_P_LOG2_OFFSET)/@vsmooth-blockmax-8bit with the block max at 448 (past the grouped restore's FP16 bound)"
  "sim_sage3_offset_as_sage2@src/p_path.h@s/: VC_PP_IS\(pp, NVFP4\) \? VC_SAGE3_P_LOG2_OFFSET/: VC_PP_IS(pp, NVFP4) ? VC_SAGE2_P_LOG2_OFFSET/@SageAttention3's P offset taken from SageAttention2"
  "sim_blockmax_with_tail_accepted@src/simulate.c@s/        cfg->p_format != VCATTN_P_FORMAT_EXPCAST \&\& cfg->p_format != VCATTN_P_FORMAT_SPLIT\)/        cfg->p_format != VCATTN_P_FORMAT_EXPCAST \&\& cfg->p_format != VCATTN_P_FORMAT_SPLIT \&\& cfg->p_format != VCATTN_P_FORMAT_EXPCAST_TAIL)/@block-max scale accepted with the tail line (codes up to 448 break its descent bound)"
  "sim_q_smooth_mean_over_valid_rows@src/simulate_operands.c@s/qm\[d\] = \(float\)\(s \/ VC_TILE_Q\);/qm[d] = (float)(s \/ rows);/@Q smoothing mean of a short tile over its valid rows (the kernel averages the zero-padded 128)"
  "metrics_peak_from_output@src/metrics.c@s/if \(fabs\(r\) > peak\) peak = fabs\(r\);/if (fabs(o) > peak) peak = fabs(o);/@PSNR peak taken from the output instead of the reference"
  "budget_share_swapped@src/metrics.c@s/val2 \/ \(val2 \+ prob2\)/prob2 \/ (val2 + prob2)/@error budget's value share is the probability share"
  "schedule_keep_demean_default_off@src/schedule.c@s/s->keep_demean_after_window = 1;/s->keep_demean_after_window = 0;/@schedule default turns V-Smooth off after the window"
  "schedule_fraction_default@src/schedule.c@s/s->group_fraction = 0\.25;/s->group_fraction = 0.2;/@schedule default window 20% instead of the paper's 25%"
  "npy_f16_as_bf16@src/npy.c@s/out\[i \+ j\] = dtype == NPY_F16 \? vc_fp16_to_f32\(u\) : vc_bf16_to_f32\(u\);/out[i + j] = vc_bf16_to_f32(u);/@.npy float16 decoded as bfloat16"
  "npy_big_endian_reason_lost@src/npy.c@s/if \(d\[0\] == '>' \&\&/if (0 \&\&/@.npy big-endian data reported as an unsupported dtype"
  "fp16_to_f32_subnormal@src/numerics.h@s/else if \(e == 0\) mag = ldexpf\(\(float\)m, -24\);/else if (e == 0) mag = ldexpf((float)m, -25);/@float16 subnormals decoded one octave low"
  "e4m3_decode_subnormal@src/numerics.h@s/mag = ldexpf\(\(float\)m, -9\);/mag = ldexpf((float)m, -10);/@E4M3 subnormals decoded one octave low"
  "nvfp4_block_scale_unrounded@src/numerics.h@s/float block_scale = vc_e4m3_decode\(sc\) \* tensor_scale;/float block_scale = amax \/ VC_E2M1_MAX;/@NVFP4 block scale not rounded to E4M3"
  "py_plan_warm_start_ignored@python/vcattn/plan.py@s/            init = self\.centroids$/            init = None/@Python plan never warm-starts k-means"
  "py_plan_regroups_every_call@python/vcattn/plan.py@s/action = REUSE  # one grouping per step/action = GROUP  # one grouping per step/@Python plan groups again on every call of a grouping step"
  "py_cpu_sm_scale_ignored@python/vcattn/_cpu.py@s/        p\.softmax_scale = sm_scale$/        p.softmax_scale = 0.0/@CPU path drops the caller's sm_scale"
  # Python (a mutation under python/ runs the Python tests on the CPU instead of ctest)
  "py_gpu_nhd_strides@python/vcattn/_gpu.py@s/return \(s\[0\], s\[1\], s\[2\]\) if layout == \"HND\" else \(s\[0\], s\[2\], s\[1\]\)/return (s[0], s[1], s[2])/@CUDA path reads NHD tensors with HND strides"
  "py_gpu_v_with_k_strides@python/vcattn/_gpu.py@s/p\.v_stride\[:\] = _bhsd_strides\(v, layout\)/p.v_stride[:] = _bhsd_strides(k, layout)/@CUDA path gives V K's strides"
  "py_gpu_o_with_q_strides@python/vcattn/_gpu.py@s/p\.o_stride\[:\] = _bhsd_strides\(out, layout\)/p.o_stride[:] = _bhsd_strides(q, layout)/@CUDA path writes O with Q's strides"
  "py_cpu_nhd_axes@python/vcattn/_tensors.py@s/_AXES = \{\"HND\": \(0, 1, 2\), \"NHD\": \(0, 2, 1\)\}/_AXES = {\"HND\": (0, 1, 2), \"NHD\": (0, 1, 2)}/@CPU path reads NHD as HND"
  "py_merge_weights_swapped@python/vcattn/core.py@s/a1, a2 = w1 \/ tot, w2 \/ tot/a1, a2 = w2 \/ tot, w1 \/ tot/@merge_attention weighs each part by the other's LSE"
  "py_merge_empty_rows_nan@python/vcattn/core.py@s/tot = np\.where\(tot > 0, tot, 1\.0\)/tot = tot/@merge_attention: rows with no keys on either side give 0\/0"
  "py_ring_seq_axis_hnd@python/vcattn/parallel.py@s/return 2 if layout == \"HND\" else 1/return 2/@sequence parallel splits NHD tensors along heads"
)

log() { printf '%s\n' "$*" >&2; }

rm -rf "$work"
mkdir -p "$work/src"
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$root" && git ls-files -z --cached --others --exclude-standard | \
        xargs -0 -I{} cp --parents -P {} "$work/src/" 2>/dev/null) || true
else # a plain tree (e.g. `git archive` of an older commit)
    cp -a "$root/." "$work/src/"
fi
cd "$work/src" || exit 2
log "== tree copied to $work/src; building (Release, -DVCATTN_CUDA=OFF)"
cmake -S . -B ../build -DCMAKE_BUILD_TYPE=Release -DVCATTN_CUDA=OFF >/dev/null || exit 2
if ! cmake --build ../build -j "$jobs" >../build.log 2>&1; then log "baseline build failed: $work/build.log"; exit 2; fi
if ! ctest --test-dir ../build >../baseline.log 2>&1; then log "baseline ctest fails: $work/baseline.log"; exit 2; fi
log "== baseline passes"

want=("$@")
# the Python tests must pass on the baseline before a Python mutation can count as caught
for m in "${mutations[@]}"; do
    IFS='@' read -r name file _ <<<"$m"
    [[ "$file" == python/* ]] || continue
    if ((${#want[@]})); then
        hit=0; for w in "${want[@]}"; do [[ "$w" == "$name" ]] && hit=1; done
        ((hit)) || continue
    fi
    if ! VCATTN_LIBRARY=../build/libvcattn.so python3 -m pytest python/tests -q -x -p no:cacheprovider \
            >../baseline.pytest.log 2>&1; then
        log "baseline Python tests fail: $work/baseline.pytest.log"; exit 2
    fi
    log "== baseline Python tests pass"
    break
done
caught=0; missed=0; skipped=0; rows=()
for m in "${mutations[@]}"; do
    IFS='@' read -r name file expr what <<<"$m"
    if ((${#want[@]})); then
        hit=0; for w in "${want[@]}"; do [[ "$w" == "$name" ]] && hit=1; done
        ((hit)) || continue
    fi
    cp "$file" "$file.orig"
    sed -E -i "$expr" "$file"
    if cmp -s "$file" "$file.orig"; then
        result="NOT APPLIED"; skipped=$((skipped + 1))
    elif [[ "$file" == python/* ]]; then
        # the package over the baseline library (rebuilt: a C mutation before this one
        # left its own build behind), on the CPU; torch tests run where torch is
        cmake --build ../build -j "$jobs" >/dev/null 2>&1
        if VCATTN_LIBRARY=../build/libvcattn.so python3 -m pytest python/tests -q -x -p no:cacheprovider \
                >"../$name.pytest.log" 2>&1; then
            result="MISSED"; missed=$((missed + 1))
        else
            result="caught by: $(grep -m3 -E '^FAILED|^ERROR' "../$name.pytest.log" | awk '{print $2}' | tr '\n' ' ')"
            caught=$((caught + 1))
        fi
    elif ! cmake --build ../build -j "$jobs" >"../$name.build.log" 2>&1; then
        result="caught (build)"; caught=$((caught + 1))
    elif ctest --test-dir ../build --output-on-failure >"../$name.ctest.log" 2>&1; then
        result="MISSED"; missed=$((missed + 1))
    else
        result="caught"; caught=$((caught + 1))
        fails=$(grep -h '^FAIL' "../build/Testing/Temporary/LastTest.log" 2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')
        [[ -n "$fails" ]] && result="caught by: $fails"
    fi
    mv "$file.orig" "$file"
    touch "$file"
    rows+=("$(printf '%-28s %-18s %s' "$name" "$file" "$result")")
    log "   $name: $result"
done
cmake --build ../build -j "$jobs" >/dev/null 2>&1

printf '\n%-28s %-18s %s\n' "mutation" "file" "result"
for r in "${rows[@]}"; do printf '%s\n' "$r"; done
printf '\ncaught %d, missed %d, not applied %d (logs in %s)\n' "$caught" "$missed" "$skipped" "$work"
[[ "${MUT_KEEP:-0}" == 1 ]] || [[ $missed -gt 0 ]] || rm -rf "$work/build"
((missed == 0 && skipped == 0))
