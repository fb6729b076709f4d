"""precision= through every entry point (ONNX optimize, cuvil.compile of torch and JAX, cuvil.jit, the CLI) and
through cuvil.export / cuvil.load, against fp32 with the bounds below; the artifact cache keys the precision."""
from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

import cuvil
from cuvil.errors import UnsupportedError
from cuvil.quantize import compare

# (max error relative to the output's largest magnitude, cosine) a precision must reach on these small MLPs. bf16 keeps
# 8 bits of mantissa (and rounds the activations inside the GEMM on AVX512_BF16 / AMX), fp16 11.
BOUNDS = {"bf16": (2e-2, 0.9999), "fp16": (2e-3, 0.999999)}
PRECISIONS = tuple(BOUNDS)
RNG = np.random.default_rng(0)
W1, B1 = RNG.standard_normal((64, 96)).astype(np.float32) / 8, RNG.standard_normal(96).astype(np.float32)
W2 = RNG.standard_normal((10, 96)).astype(np.float32) / 8  # stored transposed, as a Linear's weight
X = RNG.standard_normal((4, 64)).astype(np.float32)


def _within(reference, model, inputs, precision):
    max_rel, cosine = BOUNDS[precision]
    for r in compare(reference, model, inputs):
        assert r.max_rel <= max_rel and r.cosine >= cosine, str(r)
        assert r.max_abs > 0  # the precision did change something: the weights were lowered


def _onnx_mlp():
    onnx = pytest.importorskip("onnx")
    from tests.frontends.onnx.helpers import model

    nodes = [onnx.helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), onnx.helper.make_node("Relu", ["h"], ["r"]),
             onnx.helper.make_node("Gemm", ["r", "w2"], ["y"], transB=1),
             onnx.helper.make_node("Softmax", ["y"], ["p"], axis=-1)]
    f32 = onnx.TensorProto.FLOAT
    return model(nodes, [("x", f32, ["n", 64])], [("p", f32, ["n", 10])], [("w1", W1), ("b1", B1), ("w2", W2)])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_onnx_optimize(precision):
    loaded = cuvil.load_onnx(_onnx_mlp().SerializeToString())
    fp32, low = loaded.optimize(), loaded.optimize(precision=precision)
    _within(fp32, low, (X,), precision)
    assert low.module.metadata["precision"] == precision


@pytest.mark.parametrize("precision", PRECISIONS)
def test_onnx_on_the_interpreter(precision):
    loaded = cuvil.load_onnx(_onnx_mlp())
    _within(loaded.optimize(target="interpreter"), loaded.optimize(target="interpreter", precision=precision),
            (X,), precision)


def _torch_mlp():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.LayerNorm(96),
                               torch.nn.Linear(96, 10)).eval(), torch.from_numpy(X)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_torch_compile_and_export(precision, tmp_path):
    model, x = _torch_mlp()
    fp32, low = cuvil.compile(model, (x,)), cuvil.compile(model, (x,), precision=precision)
    _within(fp32, low, (x,), precision)
    cuvil.export(low, tmp_path / "m.cuv")
    loaded = cuvil.load(tmp_path / "m.cuv")
    for r in compare(low, loaded, (X,)):
        assert r.max_abs == 0, str(r)  # the artifact runs the same kernels


@pytest.mark.parametrize("precision", PRECISIONS)
def test_jit_and_export(precision, tmp_path):
    def mlp(x):
        return np.maximum(x @ W1 + B1, 0) @ W2.T

    low = cuvil.jit(mlp, precision=precision)
    _within(cuvil.jit(mlp), low, (X,), precision)
    cuvil.export(low, tmp_path / "f.cuv", example_inputs=(X,))
    assert max(r.max_abs for r in compare(low, cuvil.load(tmp_path / "f.cuv"), (X,))) == 0


def test_jax_compile():
    jnp = pytest.importorskip("jax.numpy")

    def mlp(x):
        return jnp.maximum(x @ W1 + B1, 0) @ W2.T

    x = jnp.asarray(X)
    _within(cuvil.compile(mlp, (x,)), cuvil.compile(mlp, (x,), precision="bf16"), (x,), "bf16")


