"""wasm32 as rows of the targets table (`wasm32`: SIMD128; `wasm32-relaxed`: relaxed-SIMD's FMA): a model compiled
for it is laid out in 4-lane blocks (NCHW4c), its `.cuv` holds both modules, and each loader runs the one its engine
validates; every path equals native x86-64 within fp32 tolerances."""
import json
import zlib

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import targets

from . import node
from .conftest import require
from .test_wasm import _close, _tuple


def test_wasm32_is_a_row_and_a_family():
    plain, relaxed = targets.levels("wasm32")
    assert (plain.name, relaxed.name) == ("wasm32", "wasm32-relaxed") and targets.get("wasm32") is plain
    assert plain.vector_lanes == relaxed.vector_lanes == 4 and plain.header == "wasm_simd128.h"
    assert plain.triple == relaxed.triple == "wasm32-wasi" and not plain.dlopen and not plain.openmp
    assert plain.features == ("simd128",) and relaxed.features == ("simd128", "relaxed_simd")
    assert "-msimd128" in plain.flags("zig") and "-mrelaxed-simd" not in plain.flags("zig")
    assert "-mrelaxed-simd" in relaxed.flags("zig") and "__wasm_relaxed_simd__" in relaxed.macros
    assert f"-DCUVIL_MR={plain.gemm_block[0]}" in plain.flags("zig")
    with targets.use("wasm32"):
        assert targets.layout_lanes() == 4 and targets.widens_blocks()
    assert not targets.widens_blocks()  # the host's kernel library has one block width


def test_every_row_keeps_its_fields():
    """The wasm32 fields came after the others' (rows are written positionally): every flag is a string."""
    assert targets.get("x86_64-v4").model_flags == ("-mprefer-vector-width=512",)
    for row in targets.TABLE.values():
        assert all(isinstance(f, str) for f in (*row.flags("gcc"), *row.flags("zig"), *row.model_flags)), row.name


def _export(net, x, path) -> tuple:
    """(path, IR text, input, native output) of `net` compiled and exported for wasm32."""
    require("ziglang")
    from cuvil.runtime.container import Container

    cuvil.export(cuvil.compile(net, (x,), target="wasm32"), path, "wasm32")
    want = _tuple(cuvil.compile(net, (x,))(x))
    ir = json.loads(zlib.decompress(bytes(Container.open(path).data("ir"))))["main"]
    return path, ir, x.numpy(), want


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """A CNN with direct blocked convolutions (a narrow first layer, a 1x1), compiled and exported for wasm32."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3),
                              torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 16, 1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()
    return _export(net, torch.randn(2, 3, 20, 20), tmp_path_factory.mktemp("wasm-levels") / "cnn.cuv")


@pytest.fixture(scope="module")
def winograd_cnn(tmp_path_factory):
    """bench.wasm's small CNN, smaller: its 3x3 convolutions of 32 and 64 channels take the 4-lane Winograd kernel."""
    import torch

    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
    return _export(net, torch.randn(1, 3, 32, 32), tmp_path_factory.mktemp("wasm-levels") / "winograd.cuv")


def test_a_cnn_compiled_for_wasm32_is_blocked_by_4(cnn):
    from cuvil.runtime.container import Container

    path, ir, _, _ = cnn
    assert ",4] = conv_nchwc" in ir and ",16] = conv_nchwc" not in ir and ",8] = conv_nchwc" not in ir
    c = Container.open(path)
    meta = json.loads(bytes(c.data("meta")))
    assert meta["levels"] == ["wasm32", "wasm32-relaxed"] and meta["features"] == ["simd128"]
    assert c.rows["native"].features == 1 << 48 and c.rows["native.1"].features == 1 << 48 | 1 << 50


@pytest.mark.parametrize("masked,native", [("", "native.1"), ("relaxed_simd", "native")])
@pytest.mark.parametrize("model", ["cnn", "winograd_cnn"])
def test_wasmtime_runs_each_level(request, model, monkeypatch, masked, native):
    require("wasmtime")
    from cuvil.runtime import wasm

    path, ir, x, want = request.getfixturevalue(model)
    kernel = "winograd" if model == "winograd_cnn" else "direct"
    assert ",4] = conv_nchwc" in ir and f'algorithm = "{kernel}"' in ir
    monkeypatch.setenv("CUVIL_DISABLE_CPU_FEATURES", masked)
    art = wasm.load(path)
    assert art.native == native
    _close(_tuple(art(x)), want)


@pytest.mark.parametrize("relaxed,features,native", [(False, None, "native"), (True, None, "native.1"),
                                                     (True, ["simd128"], "native")])
@pytest.mark.parametrize("model", ["cnn", "winograd_cnn"])
def test_node_runs_each_level(request, model, tmp_path, relaxed, features, native):
    """Node.js 20 validates relaxed-SIMD only with its flag: cuvil.js probes the engine and picks the level."""
    require("node")
    path, _, x, want = request.getfixturevalue(model)
    result = node.run(path, [x], tmp_path, features=features, relaxed=relaxed)
    assert "error" not in result, result
    assert result["native"] == native
    _close(result["outputs"], want)


def test_only_the_relaxed_module_needs_relaxed_simd(cnn):
    """The SIMD128 module validates in an engine without relaxed-SIMD; the relaxed one uses it (its FMA)."""
    require("wasmtime")
    import wasmtime

    from cuvil.runtime import wasm
    from cuvil.runtime.container import Container

    config = wasmtime.Config()
    config.wasm_relaxed_simd = False
    engine = wasmtime.Engine(config)
    assert wasm.engine_features(engine) == 1 << 48
    c = Container.open(cnn[0])
    wasmtime.Module.validate(engine, bytes(c.data("native")))
    with pytest.raises(wasmtime.WasmtimeError, match="relaxed SIMD"):
        wasmtime.Module.validate(engine, bytes(c.data("native.1")))


def test_an_engine_without_simd128_is_refused(cnn, tmp_path):
    require("node")
    result = node.run(cnn[0], [cnn[2]], tmp_path, features=[])
    assert result["error"]["kind"] == "artifact" and "needs simd128" in result["error"]["message"]


def test_a_jit_function_exported_for_wasm32_is_compiled_for_it(tmp_path):
    """export(..., "wasm32", example_inputs=) compiles for the target (its layout), as for the other rows."""
    require("ziglang")
    require("wasmtime")
    from cuvil.runtime import wasm

    def affine(x, w):
        return np.maximum(x @ w + 1.0, 0.0)

    x, w = np.ones((3, 5), np.float32), np.full((5, 2), 0.5, np.float32)
    fn = cuvil.jit(affine)
    cuvil.export(fn, tmp_path / "a.cuv", "wasm32", example_inputs=(x, w))
    np.testing.assert_allclose(wasm.load(tmp_path / "a.cuv")(x, w), affine(x, w), rtol=1e-6)
    assert not fn.signatures  # the host's function compiled nothing: a copy compiled for wasm32 did
