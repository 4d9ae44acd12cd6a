"""The package's imports go one way: each module imports only modules of lower layers
(also inside functions: a lazy import upward is a cycle all the same), and no module
reaches into another's private names."""
import ast
from pathlib import Path

import vcattn

PKG = Path(vcattn.__file__).resolve().parent

# bottom to top; a module may import only modules of a lower layer
LAYERS = [
    ["_lib"],                       # the library binding
    ["_tensors", "deferred_mask"],  # numpy / torch -> pointers and strides; a joint mask not built
    ["_methods"],                   # method names, ids, flags
    ["head_policy"],                # per-head recipes: the choice (C) and its application
    ["plan", "masks"],              # Schedule, Plan (the one plan logic); masks read as lengths
    ["_cpu", "_gpu", "_fallback"],  # the paths
    ["_ops"],                       # torch custom ops over the paths
    ["core", "eval_report"],        # the public call; the evaluation's report
    ["integration", "parallel", "eval", "capturing"],  # integrations, the evaluation, the capture
    ["yunchang", "diffusers"],      # yunchang's USP engine, diffusers' dispatch (over integration, parallel)
    ["__init__"],
    ["info"],                       # python -m vcattn.info (reads the public package)
]
LAYER = {m: i for i, names in enumerate(LAYERS) for m in names}


def imports_of(name):
    """[(imported module, names taken from it)] of every vcattn import in the module."""
    return imports_in((PKG / f"{name}.py").read_text())


def imports_in(source):
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:  # from . import a, b
                out += [(a.name, []) for a in node.names]
            else:
                out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vcattn"):
            out.append((node.module.split(".", 1)[1] if "." in node.module else "__init__", []))
    return out


def test_every_module_has_a_layer():
    assert sorted(p.stem for p in PKG.glob("*.py")) == sorted(LAYER)


def test_imports_go_down_only():
    bad = [(m, dep) for m in LAYER for dep, _ in imports_of(m) if LAYER[dep] >= LAYER[m]]
    assert not bad, f"imports that do not go to a lower layer: {bad}"


def test_no_private_names_across_modules():
    bad = []
    for m in LAYER:
        for dep, names in imports_of(m):
            bad += [(m, dep, n) for n in names if n.startswith("_")]
        tree = ast.parse((PKG / f"{m}.py").read_text())
        modules = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and node.level == 1 and node.module is None for a in node.names}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append((m, node.value.id, node.attr))
    assert not bad, f"private names used across modules: {bad}"


def test_the_check_sees_imports_inside_functions():
    # a lazy upward import (plan -> core, as PlanCache.attention once had) is still seen
    src = (PKG / "plan.py").read_text() + "\n\ndef late():\n    from .core import attention\n"
    deps = imports_in(src)
    assert ("core", ["attention"]) in deps and LAYER["core"] > LAYER["plan"]
