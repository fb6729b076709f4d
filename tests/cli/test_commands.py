"""Every `cuvil` subcommand end to end, through `python -m cuvil` in a subprocess, on a small ONNX model and on a
`file.py:function`; outputs compared with NumPy's and ONNX Runtime's."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
W = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
B = np.array([0.5, -0.25, 1.0], np.float32)
FUNCTIONS = """
import numpy as np
import cuvil

K = np.float32(3.0)


@cuvil.jit
def scaled_relu(x, shift=1.0):
    return np.maximum(x * K - shift, 0.0)


def affine(x, w):
    return x @ w + 1.0
"""


def cuvil_cmd(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    return subprocess.run([sys.executable, "-m", "cuvil", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=600)


def ok(*args, **kwargs) -> str:
    done = cuvil_cmd(*args, **kwargs)
    assert done.returncode == 0, f"cuvil {' '.join(map(str, args))} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stderr == "", done.stderr  # not a terminal: no progress display, nothing extra
    return done.stdout


def fails(*args, **kwargs) -> str:
    """The one-line error of a command that must fail (exit 1 for what the user gave, 2 for bad arguments)."""
    done = cuvil_cmd(*args, **kwargs)
    assert done.returncode in (1, 2), (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder with mlp.onnx (relu(x @ W + B), symbolic batch), x.npy (2 x 4) and functions.py."""
    folder = tmp_path_factory.mktemp("cli")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "mlp.onnx")
    np.save(folder / "x.npy", np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32))
    np.save(folder / "x5.npy", np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32))
    (folder / "functions.py").write_text(FUNCTIONS)
    return folder


def mlp(x):
    return np.maximum(x @ W + B, 0)


def test_version_and_help():
    from cuvil import __version__

    assert ok("--version").strip() == f"cuvil {__version__}"
    text = ok("--help")
    for command in ("compile", "run", "inspect", "bench", "cache", "build-runtime", "demo"):
        assert command in text


def test_compile_onnx_then_run_and_inspect_the_cuv(work):
    out = ok("compile", work / "mlp.onnx", "-o", work / "mlp.cuv", "--c")
    assert "main(x: f32[batch,4]) -> (y: f32[batch,3])" in out and (work / "mlp.cuv").exists()
    ok("run", work / "mlp.cuv", "--input", f"x={work / 'x5.npy'}", "-o", work / "out_cuv")
    np.testing.assert_allclose(np.load(work / "out_cuv" / "output_0.npy"), mlp(np.load(work / "x5.npy")),
                               rtol=1e-5, atol=1e-5)
    text = ok("inspect", work / "mlp.cuv", "--ir", "--c")
    assert "cuvil_version" in text and "triple: " in text
    assert "main(x: f32[batch,4]) -> (y: f32[batch,3])" in text
    assert "func @main(%x: f32[batch,4])" in text  # the IR
    assert "#include" in text and "cuvil_prepare" in text  # the generated C


def test_compile_stores_the_weights_once_with_the_artifact_cache_on_or_off(work, tmp_path):
    """`cuvil compile -o` of a Winograd convolution writes the same `consts` and `prepared` sections cold, warm (the
    entry holds the 4x transforms in place of the weights) and with the cache off: the weights, once."""
    from cuvil.runtime import container

    from ..runtime.models import winograd_conv_onnx

    model, weight_bytes = winograd_conv_onnx(np.random.default_rng(3), 64)
    onnx.save(model, tmp_path / "conv.onnx")
    sections = []
    for run, cache in (("cold", "1"), ("warm", "1"), ("off", "0")):
        env = {"CUVIL_CACHE_DIR": str(tmp_path / "cache"), "CUVIL_ARTIFACT_CACHE": cache}
        ok("compile", tmp_path / "conv.onnx", "-o", tmp_path / f"{run}.cuv", env=env)
        rows = container.Container.open(tmp_path / f"{run}.cuv").rows
        sections.append({n: rows[n].size for n in ("consts", "prepared") if n in rows})
    assert sections[0] == sections[1] == sections[2], sections
    assert sum(sections[0].values()) <= weight_bytes * 1.02 + 256, (sections, weight_bytes)