def test_onnx_export_and_load(tmp_path):
    low = cuvil.load_onnx(_onnx_mlp()).optimize(precision="bf16")
    cuvil.export(low, tmp_path / "o.cuv")
    assert max(r.max_abs for r in compare(low, cuvil.load(tmp_path / "o.cuv"), {"x": X})) == 0


def test_command_line(tmp_path):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(_onnx_mlp().SerializeToString())
    out = tmp_path / "mlp.cuv"
    subprocess.run([sys.executable, "-m", "cuvil", "compile", str(path), "-i", "x=4,64", "--precision", "fp16",
                    "-o", str(out)], check=True, capture_output=True)
    _within(cuvil.load_onnx(str(path)).optimize(), cuvil.load(out), (X,), "fp16")
    bad = subprocess.run([sys.executable, "-m", "cuvil", "compile", str(path), "--precision", "fp8", "-o",
                          str(out)], capture_output=True, text=True)
    assert bad.returncode != 0 and "fp8" in bad.stderr


def test_precision_is_part_of_the_cache_key(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "1")
    path = tmp_path / "mlp.onnx"
    path.write_bytes(_onnx_mlp().SerializeToString())
    first = {p: cuvil.load_onnx(str(path)).optimize(precision=p) for p in ("fp32", "bf16", "fp16")}
    again = {p: cuvil.load_onnx(str(path)).optimize(precision=p) for p in ("fp32", "bf16", "fp16")}
    assert [m.executable.cache for m in first.values()] == ["miss"] * 3
    assert [m.executable.cache for m in again.values()] == ["hit"] * 3
    for p in first:
        assert max(r.max_abs for r in compare(first[p], again[p], (X,))) == 0
    assert max(r.max_abs for r in compare(again["fp32"], again["bf16"], (X,))) > 0


def test_unknown_precision_and_calibration_are_named():
    loaded = cuvil.load_onnx(_onnx_mlp())
    with pytest.raises(UnsupportedError, match="'fp8' is not one of"):
        loaded.optimize(precision="fp8")
    with pytest.raises(UnsupportedError, match="calibration 'median'"):
        loaded.optimize(precision="int8", calibration="median")
    with pytest.raises(UnsupportedError, match="calibrate_dataset is for"):
        loaded.optimize(calibrate_dataset=[(X,)])
    with pytest.raises(UnsupportedError, match="'fp8'"):
        cuvil.jit(lambda x: x, precision="fp8")


def test_integer_precisions_go_to_the_int8_module():
    try:
        importlib.import_module("cuvil.quantize.int8")
    except ModuleNotFoundError:
        with pytest.raises(UnsupportedError, match="cuvil.quantize.int8"):
            cuvil.load_onnx(_onnx_mlp()).optimize(precision="int8")
    else:  # the int8 kernels are here: the integer precisions compile and run
        out = cuvil.load_onnx(_onnx_mlp()).optimize(precision="int8", calibrate_dataset=[(X,)])(X)
        assert np.isfinite(out[0]).all()


def test_integer_precisions_call_quantize_module_with_the_calibration(monkeypatch):
    """The contract with cuvil/quantize/int8.py: quantize_module(module, precision, calibrate_dataset=, method=)
    returns the Module to compile; the caller's module is not touched."""
    import types

    calls = []

    def quantize_module(module, precision, calibrate_dataset=None, method="minmax"):
        calls.append((precision, calibrate_dataset, method, module.metadata.get("precision")))
        return module
    monkeypatch.setitem(sys.modules, "cuvil.quantize.int8", types.SimpleNamespace(quantize_module=quantize_module))
    loaded = cuvil.load_onnx(_onnx_mlp())
    data = [(X,)]
    out = loaded.optimize(precision="int4", calibrate_dataset=data, calibration="entropy")
    assert calls == [("int4", data, "entropy", None)]
    assert out.module.metadata["precision"] == "int4" and "precision" not in loaded.module.metadata
