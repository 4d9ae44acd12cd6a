#!/usr/bin/env bash
# device_pydeps.sh - build pydeps/: a pure-Python diffusers for the device machine, which
# has torch, numpy, huggingface_hub, safetensors, regex, requests, Pillow, filelock (and
# transformers) but no diffusers and no network. Run it HERE (a machine that reaches PyPI),
# then carry pydeps/ to the device:
#
#   scripts/device_pydeps.sh                   # DIFFUSERS_VERSION=0.42.1 by default
#   run(carry=["pydeps"]): OUT=$OUT scripts/device_check.sh compile
#
# pydeps/ is ignored by git (.gitignore). It holds the unzipped py3-none-any wheel (about
# 27 MiB; the carry limit is 64 MiB for all carried paths together), nothing else:
#   - diffusers 0.42.1 needs Python >= 3.11, torch with torch.accelerator (>= 2.6),
#     huggingface-hub >= 1.32, < 3 and safetensors >= 0.8 - the device has Python 3.12,
#     torch 2.11, huggingface_hub 1.33 and safetensors 0.8;
#   - its other requirements (filelock, numpy, regex, requests, Pillow) are on the device;
#     importlib_metadata is only imported on Python < 3.8 (it uses importlib.metadata on
#     3.12), so it is not included; packaging comes with huggingface_hub / transformers.
# The script checks the wheel's Requires-Dist against that list and tries the import here
# (PYTHONPATH=pydeps; a local torch older than 2.6 gets a torch.accelerator stand-in for
# this check only) and lists the third-party modules the import pulls in.
set -euo pipefail
cd "$(dirname "$0")/.."
VER=${DIFFUSERS_VERSION:-0.42.1}
DEST=${PYDEPS_DIR:-pydeps}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 -m pip download -q --no-deps --only-binary=:all: "diffusers==$VER" -d "$tmp"
whl=$(ls "$tmp"/diffusers-"$VER"-py3-none-any.whl)
rm -rf "$DEST"
mkdir -p "$DEST"
python3 -m zipfile -e "$whl" "$DEST"
echo "== $DEST: diffusers $VER, $(( $(du -sb "$DEST" | cut -f1) / 1048576 )) MiB"

echo "== requirements (Requires-Dist without extras) against the device's packages"
python3 - "$DEST" "$VER" <<'PY'
import re, sys
from pathlib import Path
dest, ver = sys.argv[1], sys.argv[2]
meta = (Path(dest) / f"diffusers-{ver}.dist-info" / "METADATA").read_text()
# what the device machine has (scripts/device_pydeps.sh header); versions where it matters
device = {"torch": "2.11.0", "numpy": "2.5", "huggingface-hub": "1.33", "safetensors": "0.8", "regex": "",
          "requests": "", "pillow": "", "filelock": "", "transformers": "5.17", "triton": "3.6"}
bad = []
req_py = re.search(r"^Requires-Python: (.*)$", meta, re.M)
print(f"   Requires-Python: {req_py.group(1) if req_py else '-'} (device: 3.12.3)")
for line in re.findall(r"^Requires-Dist: (.*)$", meta, re.M):
    if "extra ==" in line:
        continue
    name = re.split(r"[<>=!~;\[ ]", line, 1)[0].strip()
    key = name.lower().replace("_", "-")
    if key in device:
        print(f"   {line:45s} device: {device[key] or 'present'}")
    elif key == "importlib-metadata":
        print(f"   {line:45s} only imported on Python < 3.8 (not needed on 3.12)")
    else:
        print(f"   {line:45s} NOT ON THE DEVICE")
        bad.append(line)
if bad:
    sys.exit(f"device_pydeps: requirements the device lacks: {bad}")
PY

echo "== import check here (PYTHONPATH=$DEST)"
PYTHONPATH="$DEST${PYTHONPATH:+:$PYTHONPATH}" python3 - <<'PY' || echo "   (import check failed here; see above)"
import sys, types
import torch
if not hasattr(torch, "accelerator"):  # local torch < 2.6 only: the device's torch 2.11 has it
    print(f"   local torch {torch.__version__} has no torch.accelerator: a stand-in for this check")
    torch.accelerator = types.SimpleNamespace(is_available=lambda: False, current_accelerator=lambda: None,
                                              device_count=lambda: 0)
before = set(sys.modules)
import diffusers
from diffusers.models.transformers import transformer_wan
assert transformer_wan.WanTransformerBlock and transformer_wan.WanRotaryPosEmbed and transformer_wan.WanAttnProcessor
from diffusers import WanTransformer3DModel  # noqa
print(f"   diffusers {diffusers.__version__} from {diffusers.__file__}")
new = {m.split(".")[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names) - {"diffusers"}
print("   modules the import loaded after torch (not stdlib; huggingface_hub brings its own):", ", ".join(sorted(
    m for m in new if not m.startswith("_"))))
PY