def test_compile_with_input_shapes_and_dynamic_sizes(work):
    out = ok("compile", work / "mlp.onnx", "-o", work / "fixed.cuv", "--input", "x=2,4")
    assert "main(x: f32[2,4]) -> (y: f32[2,3])" in out
    out = ok("compile", work / "mlp.onnx", "-o", work / "renamed.cuv", "--input", "x=2,4", "--dynamic", "x:0=n")
    assert "main(x: f32[n,4]) -> (y: f32[n,3])" in out
    err = fails("run", work / "fixed.cuv", "--input", f"x={work / 'x5.npy'}")
    assert "cuvil run: error:" in err and "(5, 4)" in err


def test_inspect_a_cuv_without_c_says_so(work):
    ok("compile", work / "mlp.onnx", "-o", work / "noc.cuv")
    assert "holds no csrc section: compile with `cuvil compile --c`" in fails("inspect", work / "noc.cuv", "--c")


def test_run_onnx_directly(work):
    out = ok("run", work / "mlp.onnx", "-i", f"x={work / 'x.npy'}", "-o", work / "out_onnx")
    assert re.search(r"^y: float32\[2, 3\] min ", out, re.M)
    np.testing.assert_allclose(np.load(work / "out_onnx" / "output_0.npy"), mlp(np.load(work / "x.npy")),
                               rtol=1e-5, atol=1e-5)
    assert "y: float32[3, 3]" in ok("run", work / "mlp.onnx", "--random", "-i", "x=3,4")


def test_run_without_values_names_what_is_missing(work):
    err = fails("run", work / "mlp.onnx")
    assert "no value for input(s) x: f32[batch,4]" in err and "--random" in err
    err = fails("run", work / "mlp.onnx", "--random")
    assert "symbolic size(s) batch" in err and "--input x=N,4" in err
    assert "does not fit the signature" in fails("run", work / "mlp.onnx", "-i", "x=3,5")
    assert "the model's inputs are x" in fails("run", work / "mlp.onnx", "-i", "y=3,4")


def test_python_function_compile_run_inspect(work):
    target = f"{work / 'functions.py'}:affine"
    out = ok("compile", target, "-o", work / "affine.cuv", "-i", "x=2,4", "-i", "w=4,3", "--dynamic", "x:0=n")
    assert "main(x: f32[n,4], w: f32[4,3])" in out
    np.save(work / "w.npy", W)
    ok("run", work / "affine.cuv", "-i", f"x={work / 'x5.npy'}", "-i", f"w={work / 'w.npy'}", "-o", work / "out_py")
    np.testing.assert_allclose(np.load(work / "out_py" / "output_0.npy"), np.load(work / "x5.npy") @ W + 1.0,
                               rtol=1e-5, atol=1e-5)
    text = ok("inspect", target, "-i", "x=2,4", "-i", "w=4,3", "--ir", "--c")
    assert "affine(x: f32[2,4], w: f32[4,3]) -> (f32[2,3])" in text and "func @main" in text and "#include" in text


def test_python_jit_function_keeps_its_defaults(work):
    target = f"{work / 'functions.py'}:scaled_relu"
    ok("run", target, "-i", f"x={work / 'x.npy'}", "-o", work / "out_jit")
    x = np.load(work / "x.npy")
    np.testing.assert_allclose(np.load(work / "out_jit" / "output_0.npy"), np.maximum(x * 3 - 1, 0), rtol=1e-6)


def test_python_function_errors_are_clear(work):
    assert "defines no function 'nope' (functions there: affine, scaled_relu)" in \
        fails("run", f"{work / 'functions.py'}:nope")
    assert "affine needs an --input for w" in fails("run", f"{work / 'functions.py'}:affine", "-i", "x=2,4")
    assert "wrote" in ok("compile", f"{work / 'functions.py'}:affine", "-o", work / "p.cuv", "-i", "x=2,4", "-i",
                         "w=4,3", "--precision", "fp16")  # docs/precision.md
    assert "invalid choice: 'fp8'" in fails("compile", work / "mlp.onnx", "-o", work / "p.cuv", "--precision", "fp8")
    assert "expected a .cuv file, an .onnx model or FILE.py:FUNCTION" in fails("run", work / "x.npy")
    assert "expected NAME=FILE.npy or NAME=D0,D1" in fails("run", work / "mlp.onnx", "-i", "x=a,b")
    assert "expected INPUT:AXIS=SYMBOL" in fails("compile", work / "mlp.onnx", "-o", "a.cuv", "--dynamic", "x0")


