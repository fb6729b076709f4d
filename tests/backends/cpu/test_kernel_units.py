"""The kernel library in units (kernels.UNITS): each its own cached object, a model builds and loads only the units
its code calls, the bindings load the others on demand, and an export links the same objects."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuvil.backends.cpu import backend, kernels, standalone

ROOT = Path(__file__).resolve().parents[3]


def test_every_source_is_in_one_unit():
    listed = [name for sources in kernels.UNITS.values() for name in sources]
    assert sorted(listed) == sorted(kernels.SOURCES) and len(set(listed)) == len(listed)
    assert set(kernels.CORE) <= set(kernels.UNITS)


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_exported_names_are_what_each_object_defines():
    objects = kernels.unit_objects(tuple(kernels.UNITS), backend.opt_level())
    for unit, obj in zip(kernels.UNITS, objects):
        out = subprocess.run(["nm", "-g", "--defined-only", str(obj)], capture_output=True, text=True, check=True)
        defined = {line.split()[-1] for line in out.stdout.splitlines() if line.split()[-1].startswith("cuvil_")}
        assert defined == kernels.exported(unit), unit


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_the_gemm_is_three_core_units_whose_shared_functions_stay_hidden():
    """The GEMM's micro-kernels and its epilogue compile as core units of their own, at once with its drivers (as one
    unit the GEMM was 1.5 s of compiler time, the critical path of a first build); what they share is not exported."""
    assert {"gemm", "gemm_kernel", "gemm_epilogue"} <= set(kernels.CORE)
    objects = dict(zip(kernels.CORE, kernels.unit_objects(kernels.CORE, backend.opt_level())))

    def defined(path, *flags):
        out = subprocess.run(["nm", *flags, "--defined-only", str(path)], capture_output=True, text=True, check=True)
        return {line.split()[-1] for line in out.stdout.splitlines()}

    assert "run_kernel" in defined(objects["gemm_kernel"], "-g")
    assert "store_tile" in defined(objects["gemm_epilogue"], "-g")
    core = defined(kernels.load(backend.opt_level())._libs[kernels.CORE]._name, "-D")
    assert "cuvil_sgemm" in core and not {"run_kernel", "store_tile"} & core


def test_units_for_names_the_units_a_source_calls():
    assert kernels.units_for("void k(void) { cuvil_sgemm(1, 1, 1); }") == kernels.CORE
    called = kernels.units_for("cuvil_qgemm(&args); cuvil_conv_winograd(x, u, b, r, y, g, 1);")
    assert called == (*kernels.CORE, "winograd", "lowp")
    assert kernels.units_for("/* cuvil_conv_nchwcx is another name */") == kernels.CORE


def test_bindings_load_a_unit_on_first_use():
    lib = kernels.load(backend.opt_level())
    x = np.array([-1.0, 2.0], np.float32)
    assert kernels.activation(x, "relu", backend.opt_level()).tolist() == [0.0, 2.0]
    assert lib.cuvil_winograd_weight_size(1, 1) == 36 * kernels.conv_block() ** 2
    with pytest.raises(AttributeError, match="no function cuvil_nothing"):
        _ = lib.cuvil_nothing


INT4_FIRST = """
import numpy as np
from cuvil.backends.cpu import kernels_int8 as k8
from cuvil.ops.quantized import pack_int4
x = np.ones((1, 32), np.float32)
q = pack_int4(np.full((2, 32), 9))
y = k8.gemm_int4(x, q, np.ones((2, 1), np.float32), np.full((2, 1), 8, np.uint8), 32, opt_level=1)
print(y.tolist())
"""


def test_a_unit_calling_another_loads_it_first():
    """gemm_int4.c calls gemm_int8.c's cuvil_int8_isa: in a fresh process where int4 runs first the library of the
    int8 unit is loaded before it (it was an undefined symbol)."""
    assert kernels.units_for("cuvil_gemm_int4(1, 2);") == (*kernels.CORE, "lowp", "gemm_int4")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", INT4_FIRST], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[[32.0, 32.0]]"


FIRST_BUILD = """
import json, sys
import numpy as np
from cuvil.compiler import compile_module
from cuvil.demo_models import mlp_module, mlp_numpy
module, weights = mlp_module(batch=2)
x = np.ones((2, 784), np.float32)
print(json.dumps(float(np.abs(compile_module(module)(x)[0] - mlp_numpy(x, weights)).max())))
"""


def test_a_first_build_compiles_only_the_units_the_model_calls(tmp_path):
    """An MLP on a new machine (an empty cache) waits for the core units, not for the convs or int8 kernels."""
    env = {**os.environ, "CUVIL_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", FIRST_BUILD], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) < 1e-3
    built = {p.name.rsplit("-", 1)[0] for p in (tmp_path / "cpu").glob("obj-kernels-*") if p.is_dir()}
    assert built == {f"obj-kernels-{u}" for u in kernels.CORE}


def test_an_export_links_the_objects_the_process_built(tmp_path, monkeypatch):
    """The exported library reuses the unit objects of the in-process library: nothing is compiled twice."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    source = "#include <stdint.h>\nvoid cuvil_main(void) {}\nint64_t cuvil_arena_bytes(void) { return 0; }\n"
    kernels.unit_objects(kernels.CORE, backend.opt_level())
    before = {p.name for p in (tmp_path / "cpu").iterdir()}
    objects = standalone.library_objects(backend.opt_level(), units=kernels.units_for(source))
    new = {p.name for p in (tmp_path / "cpu").iterdir()} - before
    assert not any(name.startswith("obj-kernels-") for name in new), new
    assert len(objects) == len(kernels.CORE) + 1  # and the export ABI's object


