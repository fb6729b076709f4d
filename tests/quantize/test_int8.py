"""quantize_module at the IR level (which layers become which ops, what stays fp32, the saved ranges) and through
compiled modules against PyTorch fp32, with the accuracy bounds stated in each test."""
import json

import numpy as np
import pytest

from cuvil.compiler import compile_module
from cuvil.errors import ShapeError, UnsupportedError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.ir.dtypes import DType
from cuvil.ir.serialize import from_bytes, to_bytes
from cuvil.quantize.int8 import quantize_module, quantize_weight_int4, quantize_weight_int8
from cuvil.ops.quantized import dequantize_int4

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


def cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _ops(module):
    return [(op.name, op.results[0].type.dtype.value) for op in module.main.walk() if op.name not in ("constant",
                                                                                                       "return")]


@pytest.fixture(scope="module")
def mlp():
    from cuvil.frontend import build_ir
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    return model, build_ir(model, input_spec={"x": (4, 64)})


@pytest.fixture(scope="module")
def cnn():
    from cuvil.frontend import build_ir
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 3, padding=1, groups=4), torch.nn.Flatten(),
                                torch.nn.Linear(32 * 8 * 8, 10)).eval()
    with torch.no_grad():  # a BatchNorm with statistics of its own, folded into the conv before quantizing
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model, build_ir(model, input_spec={"x": (1, 3, 16, 16)})


def _data(shape, n):
    return [(np.random.default_rng(i).standard_normal(shape).astype(np.float32),) for i in range(n)]


