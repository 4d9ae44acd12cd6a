"""python -m vcattn.info reports the build, the GPU, the methods and the integrations."""
import json
import os
import subprocess
import sys

import vcattn
from vcattn import info


def test_collect_reports_every_method_and_the_default():
    r = info.collect()
    assert [m["name"] for m in r["methods"]] == vcattn.methods()
    assert r["default_method"] == vcattn.DEFAULT_METHOD
    assert {m["name"] for m in r["methods"] if m["gpu_kernel"]} == set(vcattn.GPU_METHODS)
    assert set(r["integrations"]) == {"torch", "diffusers", "yunchang", "xfuser"}
    for i in r["integrations"].values():
        assert i["importable"] or i["why"]
    # without a usable GPU the report says why
    assert r["gpu"]["usable"] or r["gpu"]["why"]


def test_module_runs_and_json_parses():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(vcattn.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-m", "vcattn.info", "--json"], capture_output=True, text=True, env=env,
                         check=True).stdout
    r = json.loads(out)
    assert r["library"]["version"] == vcattn.library_version()
    text = subprocess.run([sys.executable, "-m", "vcattn.info"], capture_output=True, text=True, env=env,
                          check=True).stdout
    assert "default method: " + vcattn.DEFAULT_METHOD in text and "vsmooth-blockmax-8bit" in text
