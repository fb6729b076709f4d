"""What a fresh `cuvil.load` imports: only the modules that check and map a `.cuv` (no toolchain, no passes, no
frontends, no code generator), so that loading stays fast (docs/artifact.md, "Python"); the call machinery comes
at the first call, and still no pass or frontend."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

import cuvil
from tests.runtime import models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What `cuvil.load(path)["main"]` may add to the modules of `import cuvil`: the loader itself.
LOAD_MODULES = {"cuvil.runtime", "cuvil.runtime.artifact", "cuvil.runtime.container", "cuvil.runtime.entries",
                "cuvil.runtime.function", "cuvil.runtime.host"}
NEVER = ("torch", "onnx", "jax", "cuvil.frontends", "cuvil.passes", "cuvil.backends.cpu.codegen",
         "cuvil.backends.cpu.standalone", "cuvil.cache")
# The compiler: neither `import cuvil` nor loading and calling a `.cuv` imports it (a Ray worker's start-up).
COMPILER = ("cuvil.ops", "cuvil.ir.builder", "cuvil.ir.verifier", "cuvil.api", "cuvil.compiler", "cuvil.deploy",
            "cuvil.interpreter", "cuvil.profiler")

CHILD = r"""
import json, sys
import numpy as np
import cuvil
imported = sorted(sys.modules)
before = set(sys.modules)
fn = cuvil.load(sys.argv[1])["main"]
loaded = sorted(set(sys.modules) - before)
y = fn(np.ones((3, 256), np.float32))
called = sorted(set(sys.modules) - before)
print(json.dumps({"imported": imported, "loaded": loaded, "called": called, "shape": list(y.shape)}))
"""


def _fresh_load(path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cuvil_modules(names) -> set:
    return {m for m in names if m == "cuvil" or m.startswith("cuvil.")}


def test_a_fresh_load_imports_only_the_loader(tmp_path):
    path = tmp_path / "mlp.cuv"
    cuvil.export(cuvil.jit(models.mlp), path, example_inputs=(np.ones((3, 256), np.float32),))
    report = _fresh_load(path)
    assert _cuvil_modules(report["loaded"]) <= LOAD_MODULES, _cuvil_modules(report["loaded"]) - LOAD_MODULES
    assert "subprocess" not in report["loaded"]  # the toolchain's: no compiler is asked anything to load a file
    assert report["shape"] == [3, 10]
    bad = [m for m in report["called"] if m.startswith(NEVER)]
    assert not bad, bad


def test_import_cuvil_and_running_a_cuv_never_import_the_compiler(tmp_path):
    path = tmp_path / "mlp.cuv"
    cuvil.export(cuvil.jit(models.mlp), path, example_inputs=(np.ones((3, 256), np.float32),))
    report = _fresh_load(path)
    bad = [m for m in report["imported"] + report["called"] if m.startswith(COMPILER)]
    assert not bad, bad
    assert report["shape"] == [3, 10]


def test_the_compilers_entry_points_are_still_cuvil_attributes():
    out = subprocess.run([sys.executable, "-c", "import cuvil; print(cuvil.compile.__module__, cuvil.ops.__name__, "
                          "cuvil.export.__module__, cuvil.ir.Builder.__name__, 'register_op' in dir(cuvil.ops))"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    assert out.stdout.split() == ["cuvil.api", "cuvil.ops", "cuvil.deploy", "Builder", "True"], out.stderr[-3000:]
