#!/usr/bin/env bash
# calls 25-27 (on the H100 call 24 left warm): the land branch's whole Python suite on CUDA
# tensors (the repo's tree with land's python/ and tests/gpu/ over it; the first try, from the
# tarball alone, failed only on a test that reads docs/), then issue 28's per-head fidelity
# through vcattn.Plan over k-means seeds 0-3 with land's measurement (device_check.sh heads).
# Call 26's output (no files): "366 passed, 5 skipped, 1 xfailed, 19 warnings in 67.22s".
mkdir -p /tmp/pb /tmp/full && tar -xzf .pre/main.tgz -C /tmp/pb && cp -r . /tmp/full/ && tar -xzf .pre/branch_tree.tgz -C /tmp/full
cd /tmp/full
VCATTN_LIBRARY=/tmp/pb/libvcattn.so PYTHONPATH=python timeout 400 python3 -m pytest -q python/tests 2>&1 | tail -8   # call 26
VC_PREBUILT=/tmp/pb OUT=$OUT/heads timeout 450 bash scripts/device_check.sh heads > $OUT/heads_stage.txt 2>&1        # call 27
