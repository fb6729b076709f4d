"""int8 residual folding: a ResNet block's skip add (and the relu after it) folded into the second conv's qconv_i8,
with the skip read as uint8 where its producer writes uint8, so int8 tensors flow from block to block. Checked at
the IR level, through compiled modules against PyTorch fp32 and the interpreter, and on the kernel's every path."""
import numpy as np
import pytest

from cuvil.compiler import compile_module
from cuvil.errors import CuvilError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.ir.dtypes import DType
from cuvil.ops import get_op
from cuvil.quantize.int8 import quantize_module

from .test_conv_int8 import GEOMETRIES, _layer, _run_paths
from .test_int8 import _data, _torch, cosine

torch = pytest.importorskip("torch")


class _Block(torch.nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                  nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
            if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


@pytest.fixture(scope="module")
def resnet():
    from cuvil.frontend import build_ir
    torch.manual_seed(3)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), _Block(16, 16, 1), _Block(16, 32, 2),
                          _Block(32, 32, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model, build_ir(model, input_spec={"x": (1, 3, 16, 16)})


def _convs(module):
    return [op for op in module.main.walk() if op.name == "qconv_i8"]


def test_static_blocks_fold_their_skip_and_pass_uint8_between_them(resnet):
    model, module = resnet
    q = quantize_module(module, "int8", _data((1, 3, 16, 16), 8), kernels="int8")
    names = [op.name for op in q.main.walk()]
    assert "add" not in names and "relu" not in names and "conv" not in names
    folded = [op for op in _convs(q) if op.attrs["residual"]]
    assert len(folded) == 3
    # every block output but the last (read by the pool) is uint8, and is read as uint8 by the next block's skip
    assert [op.results[0].type.dtype for op in folded] == [DType.u8, DType.u8, DType.f32]
    assert [op.operands[-1].type.dtype for op in folded] == [DType.u8, DType.u8, DType.u8]
    assert all(op.attrs["res_scale"] > 0 for op in folded)
    x = _data((1, 3, 16, 16), 1)[0][0]
    got = compile_module(q)(x)[0]
    assert cosine(got, _torch(model, x)) >= 0.999
    np.testing.assert_allclose(got, interpret(q, [x])[0], rtol=0, atol=0.05 * np.abs(got).max())


def test_a_max_pool_between_static_layers_runs_on_uint8():
    """ResNet's stem: conv, relu, max_pool, then a block reading the pool twice (its input and its skip). The conv
    writes uint8 in the pooled tensor's range, the pool runs on uint8, and the block reads it as uint8."""
    from cuvil.frontend import build_ir
    torch.manual_seed(4)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1), _Block(16, 16, 1),
                          nn.Flatten(), nn.Linear(16 * 5 * 5, 10)).eval()
    q = quantize_module(build_ir(model, input_spec={"x": (1, 3, 20, 20)}), "int8", _data((1, 3, 20, 20), 8),
                        kernels="int8")
    stem, first, second = _convs(q)
    pool = next(op for op in q.main.walk() if op.name == "max_pool")
    assert stem.results[0].type.dtype is DType.u8 and pool.operands[0] is stem.results[0]
    assert pool.results[0].type.dtype is DType.u8
    assert first.operands[0] is pool.results[0] and second.operands[-1] is pool.results[0]
    assert (stem.attrs["out_scale"], stem.attrs["out_zero"]) == (first.attrs["x_scale"], first.attrs["x_zero"])
    assert (second.attrs["res_scale"], second.attrs["res_zero"]) == (first.attrs["x_scale"], first.attrs["x_zero"])
    x = _data((1, 3, 20, 20), 1)[0][0]
    got = compile_module(q)(x)[0]
    assert cosine(got, _torch(model, x)) >= 0.999
    np.testing.assert_allclose(got, interpret(q, [x])[0], rtol=0, atol=0.05 * np.abs(got).max())


def test_a_max_pool_read_by_a_float_op_stays_float():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (1, 4, 8, 8))])
    w = b.constant(np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32) / 8)
    y = b.relu(b.conv(b.args[0], w, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=1))
    b.ret(b.exp(b.emit("max_pool", y, kernel=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], ceil_mode=False,
                       dilations=[1, 1])))
    q = quantize_module(m, "int8", _data((1, 4, 8, 8), 4), kernels="int8")
    assert [op.results[0].type.dtype for op in q.main.walk() if op.name in ("qconv_i8", "max_pool")] == \
        [DType.f32, DType.f32]


def test_dynamic_blocks_fold_an_f32_skip(resnet):
    model, module = resnet
    q = quantize_module(module, "int8", kernels="int8")
    folded = [op for op in _convs(q) if op.attrs["residual"]]
    assert len(folded) == 3 and all(op.operands[-1].type.dtype is DType.f32 and op.attrs["res_scale"] == 0
                                    for op in folded)
    assert "add" not in [op.name for op in q.main.walk()]
    x = _data((1, 3, 16, 16), 1)[0][0]
    assert cosine(compile_module(q)(x)[0], _torch(model, x)) >= 0.999


def test_a_conv_result_read_twice_keeps_its_add():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (1, 8, 6, 6)), TensorType(DType.f32, (1, 8, 6, 6))])
    w = b.constant(np.random.default_rng(0).standard_normal((8, 8, 3, 3)).astype(np.float32) / 8)
    y = b.conv(b.args[0], w, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=1)
    b.ret(b.relu(b.add(y, b.args[1])), b.exp(y))
    q = quantize_module(m, "int8", kernels="int8")
    assert [op.attrs["residual"] for op in _convs(q)] == [False]
    assert "add" in [op.name for op in q.main.walk()]


@pytest.mark.parametrize("geom", ["3x3-odd-channels", "amx-3x3"])
def test_a_uint8_residual_on_every_path(geom):
    x, w, ws, bias, full = _layer(GEOMETRIES[geom], x_scale=0.02, x_zero=128, act="relu", out_scale=0.05,
                                  out_zero=4)
    oh, ow = GEOMETRIES[geom][0][2:]
    res = np.random.default_rng(2).integers(0, 256, (1, GEOMETRIES[geom][1], oh, ow)).astype(np.uint8)
    attrs = {**full, "residual": True, "res_scale": 0.03, "res_zero": 17}
    want = get_op("qconv_i8").reference([x, w, ws, bias, res], attrs)
    got = _run_paths(x, w, ws, bias, full, residual=res, res_scale=0.03, res_zero=17)
    assert got.dtype == np.uint8 and np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert (want != get_op("qconv_i8").reference([x, w, ws, bias], full)).any()  # the residual mattered


def test_a_residual_of_the_wrong_type_or_shape_is_refused():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.u8, (1, 4, 5, 5)), TensorType(DType.f32, (1, 8, 5, 5)),
                                         TensorType(DType.f32, (1, 8, 4, 5))])
    w = b.constant(np.ones((8, 4, 3, 3), np.int8))
    s = b.constant(np.ones(8, np.float32))
    conv = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), x_scale=0.1, residual=True)
    with pytest.raises(CuvilError, match="residual must be u8"):
        b.qconv_i8(b.args[0], w, s, b.args[1], res_scale=0.5, **conv)
    with pytest.raises(CuvilError, match="residual"):
        b.qconv_i8(b.args[0], w, s, b.args[2], **conv)
    y = b.qconv_i8(b.args[0], w, s, b.args[1], **conv)
    assert y.type == TensorType(DType.f32, (1, 8, 5, 5))