def _torch(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def test_dynamic_int8_fuses_bias_and_activations(mlp):
    model, module = mlp
    q = quantize_module(module, "int8")
    assert _ops(q) == [("qlinear_i8", "f32")] * 3
    acts = [op.attrs["act"] for op in q.main.walk() if op.name == "qlinear_i8"]
    assert acts == ["gelu_erf", "relu", "none"]
    assert all(op.attrs["x_scale"] == 0.0 for op in q.main.walk() if op.name == "qlinear_i8")  # per row at run time
    assert json.loads(q.metadata["quantization"])["mode"] == "dynamic"
    assert _ops(module)[0] != ("qlinear_i8", "f32")  # the caller's module is left as it was
    x = _data((4, 64), 1)[0][0]
    assert cosine(compile_module(q)(x)[0], _torch(model, x)) >= 0.999


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_static_int8_passes_uint8_between_layers(mlp, method):
    model, module = mlp
    q = quantize_module(module, "int8", _data((4, 64), 8), method=method)
    assert _ops(q) == [("qlinear_i8", "u8"), ("qlinear_i8", "u8"), ("qlinear_i8", "f32")]
    saved = json.loads(q.metadata["quantization"])
    assert saved["mode"] == "static" and saved["method"] == method and len(saved["ranges"]) == 3
    x = _data((4, 64), 1)[0][0]
    got, want = compile_module(q)(x)[0], _torch(model, x)
    np.testing.assert_allclose(got, interpret(q, [x])[0], rtol=1e-4, atol=1e-4)
    assert cosine(got, want) >= (0.99 if method == "entropy" else 0.999)


def test_the_ranges_travel_with_the_module(mlp):
    """A module saved and loaded again (what the .cuv and the cache hold) keeps the calibrated attributes."""
    _, module = mlp
    q = quantize_module(module, "int8", _data((4, 64), 4))
    again = from_bytes(to_bytes(q))
    attrs = [op.attrs for op in again.main.walk() if op.name == "qlinear_i8"]
    assert attrs == [op.attrs for op in q.main.walk() if op.name == "qlinear_i8"] and attrs[0]["x_scale"] > 0
    assert again.metadata["quantization"] == q.metadata["quantization"]


def test_max_samples_limits_the_dataset(mlp):
    _, module = mlp
    seen = []

    def dataset():
        for i, item in enumerate(_data((4, 64), 50)):
            seen.append(i)
            yield item
    quantize_module(module, "int8", dataset(), max_samples=3)
    assert len(seen) <= 4


def test_dict_samples_by_input_name(mlp):
    _, module = mlp
    name = module.main.args[0].name
    a = quantize_module(module, "int8", [{name: x} for (x,) in _data((4, 64), 3)])
    b = quantize_module(module, "int8", _data((4, 64), 3))
    assert a.metadata["quantization"] == b.metadata["quantization"]
    with pytest.raises(ShapeError, match="lacks inputs"):
        quantize_module(module, "int8", [{"nope": np.zeros((4, 64), np.float32)}])


def test_bad_arguments_are_named(mlp):
    _, module = mlp
    with pytest.raises(UnsupportedError, match="precision 'int3'"):
        quantize_module(module, "int3")
    with pytest.raises(UnsupportedError, match="calibration method 'mean'"):
        quantize_module(module, "int8", _data((4, 64), 1), method="mean")
    with pytest.raises(UnsupportedError, match="group_size"):
        quantize_module(module, "int4", group_size=48)
    with pytest.raises(ShapeError, match="empty"):
        quantize_module(module, "int8", [])


@pytest.mark.parametrize("static", [False, True])
def test_int8_convolutions(cnn, static):
    model, module = cnn
    q = quantize_module(module, "int8", _data((1, 3, 16, 16), 8) if static else None, kernels="int8")
    names = [name for name, _ in _ops(q)]
    assert names.count("qconv_i8") == 2 and "conv" in names and names.count("qlinear_i8") == 1  # grouped: fp32
    assert "batch_norm" not in names
    if static:
        assert _ops(q)[0] == ("qconv_i8", "u8")
    x = _data((1, 3, 16, 16), 1)[0][0]
    assert cosine(compile_module(q)(x)[0], _torch(model, x)) >= 0.999


@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_weight_only(mlp, group):
    model, module = mlp
    q = quantize_module(module, "int4", group_size=group)
    assert _ops(q) == [("linear_i4", "f32")] * 3
    assert [op.attrs["group"] for op in q.main.walk() if op.name == "linear_i4"] == [min(group, 64), group, group]
    x = _data((4, 64), 1)[0][0]
    assert cosine(compile_module(q)(x)[0], _torch(model, x)) >= 0.99


def test_int4_pads_a_k_that_is_not_a_multiple_of_32():
    from cuvil.frontend import build_ir
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(50, 100), torch.nn.ReLU(), torch.nn.Linear(100, 7)).eval()
    q = quantize_module(build_ir(model, input_spec={"x": (3, 50)}), "int4", group_size=64)
    assert [name for name, _ in _ops(q)] == ["pad", "linear_i4", "pad", "linear_i4"]
    # K 50 and 100 padded to 64 and 128
    assert [op.attrs["group"] for op in q.main.walk() if op.name == "linear_i4"] == [64, 64]
    x = _data((3, 50), 1)[0][0]
    got = compile_module(q)(x)[0]
    assert cosine(got, _torch(model, x)) >= 0.99
    np.testing.assert_allclose(got, interpret(q, [x])[0], rtol=1e-4, atol=1e-4)


def test_weight_quantizers_bound_their_error():
    w = RNG.standard_normal((8, 256)).astype(np.float32)
    q, scale = quantize_weight_int8(w)
    assert np.abs(q.astype(np.float32) * scale[:, None] - w).max() <= scale.max() / 2 + 1e-6
    packed, s4, z4 = quantize_weight_int4(w, 32)
    assert np.abs(dequantize_int4(packed, s4, z4, 32) - w).max() <= s4.max() / 2 + 1e-6


def test_activation_matmuls_stay_fp32():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (2, 8, 16)), TensorType(DType.f32, (2, 16, 8))])
    b.ret(b.matmul(*b.args))
    assert _ops(quantize_module(m, "int8")) == [("matmul", "f32")]
