#!/usr/bin/env bash
# dev/mutation_check.sh - do the tests catch real bugs?  (a dev script, not CI)
#
# Copies the tree (tracked and untracked-but-not-ignored files) to a scratch
# directory, builds it once (CPU only, Release), checks that ctest passes,
# then for each mutation below: applies it (a sed on one file), rebuilds,
# runs ctest, restores the file.  A mutation is "caught" when ctest fails.
# A sed that does not change its file is reported as "NOT APPLIED" (the
# source moved on: fix the pattern).
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
  "blockmax_no_descent@src/numerics.h@s/return d < VC_BLOCKMAX_DESCENT \? d : VC_BLOCKMAX_DESCENT;/return 0.0f;/@block-max scale degenerates to the running max (d = 0)"
  "blockmax_unbounded_descent@src/numerics.h@s/return d < VC_BLOCKMAX_DESCENT \? d : VC_BLOCKMAX_DESCENT;/return VC_BLOCKMAX_DESCENT;/@block-max descent not bounded by 80 over the row"
  "blockmax_rule_ignored@src/simulate_tile.c@s/if \(cfg->p_scale == VCATTN_P_SCALE_BLOCK_MAX\) \{/if (0) {/@simulation ignores the block-max scale (running max)"
  "pair_kept_without_alpha@src/simulate_tile.c@s/pend->kept\[q\] = \(float\)\(\(float\)alpha \* \(float\)pend->rprev\[q\]\);/pend->kept[q] = (float)pend->rprev[q];/@paired mean restore: the pair's first block misses the next block's alpha"
  "pair_last_kept_dropped@src/simulate_tile.c@s/if \(c->restore_pairs && \(nblk & 1\) == 0\) \{/if (0) {/@paired mean restore: the last pair's first block never restored (even block counts)"
  "pair_first_block_dropped@src/simulate_tile.c@s/acc\[d\] \+ \(s0 \* pend->mu_first\[d\] \+ s1/acc[d] + (0.0 * s0 * pend->mu_first[d] + s1/@paired mean restore: the pair's first block's mean term lost"
  "blockmax_scale_below_block_max@src/numerics.h@s/return fmaxf\(m_prev - descent, block_max\);/return m_prev - descent;/@block-max scale may sit below the block's max (codes above the top)"
  "npy_truncation_reason_wrong@src/npy.c@s/return npy_fail\(e, VCATTN_NPY_TRUNCATED,/return npy_fail(e, VCATTN_NPY_BAD_HEADER,/@.npy short data reported as a malformed header"
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
