#!/usr/bin/env bash
# sass_diff.sh OBJ_A OBJ_B - compare the SASS of two CUDA objects (or
# binaries) instruction by instruction, ignoring function names, addresses
# and line info: the check that a move or rename left the kernels unchanged.
# Needs cuobjdump + nvdisasm on the PATH (the device has them; here they come
# from the PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm).
set -euo pipefail
dump() { cuobjdump -sass "$1" | grep -E "^\s+/\*[0-9a-f]{4,}\*/" | sed 's#/\*[0-9a-f]*\*/##; s#;.*##; s/^\s*//'; }
a=$(mktemp); b=$(mktemp)
dump "$1" > "$a"; dump "$2" > "$b"
echo "instructions: $(wc -l < "$a") vs $(wc -l < "$b")"
if cmp -s "$a" "$b"; then echo "SASS identical"; rm -f "$a" "$b"; else diff "$a" "$b" | head -40; rm -f "$a" "$b"; exit 1; fi