def test_a_unit_compiles_at_the_level_it_needs():
    """UNIT_LEVELS caps a unit's -O level (the GEMM runs as fast at -O2); others take the level asked for."""
    capped = next(iter(kernels.UNIT_LEVELS))
    for unit, want in ((capped, f"-O{kernels.UNIT_LEVELS[capped]}"), ("pool", "-O3")):
        (obj,) = kernels.unit_objects((unit,), 3)
        command = json.loads((obj.parent / "meta.json").read_text())["command"]
        assert want in command and not {"-O1", "-O2", "-O3"} - {want} & set(command), (unit, command)


def test_the_per_machine_builds_start_before_the_passes(monkeypatch):
    """compile_module starts the kernel library's core and the C call path on threads before the passes, so that on
    a new machine the passes hide their build (bench/compile_time.py --first-call)."""
    import cuvil.passes
    from cuvil.backends.cpu import fastcall
    from cuvil.compiler import compile_module
    from cuvil.demo_models import mlp_module

    asked, run_pipeline = [], cuvil.passes.run_pipeline
    monkeypatch.setattr(backend, "_PREFETCHED", {})
    monkeypatch.setattr(kernels, "load", lambda *a, _load=kernels.load, **k: asked.append("kernels") or _load(*a, **k))
    monkeypatch.setattr(fastcall, "extension", lambda _ext=fastcall.extension: asked.append("fastcall") or _ext())

    def passes(*a, **k):
        for t in backend._PREFETCHED[backend.opt_level()]:
            t.join()
        asked.append("passes")
        return run_pipeline(*a, **k)

    monkeypatch.setattr(cuvil.passes, "run_pipeline", passes)
    module, _ = mlp_module(batch=2)
    compile_module(module)
    assert sorted(asked[:2]) == ["fastcall", "kernels"] and asked[2] == "passes"  # the two build at once


def test_prefetch_builds_the_kernel_core_and_the_call_path_at_once(monkeypatch):
    """On a new machine the kernel core (the GEMM's units) and the call extension compile for about 1.5 s and 0.4 s of
    CPU: one after the other, a first call waited for the sum."""
    import threading

    both = threading.Barrier(2, timeout=10)
    met = []

    def build(name):
        both.wait()  # returns only when the other build has started too
        met.append(name)

    monkeypatch.setattr(backend, "_PREFETCHED", {})
    monkeypatch.setattr(backend.kernels, "load", lambda *a, **k: build("kernels"))
    monkeypatch.setattr(backend.fastcall, "extension", lambda: build("extension"))
    backend.prefetch()
    for t in backend._PREFETCHED[backend.opt_level()]:
        t.join(20)
    assert sorted(met) == ["extension", "kernels"]
