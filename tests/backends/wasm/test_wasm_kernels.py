"""The kernel library's wasm-only paths (gemm.c's `__wasm_simd128__` blocks) at sizes that leave tails: each level
(SIMD128, relaxed-SIMD) under wasmtime and Node.js equals PyTorch's float64 result within fp32 tolerances."""
import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import codegen, targets

from . import node
from .conftest import require
from .test_wasm import _close


@pytest.fixture(scope="module")
def gemv(tmp_path_factory):
    """A batch-1 MLP whose weights are packed constants (W2's path: gemm.c's row kernel). K = 523 and 1030 leave
    K blocks whose length is no multiple of four, N = 1030 a partial panel (the second layer, unpacked, reads W
    in place); (path, input, want)."""
    require("ziglang")
    import torch

    torch.manual_seed(19)
    net = torch.nn.Sequential(torch.nn.Linear(523, 1030), torch.nn.ReLU(), torch.nn.Linear(1030, 37)).eval()
    compiled, case = _exported(net, torch.randn(1, 523), tmp_path_factory.mktemp("wasm-kernels") / "gemv.cuv")
    assert "cuvil_sgemm_packed(1, 1030, 523," in _wasm_source(compiled)
    return case


def _exported(net, x, path):
    """`net` compiled for wasm32 and exported to `path`: (the compiled model, (path, input, [PyTorch's float64
    result]))."""
    import torch

    compiled = cuvil.compile(net, (x,), target="wasm32")
    cuvil.export(compiled, path, "wasm32")
    with torch.no_grad():
        want = net.double()(x.double()).float().numpy()
    return compiled, (path, x.numpy(), [want])


def _wasm_source(compiled) -> str:
    with targets.use("wasm32"):
        return codegen.generate(compiled.executable.module).source


def _under_wasmtime(case, monkeypatch, masked: str, native: str) -> None:
    """The exported case run by wasmtime with `masked` features off picks the `native` module and matches."""
    require("wasmtime")
    from cuvil.runtime import wasm

    path, x, want = case
    monkeypatch.setenv("CUVIL_DISABLE_CPU_FEATURES", masked)
    art = wasm.load(path)
    assert art.native == native
    _close([np.asarray(art(x))], want)


@pytest.mark.parametrize("masked,native", [("", "native.1"), ("relaxed_simd", "native")])
def test_the_packed_gemv_under_wasmtime(gemv, monkeypatch, masked, native):
    _under_wasmtime(gemv, monkeypatch, masked, native)


@pytest.mark.parametrize("relaxed,native", [(False, "native"), (True, "native.1")])
def test_the_packed_gemv_under_node(gemv, tmp_path, relaxed, native):
    require("node")
    path, x, want = gemv
    result = node.run(path, [x], tmp_path, relaxed=relaxed)
    assert "error" not in result, result
    assert result["native"] == native
    _close(result["outputs"], want)


@pytest.fixture(scope="module")
def blocked_pools(tmp_path_factory):
    """Max pools on the 4-lane blocked tensors of a CNN (the row helper's 4-lane form): a padded 3x3 stride-2 window
    (its clipped edge columns and rows), then a dilated ceil-mode one on an odd map; (path, input, want)."""
    require("ziglang")
    import torch

    torch.manual_seed(23)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
                              torch.nn.Conv2d(8, 8, 3, padding=1),
                              torch.nn.MaxPool2d((3, 2), (1, 2), dilation=(2, 1), ceil_mode=True),
                              torch.nn.Conv2d(8, 4, 3, padding=1)).eval()
    compiled, case = _exported(net, torch.randn(2, 3, 15, 13), tmp_path_factory.mktemp("wasm-kernels") / "pools.cuv")
    assert cuvil.inspect_ir(compiled).count(",4] = max_pool") == 2
    assert "_row(xp, yr, g, oz, a, b, 4)" in _wasm_source(compiled)
    return case


@pytest.mark.parametrize("masked,native", [("", "native.1"), ("relaxed_simd", "native")])
def test_blocked_max_pools_under_wasmtime(blocked_pools, monkeypatch, masked, native):
    _under_wasmtime(blocked_pools, monkeypatch, masked, native)


def test_blocked_max_pools_under_node(blocked_pools, tmp_path):
    require("node")
    path, x, want = blocked_pools
    result = node.run(path, [x], tmp_path)
    assert "error" not in result, result
    _close(result["outputs"], want)


@pytest.mark.parametrize("channels", [3, 2])
@pytest.mark.parametrize("masked", ["", "relaxed_simd"])
def test_narrow_first_convs_under_wasmtime(tmp_path, monkeypatch, channels, masked):
    """A first conv's narrow input block (conv_nchwc.c's strips read g->c lanes a pixel), RGB and not: an odd map
    leaves strips of each width."""
    require("ziglang")
    require("wasmtime")
    import torch

    from cuvil.runtime import wasm

    torch.manual_seed(29)
    net = torch.nn.Sequential(torch.nn.Conv2d(channels, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 4, 3, padding=1)).eval()
    compiled, (path, x, want) = _exported(net, torch.randn(2, channels, 9, 11), tmp_path / "narrow.cuv")
    assert ",4] = conv_nchwc" in cuvil.inspect_ir(compiled)
    monkeypatch.setenv("CUVIL_DISABLE_CPU_FEATURES", masked)
    _close([np.asarray(wasm.load(path)(x))], want)
