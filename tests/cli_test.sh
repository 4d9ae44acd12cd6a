#!/usr/bin/env bash
# CLI contract checks: exit codes, --help, JSON keys, bad input.
set -u
cli="$1"
fail=0; pass=0
ok()   { pass=$((pass+1)); echo "ok   $1"; }
bad()  { fail=$((fail+1)); echo "FAIL $1"; }

"$cli" --help >/dev/null 2>&1 && ok "--help exits 0" || bad "--help exits 0"
"$cli" no-such-command >/dev/null 2>&1; [ $? -eq 2 ] && ok "unknown command exits 2" || bad "unknown command exits 2"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