def test_a_corrupt_cuv_is_refused_before_running(work):
    ok("compile", work / "mlp.onnx", "-o", work / "bad.cuv")
    data = bytearray((work / "bad.cuv").read_bytes())
    data[200] ^= 0xFF  # inside the section table: its SHA-256 no longer matches
    (work / "bad.cuv").write_bytes(bytes(data))
    assert "cuvil run: error:" in fails("run", work / "bad.cuv", "--random", "-i", "x=1,4")
    (work / "short.cuv").write_bytes(data[:100])
    assert "cuvil inspect: error:" in fails("inspect", work / "short.cuv")


def test_bench_onnx_beside_onnxruntime(work):
    pytest.importorskip("onnxruntime")
    out = ok("bench", work / "mlp.onnx", "-i", f"x={work / 'x.npy'}", "--threads", "1", "--repeat", "5",
             "--warmup", "1", "--compare", "onnxruntime")
    assert re.search(r"cuvil: p50 [\d.]+ ms\s+p90 [\d.]+ ms\s+p99 [\d.]+ ms", out)
    assert re.search(r"onnxruntime: p50 [\d.]+ ms", out) and "1 thread(s)" in out
    diff = float(re.search(r"max \|cuvil - onnxruntime\| over the outputs: (\S+)", out).group(1))
    assert diff < 1e-4


def test_bench_cuv_and_python_function(work):
    ok("compile", work / "mlp.onnx", "-o", work / "bench.cuv")
    out = ok("bench", work / "bench.cuv", "-i", "x=8,4", "--threads", "2", "--repeat", "5", "--warmup", "1")
    assert "x[8, 4]; 2 thread(s)" in out and re.search(r"cuvil: p50 [\d.]+ ms", out)
    out = ok("bench", f"{work / 'functions.py'}:scaled_relu", "-i", "x=16,16", "--repeat", "3", "--warmup", "1")
    assert re.search(r"cuvil: p50 [\d.]+ ms", out)
    assert "needs the ONNX file itself" in fails("bench", work / "bench.cuv", "--compare", "onnxruntime")


def test_cache_info_verify_clear(work, tmp_path):
    env = {"CUVIL_CACHE_DIR": str(tmp_path / "cache"), "CUVIL_ARTIFACT_CACHE": "1"}
    assert "0 artifact(s)" in ok("cache", "info", env=env)
    ok("run", work / "mlp.onnx", "-i", f"x={work / 'x.npy'}", env=env)
    assert re.search(r"artifact cache: .*cache.*\(on\)\n\s+1 artifact\(s\)", ok("cache", "info", env=env))
    assert "checked 1 artifact(s)" in ok("cache", "verify", env=env)
    _corrupt_largest_file(tmp_path / "cache" / "artifacts")
    done = cuvil_cmd("cache", "verify", env=env)
    assert done.returncode == 1 and "1 corrupt" in done.stdout
    ok("run", work / "mlp.onnx", "-i", f"x={work / 'x.npy'}", env=env)  # compiled and saved again
    assert "deleted 1 compiled artifact(s)" in ok("cache", "clear", env=env)
    assert "0 artifact(s)" in ok("cache", "info", env=env)


def _corrupt_largest_file(folder):
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".ok")]
    target = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))


def test_cache_clear_works_right_after_import(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "CUVIL_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", "import cuvil; cuvil.cache.clear(); print(cuvil.cache.entries())"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_build_runtime_plugs_in_the_builder(tmp_path, monkeypatch):
    """Its arguments go to cuvil.runtime.build.main as they are (the README's example builds it for real); without
    that module the command says so."""
    import importlib.util

    from cuvil import cli

    if importlib.util.find_spec("cuvil.runtime.build") is None:
        assert "no runtime builder (cuvil/runtime/build.py)" in fails("build-runtime", "--out", tmp_path)
        return
    from cuvil.runtime import build

    seen = []
    monkeypatch.setattr(build, "main", lambda argv: seen.append(argv) or 0)
    assert cli.main(["build-runtime", "--out", str(tmp_path), "--sanitize"]) == 0
    assert seen == [["--out", str(tmp_path), "--sanitize"]]


def test_demo_still_runs():
    assert "max |cuvil - numpy|" in ok("demo", "--batch", "2", "--repeat", "2")
