#!/usr/bin/env bash
# device_check.sh - on the H200: build libvcattn + the GPU check and benchmark
# programs from the repo (cmake + nvcc: targets gpu_check, gpu_bench, kmeans_check,
# kmeans_bench), check the kernel against the CPU simulation and the FP64
# reference, run compute-sanitizer memcheck + racecheck on a small shape, and
# benchmark against torch SDPA (cuDNN and flash, BF16) in the same run.
#
#   scripts/device_check.sh [STAGES]     STAGES: comma list of
#       build,check,medium,sanitize,bench,kmeans,python  (default: all)
#       kmeans: GPU grouping vs the CPU planner + its timing (issue 4)
#       heads (not in the default list): per-head fidelity of the default through vcattn.Plan
#           over k-means seeds, with its head recipes (tests/gpu/head_fidelity.py)
#       policy (not in the default list): what measuring a plan's head recipes costs against the
#           attention it steers (tests/gpu/policy_cost.py -> $OUT/policy_cost.json; VC_POLICY_ARGS)
#       python: the Python package's tests on CUDA tensors (issue 5); test_diffusers.py
#           too when pydeps/ is there
#       diag (not in the default list): the kernel with the softmax stubbed (tensor cores alone)
#           and with no wgmma (softmax alone), built here with -DVCATTN_ATT_DIAG=1/2, timed beside
#           the product build at Wan 720p (VC_DIAG_SHAPE, VC_DIAG_METHODS) -> $OUT/diag.txt
#       masked (not in the default list): HunyuanVideo-1.5's padded joint attention at 720p
#           (tests/gpu/masked_bench.py -> $OUT/masked_bench.json; VC_MASKED_ARGS for its options),
#           and what its joint mask costs outside the kernel per call: diffusers building it, vcattn
#           reading it (tests/gpu/mask_read.py -> $OUT/mask_read.json)
#       e2e (not in the default list): one Wan2.2-shaped DiT step, cuDNN vs vcattn
#           (tests/gpu/wan_step.py, ~2-3 minutes)
#       compile (not in the default list): real-size diffusers blocks (VC_COMPILE_MODELS, default
#           "wan cogvideox hunyuanvideo15": Wan2.2-A14B's, CogVideoX-5B's, HunyuanVideo-1.5's with
#           its padded text mask, eager only) through vcattn.diffusers.enable, eager vs
#           torch.compile vs the unpatched block, graph breaks (tests/gpu/block_compile.py
#           -> $OUT/block_compile_MODEL.json, ~1-4 minutes each).
#           Needs diffusers: scripts/device_pydeps.sh builds pydeps/ here; carry "pydeps"
#   VC_COMPILE_ARGS="..."                more arguments for block_compile.py (e.g. --small)
#   VC_SANITIZE="small lengths kmeans"   which programs the sanitize stage runs (default: all three)
#   VC_BENCH_SHAPES="B,H,Sq,Skv,D ..."   shapes for the benchmark
#   VC_BENCH_METHODS="name,name"         only these methods in gpu_bench's lines (default: all)
#   VC_BENCH_EXACT_HEADS="n m"           also time the default with n (m, ...) heads on the exact P
#   VC_PREBUILT=dir                      use dir/{gpu_check,gpu_bench,kmeans_check,kmeans_bench}
#                                        (and dir/libvcattn.so) instead of building
#   OUT=dir                              logs go there (default ./out)
set -u
cd "$(dirname "$0")/.."
STAGES=${1:-build,check,medium,sanitize,bench,kmeans,python}
OUT=${OUT:-out}
mkdir -p "$OUT"
LOG="$OUT/device_check.log"
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
has() { [[ ",$STAGES," == *",$1,"* ]]; }
SHAPES=${VC_BENCH_SHAPES:-"1,40,75600,75600,128 1,40,32760,32760,128 1,12,32760,32760,128 1,24,118800,118800,128 1,40,75600,512,128 2,40,75600,75600,128 1,40,16384,16384,128 1,40,8192,8192,128 1,48,17550,17550,64 1,24,32760,32760,64"}
export PATH=$PATH:/usr/local/cuda/bin

say "== device: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null)"
say "== nvcc: $(nvcc --version 2>/dev/null | tail -1)"
BIN=""     # gpu_check; gpu_bench, kmeans_check, kmeans_bench and libvcattn.so sit beside it
if [ -n "${VC_PREBUILT:-}" ] && [ -x "$VC_PREBUILT/gpu_check" ]; then
    BIN="$VC_PREBUILT/gpu_check"
    say "== using prebuilt $VC_PREBUILT"
