#!/usr/bin/env bash
# The fuzzers (fuzz/): build them with clang, libFuzzer, ASan and UBSan in
# build-fuzz/, then run each of fuzz_npy, fuzz_params and fuzz_cli for
# SECONDS/3 (default: 60 s in all).  Prints, per harness, libFuzzer's final
# figures (executions, coverage cov/ft, corpus size) and fails on any crash,
# leak, timeout, out-of-memory or broken invariant (the reproducer is left in
# build-fuzz/artifacts/<harness>/).
#
#   scripts/fuzz.sh [SECONDS]
#
# New corpus entries go to build-fuzz/corpus/<harness>/ (kept between runs);
# the seeds in fuzz/corpus/<harness>/ are only read.  FUZZ_BUILD_DIR=dir
# builds and runs elsewhere (e.g. a long run beside a short one); FUZZ_CC=cc
# picks another clang; FUZZ_HARNESSES="params npy" runs only those, in that
# order (SECONDS is still split by 3 per harness).
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-60}
per=$(( total / 3 ))
[ "$per" -ge 1 ] || per=1
jobs=$(nproc 2>/dev/null || echo 2)
build=${FUZZ_BUILD_DIR:-build-fuzz}
cc=${FUZZ_CC:-clang}

echo "== fuzzers: building in $build/ ($cc, libFuzzer + ASan + UBSan)"
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVCATTN_FUZZ=ON -DVCATTN_CUDA=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target fuzz_npy fuzz_params fuzz_cli >/dev/null

status=0
total_execs=0
for h in ${FUZZ_HARNESSES:-npy params cli}; do
    work="$build/corpus/$h" artifacts="$build/artifacts/$h" log="$build/fuzz_$h.log"
    mkdir -p "$work" "$artifacts"
    opts=(-max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix="$artifacts/")
    [ -f "fuzz/$h.dict" ] && opts+=(-dict="fuzz/$h.dict")
    rc=0
    t0=$SECONDS
    # detect_leaks: a leak fails the run like a crash; halt_on_error: UBSan stops at the first report
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$build/fuzz_$h" "${opts[@]}" "$work" "fuzz/corpus/$h" >"$log" 2>&1 || rc=$?
    secs=$(( SECONDS - t0 ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    line=$(grep -aE '^#[0-9]+' "$log" | tail -1 || true)  # -a: the log may hold NUL bytes
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$line")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$line")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$line")
    printf '   fuzz_%-7s %10s executions in %4d s  cov %-5s ft %-6s corpus %s\n' \
        "$h" "${execs:-?}" "$secs" "${cov:-?}" "${ft:-?}" "${corp:-?}"
    total_execs=$(( total_execs + ${execs:-0} ))
    if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$artifacts")" ]; then
        echo "   FAIL fuzz_$h (exit $rc); the log's end ($log):"
        tail -40 "$log" | sed 's/^/     /'
        ls "$artifacts" | sed 's/^/     artifact: /'
        status=1
    fi
done
echo "   $total_execs executions in all, $([ $status -eq 0 ] && echo "no crash, leak or timeout" || echo "FAILURES above")"
exit $status
