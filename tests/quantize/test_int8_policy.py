"""Which kernels int8 layers run on (cuvil.quantize.int8.layer_kernel): the int8 ones with a byte dot product (VNNI,
AMX), else convolutions and Linears of 16 rows or more on the fp32 kernels with weights rounded to int8. Both paths
are forced and checked against fp32 on whatever CPU runs the tests; the choice itself is checked on faked int8
paths."""
import json

import numpy as np
import pytest

from cuvil.backends.cpu import kernels_int8
from cuvil.backends.cpu.flags import opt_level
from cuvil.compiler import compile_module
from cuvil.ir import Builder, Module, TensorType
from cuvil.ir.dtypes import DType
from cuvil.ir.symbolic import sym
from cuvil.quantize import int8
from cuvil.quantize.int8 import dequantized_weight, find_layers, layer_kernel, quantize_module

torch = pytest.importorskip("torch")
nn = torch.nn


class _Block(nn.Module):
    """A ResNet basic block (its BatchNorms already folded into the convs' weights and biases): conv-relu, conv,
    the skip added, relu."""

    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x):
        return torch.relu(self.body(x) + x)


@pytest.fixture(scope="module")
def cnn():
    from cuvil.frontend import build_ir
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), _Block(16), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 10)).eval()
    return model, build_ir(model, input_spec={"x": (1, 3, 16, 16)})


def _linear(rows) -> Module:
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (*rows, 64))])
    b.ret(b.matmul(b.args[0], b.constant(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32))))
    return m


def _data(n):
    return [(np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32),) for i in range(n)]


def _names(module):
    return [op.name for op in module.main.walk()]


def _cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("isa", [0, 1, 2, 3, 4])
def test_the_choice_by_int8_path(cnn, isa):
    """VNNI (3) and AMX (4): every layer int8. Below: convs fp32, Linears int8 only under 16 rows known when
    compiling (a symbolic batch may be large)."""
    _, module = cnn
    conv = next(layer for layer in find_layers(module.main, module) if layer.kind == "conv")
    assert layer_kernel(conv, isa) == ("int8" if isa >= 3 else "fp32")
    for rows, slow in [((1,), "int8"), ((3, 5), "int8"), ((16,), "fp32"), ((2, 128), "fp32"), ((sym("n"),), "fp32")]:
        m = _linear(rows)
        (layer,) = find_layers(m.main, m)
        assert layer_kernel(layer, isa) == ("int8" if isa >= 3 else slow), rows


@pytest.mark.parametrize("isa", [1, 3])
def test_auto_follows_the_cpu(cnn, monkeypatch, isa):
    """kernels="auto" (and precision="int8", which calls it) asks the CPU: faked here as AVX2 (1) and VNNI (3)."""
    import cuvil.quantize
    _, module = cnn
    monkeypatch.setattr(int8, "int8_path", lambda: isa)
    for q in (quantize_module(module, "int8", _data(4)), cuvil.quantize.lower_precision(module, "int8", _data(4))[0]):
        names = _names(q)
        assert names.count("qconv_i8") == (3 if isa >= 3 else 0) and names.count("qlinear_i8") == 1
        assert names.count("conv") == (0 if isa >= 3 else 3)
        saved = json.loads(q.metadata["quantization"])
        assert (saved["int8_path"], saved["fp32_layers"], saved["layers"]) == (isa, 0 if isa >= 3 else 3,
                                                                              4 if isa >= 3 else 1)


def test_the_real_cpu_path_is_the_kernels():
    assert int8.int8_path() == kernels_int8.best_isa(opt_level())
    with kernels_int8.isa(1, opt_level()):  # CUVIL_INT8_ISA's cap: a VNNI host chooses as an AVX2 one
        assert int8.int8_path() == min(1, kernels_int8.best_isa(opt_level()))


@pytest.mark.parametrize("static", [False, True])
def test_both_paths_against_fp32(cnn, static):
    """Forced either way on this CPU: int8 kernels (weights and activations rounded) within cosine 0.999 of fp32;
    fp32 kernels (weights rounded, activations not) within 0.9999, and equal to the fp32 model on the rounded weights
    itself (f32 tolerance)."""
    model, module = cnn
    x = _data(9)[8][0]
    fp32 = compile_module(module)(x)[0]
    dataset = _data(8) if static else None
    on_int8 = quantize_module(module, "int8", dataset, kernels="int8")
    on_fp32 = quantize_module(module, "int8", dataset, kernels="fp32")
    assert "conv" not in _names(on_int8) and _names(on_fp32).count("conv") == 3
    assert "qconv_i8" not in _names(on_fp32) and "qlinear_i8" not in _names(on_fp32)
    assert _cosine(compile_module(on_int8)(x)[0], fp32) >= 0.999
    got = compile_module(on_fp32)(x)[0]
    assert _cosine(got, fp32) >= 0.9999
    rounded = _rounded_weights(model)
    with torch.no_grad():
        np.testing.assert_allclose(got, rounded(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-4)


def _rounded_weights(model):
    """`model` with every conv and Linear weight rounded to int8 and dequantized."""
    import copy

    rounded = copy.deepcopy(model)
    for m in rounded.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            m.weight.data = torch.from_numpy(dequantized_weight(m.weight.detach().numpy()))
    return rounded


def test_bad_kernels_are_named(cnn):
    from cuvil.errors import UnsupportedError
    with pytest.raises(UnsupportedError, match="kernels"):
        quantize_module(cnn[1], "int8", kernels="int16")
