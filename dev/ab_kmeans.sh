#!/usr/bin/env bash
# A/B of GPU k-means builds in one device call: each DIR/kmeans_check runs `check`
# (HASH lines kept so the builds can be compared result for result) and then
# DIR/kmeans_bench (DIR/kmeans_check in a build from before the check/bench split) the
# benchmark shapes, in turns (A B A B ...) so that drift hits every build alike.
#   dev/ab_kmeans.sh "DIR_A DIR_B ..." [ROUNDS]
set -u
DIRS=$1; ROUNDS=${2:-2}
OUT=${OUT:-out}; mkdir -p "$OUT"
export KM_NO_ATTENTION=1
for d in $DIRS; do
    n=$(echo "$d" | tr '/' '_')
    timeout 180 "$d/kmeans_check" check > "$OUT/check_$n.txt" 2>&1
    echo "$d: $(tail -1 "$OUT/check_$n.txt") ($(grep -c '^HASH' "$OUT/check_$n.txt") HASH lines, $(grep -h 'share' "$OUT/check_$n.txt" | head -1))"
    grep '^HASH' "$OUT/check_$n.txt" > "$OUT/hash_$n.txt"
done
set -- $DIRS
first=$(echo "$1" | tr '/' '_')
for d in $DIRS; do
    n=$(echo "$d" | tr '/' '_')
    if cmp -s "$OUT/hash_$first.txt" "$OUT/hash_$n.txt"; then echo "$d: HASH lines identical to $1"; else echo "$d: HASH lines DIFFER from $1"; fi
done
for r in $(seq "$ROUNDS"); do
    for s in "1 40 75600 128" "1 24 118800 128"; do
        for d in $DIRS; do
            kb="$d/kmeans_bench"; [ -x "$kb" ] || kb="$d/kmeans_check"
            echo "$d: $("$kb" bench $s | grep -E '^KMEANS-ONLY|DETERMINISM|^HASH' | tr '\n' ' ')"
        done
    done
done