elif has build; then
    t0=$(date +%s)
    cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release >> "$LOG" 2>&1 &&
        cmake --build build-dev -j16 --target vcattn_static vcattn vcattn_cli gpu_check gpu_bench kmeans_check kmeans_bench \
            >> "$LOG" 2>&1
    if [ -x build-dev/gpu_check ] && [ -x build-dev/gpu_bench ]; then BIN=build-dev/gpu_check; say "== built in $(( $(date +%s) - t0 )) s"
    else say "BUILD FAILED"; tail -30 "$LOG"; exit 1; fi
fi
[ -n "$BIN" ] || { say "no binary"; exit 1; }
DIR="$(dirname "$BIN")"

# the peers carried into the run: SageAttention2 (prebuilt, peer/ or .peer/) and the
# nvidia-cudnn-frontend wheel (.whl/) for cuDNN's FP8 attention
peers_path() {
    local sa
    sa=$(ls peer/sageattention-*.tar.xz .peer/sageattention-*.tar.xz 2>/dev/null | head -1)
    if [ -z "${VC_SAGE_PATH:-}" ] && [ -n "$sa" ]; then
        mkdir -p /tmp/sa && tar -xJf "$sa" -C /tmp/sa && VC_SAGE_PATH=/tmp/sa
    fi
    if ls .whl/nvidia_cudnn_frontend-*.whl > /dev/null 2>&1 && [ ! -d /tmp/site/cudnn ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/nvidia_cudnn_frontend-*.whl > /dev/null 2>&1
    fi
    export PYTHONPATH=${VC_SAGE_PATH:+$VC_SAGE_PATH:}/tmp/site:${PYTHONPATH:-}
}

RC=0
if has check; then
    say "== check: small shapes vs the CPU simulation"
    timeout 90 "$BIN" check 2>&1 | tee -a "$LOG" "$OUT/check.txt" | tail -40; [ "${PIPESTATUS[0]}" = 0 ] || RC=1
fi
if has medium; then
    say "== medium: vs the FP64 reference"
    timeout 150 "$BIN" medium 2>&1 | tee -a "$LOG" | tail -8; [ "${PIPESTATUS[0]}" = 0 ] || RC=1
fi
if has sanitize; then
    if command -v compute-sanitizer > /dev/null; then
        # sanitize TAG TIMEOUT PROGRAM ARGS...: memcheck, racecheck and synccheck of one program
        sanitize() {
            local tag=$1 limit=$2; shift 2
            for tool in memcheck racecheck synccheck; do
                say "== compute-sanitizer --tool $tool ($*)"
                timeout "$limit" compute-sanitizer --tool $tool --error-exitcode 3 "$@" > "$OUT/sanitize_$tag$tool.txt" 2>&1
                local r=$?
                tail -3 "$OUT/sanitize_$tag$tool.txt" | tee -a "$LOG"
                say "   $tool exit $r"; [ $r = 0 ] || RC=1
            done
        }
        sz=" ${VC_SANITIZE:-small lengths kmeans} "
        [[ $sz == *" small "* ]] && sanitize "" 240 "$BIN" small
        [[ $sz == *" lengths "* ]] && sanitize len_ 240 "$BIN" lengths   # per-batch valid lengths: launches per batch element
        KM="$DIR/kmeans_check"   # the k-means kernel (TMA + mbarrier ring) on its check shapes
        [[ $sz == *" kmeans "* ]] && [ -x "$KM" ] && sanitize km_ 300 "$KM" check
    else
        say "compute-sanitizer not found"
    fi
fi
if has bench; then
    say "== bench: torch SDPA baselines"
    shapes_py=$(echo $SHAPES)
    # SageAttention2 (prebuilt, carried in peer/; docs/benchmarks.md) when present
    peers_path
    timeout 300 python3 tests/gpu/bench_sdpa.py $shapes_py 2>&1 | tee -a "$LOG" "$OUT/bench.txt"
    # cuDNN's FP8 attention (nvidia-cudnn-frontend from .whl/, carried; docs/benchmarks.md)
    (cd tests/gpu && timeout 300 python3 bench_fp8_peer.py $shapes_py) 2>&1 | tee -a "$LOG" "$OUT/bench.txt"
    say "== bench: vcattn"
    exact_counts=${VC_BENCH_EXACT_HEADS:-}
    for s in $SHAPES; do
        VC_BENCH_EXACT_HEADS= timeout 120 "$DIR/gpu_bench" bench ${s//,/ } 5 2>&1 | tee -a "$LOG" "$OUT/bench.txt"
        # VC_BENCH_EXACT_HEADS=n: the default with n heads on the exact P (a plan's head recipes)
        for n in $exact_counts; do
            VC_BENCH_EXACT_HEADS=$n VC_BENCH_METHODS=${VC_BENCH_EXACT_METHOD:-vsmooth-split-blockmax-8bit} \
                timeout 120 "$DIR/gpu_bench" bench ${s//,/ } 5 2>&1 | sed "s/+exact/+exact$n/" | tee -a "$LOG" "$OUT/bench.txt"
        done
    done
    # the kernel times vcattn.evaluate ranks by (copy into python/vcattn/data/ after review)
    python3 scripts/kernel_speed.py "$OUT/bench.txt" --date "$(date +%F)" \
        --device "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)" \
        -o "$OUT/kernel_speed.json" 2>&1 | tee -a "$LOG"
    say "== summary (kernel alone and full call vs cuDNN, same run)"
    python3 - "$OUT/bench.txt" <<'PY' | tee -a "$LOG"
import re, sys
cud, rows = {}, []
for line in open(sys.argv[1]):
    m = re.match(r"SDPA ([\w-]+) (\(\S+\)) ([\d.]+) ms", line)
    if m:
        cud[(m.group(1), m.group(2))] = float(m.group(3))
    m = re.match(r"BENCH(\d*) (\S+)\s+(\(\S+\)) full ([\d.]+) ms .* kernel ([\d.]+) ms .* prep ([\d.]+) ms", line)
    if m:
        rows.append((m.group(2), m.group(3), float(m.group(4)), float(m.group(5)), float(m.group(6))))
print(f"{'shape':28s} {'kernel method':34s} {'cudnn':>8s} {'sage2':>8s} {'cudnn-fp8':>9s} {'full':>8s} {'kernel':>8s} {'x cudnn(k)':>10s} {'x sage2(k)':>10s} {'x fp8(k)':>9s} {'x cudnn(f)':>10s}")
for meth, shp, f, k, p in rows:
    c, sg, f8 = cud.get(("cudnn", shp)), cud.get(("sage2", shp)), cud.get(("cudnn-fp8", shp))
    show = lambda x, w: f"{x:{w}.3f}" if x else " " * (w - 3) + "n/a"
    print(f"{shp:28s} {meth:34s} {show(c, 8)} {show(sg, 8)} {show(f8, 9)} {f:8.3f} {k:8.3f} {(c / k if c else 0):10.2f} "
          f"{(sg / k if sg else 0):10.2f} {(f8 / k if f8 else 0):9.2f} {(c / f if c else 0):10.2f}")
PY
fi
if has heads; then
    say "== heads: per-head fidelity of the default through vcattn.Plan(seed=s), seeds 0-3, vs sage2-8bit"
    peers_path
    VCATTN_LIBRARY="$DIR/libvcattn.so" PYTHONPATH=python:$PYTHONPATH PYTHONUNBUFFERED=1 timeout 500 \
        python3 tests/gpu/head_fidelity.py --vcattn-bin "$DIR/vcattn" --json "$OUT/head_fidelity.json" \
        ${VC_HEADS_ARGS:-} 2>&1 | tee -a "$LOG" "$OUT/heads.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || RC=1
fi
if has policy; then
    say "== policy: what measuring a plan's head recipes costs, against 40 reused calls"
    VCATTN_LIBRARY="$DIR/libvcattn.so" PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 300 \
        python3 tests/gpu/policy_cost.py --vcattn-bin "$DIR/vcattn" --json "$OUT/policy_cost.json" \
        ${VC_POLICY_ARGS:-} 2>&1 | tee -a "$LOG" "$OUT/policy.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || RC=1
fi
if has kmeans; then
    KM="$DIR/kmeans_check"
    say "== kmeans: GPU grouping vs the CPU planner, determinism, warm start"
    timeout 120 "$KM" check 2>&1 | tee -a "$LOG" | tail -6; [ "${PIPESTATUS[0]}" = 0 ] || RC=1
    say "== kmeans: timing (Wan 720p, HunyuanVideo 720p) and its share of one attention call"
    for s in "1 40 75600 128" "1 24 118800 128"; do
        timeout 120 "$DIR/kmeans_bench" bench $s 2>&1 | tee -a "$LOG" "$OUT/bench.txt"
    done
fi
if has python; then
    say "== python: package tests on CUDA tensors"
    # with pydeps/ carried (scripts/device_pydeps.sh) test_diffusers.py runs too, on diffusers 0.42
    pp=python; [ -d pydeps/diffusers ] && pp=python:pydeps
    VCATTN_LIBRARY="$DIR/libvcattn.so" PYTHONPATH=$pp timeout 300 \
        python3 -m pytest -q python/tests 2>&1 | tee -a "$LOG" | tail -15; [ "${PIPESTATUS[0]}" = 0 ] || RC=1
fi
if has diag; then
    say "== diag: tensor cores alone (softmax stubbed) and softmax alone (no wgmma) vs the product kernel"
    for n in 1 2; do
        # prebuilt diagnostic benches (VC_PREBUILT/gpu_bench_diag1, _diag2) save the two builds here
        if [ -x "${VC_PREBUILT:-/nonexistent}/gpu_bench_diag$n" ]; then
            mkdir -p build-diag$n && cp "$VC_PREBUILT/gpu_bench_diag$n" build-diag$n/gpu_bench && continue
        fi
        cmake -S . -B build-diag$n -DCMAKE_BUILD_TYPE=Release -DVCATTN_ATT_DIAG=$n >> "$LOG" 2>&1 &&
            cmake --build build-diag$n -j16 --target gpu_bench >> "$LOG" 2>&1 || { say "diag $n: BUILD FAILED"; RC=1; }
    done
    dshape=${VC_DIAG_SHAPE:-"1 40 75600 75600 128"}
    for bin in "$DIR/gpu_bench" build-diag1/gpu_bench build-diag2/gpu_bench; do
        [ -x "$bin" ] || continue
        say "-- $bin"
        VC_BENCH_METHODS=${VC_DIAG_METHODS:-vsmooth-split-blockmax-8bit,sage2-8bit} timeout 120 "$bin" bench $dshape 5 \
            2>&1 | tee -a "$LOG" "$OUT/diag.txt"
    done
fi
if has masked; then
    say "== masked: HunyuanVideo-1.5's padded joint attention, vcattn vs masked SDPA vs cuDNN on the valid keys"
    VCATTN_LIBRARY="$DIR/libvcattn.so" PYTHONPATH=python timeout 400 \
        python3 tests/gpu/masked_bench.py ${VC_MASKED_ARGS:-} --json "$OUT/masked_bench.json" 2>&1 | tee -a "$LOG" | tail -40
    [ "${PIPESTATUS[0]}" = 0 ] || RC=1
    say "== masked: the joint mask outside the kernel (diffusers' build, vcattn's read; issue 32)"
    VCATTN_LIBRARY="$DIR/libvcattn.so" PYTHONPATH=python timeout 300 \
        python3 tests/gpu/mask_read.py --device cuda --json "$OUT/mask_read.json" 2>&1 | tee -a "$LOG" | tail -12
    [ "${PIPESTATUS[0]}" = 0 ] || RC=1
fi
if has e2e; then
    say "== e2e: one Wan2.2-A14B-shaped denoising step (4 of 40 layers, extrapolated)"
    VCATTN_LIBRARY="$DIR/libvcattn.so" PYTHONPATH=python timeout 400 \
        python3 tests/gpu/wan_step.py --json "$OUT/wan_step.json" 2>&1 | tee -a "$LOG" | tail -25
    [ "${PIPESTATUS[0]}" = 0 ] || RC=1
fi
if has compile; then
    if [ -d pydeps/diffusers ]; then
        for model in ${VC_COMPILE_MODELS:-wan cogvideox hunyuanvideo15}; do
            say "== compile: a real-size diffusers $model block, vcattn eager vs torch.compile"
            VCATTN_LIBRARY="$DIR/libvcattn.so" PYTHONPATH=python:pydeps timeout 360 \
                python3 tests/gpu/block_compile.py --model "$model" ${VC_COMPILE_ARGS:-} \
                --json "$OUT/block_compile_$model.json" 2>&1 | tee -a "$LOG" | tail -40
            [ "${PIPESTATUS[0]}" = 0 ] || RC=1
        done
    else
        say "   pydeps/diffusers missing: run scripts/device_pydeps.sh and carry pydeps/"; RC=1
    fi
fi
say "== device_check rc=$RC"
exit $RC
