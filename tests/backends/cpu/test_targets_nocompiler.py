"""No system compiler at all: with `CC` unset and no cc, gcc or clang on PATH, the ziglang wheel (`cuvil[zig]`)
compiles the five test models in-process and for export, and builds the C runtime that runs them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cuvil.backends.cpu import toolchain
from tests.backends.cpu import target_models as models

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import os, shutil, sys
import numpy as np
assert "CC" not in os.environ and not any(shutil.which(c) for c in ("cc", "gcc", "clang", "ld", "ar"))
import cuvil
from cuvil.backends.cpu import toolchain
from cuvil.runtime import build
from tests.backends.cpu import target_models as models

assert toolchain.find_compiler().family == "zig"
folder = sys.argv[1]
cli = build.build_runtime(os.path.join(folder, "rt")).cli
for name in models.NAMES:
    path = os.path.join(folder, name + ".cuv")
    calls, expected = models.export(name, "cpu", path)  # checks the in-process build against torch / NumPy too
    art = cuvil.load(path)
    for k, (call, want) in enumerate(zip(calls, expected)):
        np.testing.assert_allclose(np.asarray(art(*call)), want, models.RTOL, models.ATOL)
        out = models.run_cli([str(cli)], path, call, models.Path(folder, f"{name}-{k}"))
        np.testing.assert_allclose(out[0], want, models.RTOL, models.ATOL)
    print(name, "ok")
"""


def test_models_compile_and_run_with_zig_alone(tmp_path):
    if not toolchain._zig_path():
        models.require("ziglang (pip)", "the ziglang wheel: pip install 'cuvil[zig]'")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)  # the only program on PATH
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": str(bin_dir), "PYTHONPATH": str(ROOT),
           "CUVIL_CACHE_DIR": str(tmp_path / "cache"), "CUVIL_OPT_LEVEL": "1", "CUVIL_ARTIFACT_CACHE": "0"}
    done = subprocess.run([str(bin_dir / "python"), "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=1500)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert done.stdout.split() == [w for name in models.NAMES for w in (name, "ok")]
