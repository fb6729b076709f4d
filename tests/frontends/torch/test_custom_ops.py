"""Users' own torch.library ops bridged to ops declared with `cuvil.register_op(..., torch_op=...)`."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import cuvil  # noqa: E402
from cuvil.ops import Attr, registry, same_as_operand  # noqa: E402


@torch.library.custom_op("cuviltest::add_relu", mutates_args=())
def add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x + y)


@add_relu.register_fake
def _(x, y):
    return torch.empty_like(x)


@torch.library.custom_op("cuviltest::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x, scale):
    return torch.empty_like(x)


@pytest.fixture
def declared():
    """The Cuvil side of both ops, removed again after the test (the op sweep counts registered ops)."""
    ops = [cuvil.register_op("test_add_relu", operands=2, shape=same_as_operand, traits={"elementwise"},
                             reference=lambda xs, a: np.maximum(xs[0] + xs[1], 0),
                             c_expr="fmaxf({0} + {1}, 0.0f)", torch_op="cuviltest::add_relu", replace=True),
           cuvil.register_op("test_scaled_tanh", shape=same_as_operand, traits={"elementwise"},
                             attrs={"scale": Attr("float", 1.0)},
                             reference=lambda xs, a: np.tanh(xs[0]) * a["scale"], torch_op="cuviltest::scaled_tanh",
                             decompose=lambda b, xs, a: b.mul(b.tanh(xs[0]), b.full(a["scale"], xs[0].type.shape,
                                                                                     xs[0].type.dtype)),
                             replace=True)]
    yield ops
    for op in ops:
        registry._REGISTRY.pop(op.name, None)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, skip):
        return torch.ops.cuviltest.scaled_tanh(torch.ops.cuviltest.add_relu(self.lin(x), skip), 0.5) * 2


def test_a_torch_custom_op_compiles_fuses_and_matches_torch(declared):
    torch.manual_seed(0)
    model = Block().eval()
    x, skip = torch.randn(4, 8), torch.randn(4, 8)
    compiled = cuvil.compile(model, (x, skip), cache=False)
    text = cuvil.inspect_ir(compiled)
    assert "test_add_relu" in text
    torch.testing.assert_close(compiled(x, skip), model(x, skip), rtol=1e-5, atol=1e-5)
    interpreted = cuvil.compile(model, (x, skip), target="interpreter", cache=False)
    torch.testing.assert_close(interpreted(x, skip), model(x, skip), rtol=1e-5, atol=1e-5)


def test_a_custom_op_without_c_or_decomposition_says_what_to_add(declared):
    registry._REGISTRY["test_add_relu"] = registry.OpDef(**{**declared[0].__dict__, "c_expr": None})
    with pytest.raises(cuvil.UnsupportedError, match="c_expr .*or a decompose"):
        cuvil.compile(Block().eval(), (torch.randn(2, 8), torch.randn(2, 8)), cache=False)


def test_bridge_names_are_checked():
    with pytest.raises(ValueError, match="namespace::name"):
        cuvil.register_op("test_bad_bridge", shape=same_as_operand, torch_op="mylib.add_relu")


def test_a_custom_elementwise_op_joins_its_neighbours_kernel(declared):
    class Chain(torch.nn.Module):
        def forward(self, x, s):
            return torch.sigmoid(torch.ops.cuviltest.add_relu(x * 2, s)) + 1

    x, s = torch.randn(4, 8), torch.randn(4, 8)
    compiled = cuvil.compile(Chain(), (x, s), cache=False)
    fused = cuvil.inspect_ir(compiled).split("fused", 1)[1]
    assert "mul" in fused and "test_add_relu" in fused and "sigmoid" in fused and "add" in fused
    torch.testing.assert_close(compiled(x, s), Chain()(x, s), rtol=1e-5, atol=1e-6)
