#!/usr/bin/env bash
# sass_diff.sh OBJ_A OBJ_B - compare the SASS of two CUDA objects (or binaries)
# instruction by instruction, ignoring function names, addresses and line info:
# the check that a move or rename left the kernels unchanged.  Functions are
# compared as a set of bodies (sorted), so renamed template arguments, which
# change the mangled names and the order cuobjdump prints them in, do not count.
# Needs cuobjdump + nvdisasm on the PATH (the device has them; here they come
# from the PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm).
set -euo pipefail
dump() {  # one line per function: its instructions joined by " ; "
    cuobjdump -sass "$1" | awk '
        /Function :/ { if (body != "") print body; body = "" ; next }
        /^[ \t]+\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]+\*\// { line = $0; sub(/\/\*[0-9a-f]*\*\//, "", line); sub(/;.*/, "", line);
                                       gsub(/^[ \t]+/, "", line); body = body line " ; "; n++ }
        END { if (body != "") print body; print n > "/dev/stderr" }' 2> "$2.count" | sort > "$2"
}
a=$(mktemp); b=$(mktemp)
dump "$1" "$a"; dump "$2" "$b"
echo "functions: $(wc -l < "$a") vs $(wc -l < "$b"); instructions: $(cat "$a.count") vs $(cat "$b.count")"
if cmp -s "$a" "$b"; then echo "SASS identical"; rm -f "$a"* "$b"*; else
    diff <(tr ';' '\n' < "$a") <(tr ';' '\n' < "$b") | head -40; rm -f "$a"* "$b"*; exit 1; fi
