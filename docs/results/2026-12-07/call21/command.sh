#!/usr/bin/env bash
# call 21 (H100, right after call 20 on the same machine): what choosing the head recipes costs,
# main's library and tests/gpu/policy_cost.py against branch reference-ldmatrix-streams' (3e031a0),
# alternated, two rounds each.  carry: .pre (the branch's build and tree), .pre-main (main's library).
mkdir -p /tmp/pre_main /tmp/pre_branch && tar -xzf .pre-main/lib.tgz -C /tmp/pre_main && tar -xzf .pre/main.tgz -C /tmp/pre_branch
for i in 1 2; do
    echo "== main"
    VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONUNBUFFERED=1 timeout 70 python3 tests/gpu/policy_cost.py \
        --vcattn-bin /tmp/pre_branch/vcattn --json $OUT/policy_cost_main$i.json 2>&1 | grep "^== " | cut -c1-330
    echo "== branch"
    mkdir -p /tmp/branch; tar -xzf .pre/branch_tree.tgz -C /tmp/branch
    VCATTN_LIBRARY=/tmp/pre_branch/libvcattn.so PYTHONUNBUFFERED=1 timeout 70 python3 /tmp/branch/tests/gpu/policy_cost.py \
        --vcattn-bin /tmp/pre_branch/vcattn --json $OUT/policy_cost_branch$i.json 2>&1 | grep "^== " | cut -c1-330
done
