"""The PyTorch entry points: cuvil.compile, cuvil.frontend.build_ir, their inputs, outputs and errors."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import cuvil
from cuvil.frontend import build_ir

from .helpers import compile_torch
from .models import ResNet18


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 8)
        self.register_buffer("offset", torch.arange(8.0))

    def forward(self, x, *, bias):
        h = torch.relu(self.body(x)) + self.offset
        return {"sum": h.sum(-1), "pair": (h + bias, h.shape[-1])}


def test_outputs_keep_the_module_structure_and_kinds():
    model = TwoHeads()
    x, bias = torch.randn(2, 4), torch.randn(2, 8)
    compiled = compile_torch(model, {"x": x, "bias": bias})
    out = compiled(x=x, bias=bias)
    expected = model(x=x, bias=bias)
    assert set(out) == {"sum", "pair"} and out["pair"][1] == 8
    torch.testing.assert_close(out["pair"][0], expected["pair"][0].detach())
    torch.testing.assert_close(out["sum"], expected["sum"].detach())
    from_numpy = compiled(x=x.numpy(), bias=bias.numpy())  # NumPy in, torch out
    assert isinstance(from_numpy["sum"], torch.Tensor)


def test_parameters_and_buffers_are_constants_without_copies():
    model = TwoHeads()
    module = build_ir(model, {"x": (2, 4), "bias": (2, 8)})
    weight = module.constants["body.weight"]
    assert np.shares_memory(weight, model.body.weight.detach().numpy())
    assert np.shares_memory(module.constants["offset"], model.offset.numpy())


def test_build_ir_with_named_symbolic_sizes():
    module = build_ir(ResNet18(num_classes=10, width=8), input_spec={"x": ("batch", 3, 32, 32)})
    assert str(module.main.args[0].type) == "f32[batch,3,32,32]"
    assert str(module.main.result_types[0]) == "f32[batch,10]"
    assert module.metadata["target"] == "cpu"


def test_build_ir_takes_dtypes_and_example_tensors():
    def lookup(ids, table):
        return table[ids].sum(1)

    module = build_ir(lookup, {"ids": ((3, 2), torch.int64), "table": torch.randn(5, 4)})
    assert [str(a.type) for a in module.main.args] == ["i64[3,2]", "f32[5,4]"]


def test_build_ir_rejects_training_and_unknown_targets():
    with pytest.raises(cuvil.UnsupportedError, match="mode='train' is not supported"):
        build_ir(ResNet18(), {"x": (1, 3, 32, 32)}, mode="train")
    with pytest.raises(ValueError, match="unknown target"):
        build_ir(ResNet18(), {"x": (1, 3, 32, 32)}, target="tpu")


def test_export_runs_in_eval_mode_and_restores_training_flags():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(4)).train()
    x = torch.randn(3, 4)
    compiled = compile_torch(model, (x,))
    assert model.training and all(m.training for m in model.modules())
    torch.testing.assert_close(compiled(x), model.eval()(x).detach())


def test_locations_name_the_fx_node_and_the_source_line():
    def fn(x):
        return torch.tanh(x) * 2

    line = inspect.getsourcelines(fn)[1] + 1
    module = compile_torch(fn, (torch.randn(3),)).module
    tanh = next(op for op in module.main.walk() if op.name == "tanh")
    assert tanh.loc.file == __file__ and tanh.loc.line == line and tanh.loc.node == "fx:tanh"


def test_unsupported_op_names_the_op_and_the_line():
    def fn(x):
        return torch.histc(x, bins=4)

    with pytest.raises(cuvil.UnsupportedError, match=r"aten\.histc.*torch\.histc\(x, bins=4\).*test_api\.py:\d+"):
        compile_torch(fn, (torch.randn(3),))


def test_an_unsupported_dtype_names_the_node_and_the_line():
    def fn(x):
        return x.to(torch.complex32).real.float()  # complex halves: no element type in the IR

    with pytest.raises(cuvil.UnsupportedError, match=r"_to_copy.*x\.to\(torch\.complex32\).*complex32.*test_api"):
        compile_torch(fn, (torch.randn(3),))


def _slice_to_a_count(x):
    return x[: (x > 0).sum().item()]


def test_data_dependent_shapes_are_a_clear_error():
    with pytest.raises(cuvil.UnsupportedError, match="data-dependent"):
        compile_torch(_slice_to_a_count, (torch.randn(5),))


def test_export_failures_and_bad_options_are_clear():
    def fn(x):
        return x.numpy()  # leaves torch

    with pytest.raises(cuvil.UnsupportedError, match="torch.export could not capture"):
        compile_torch(fn, (torch.randn(3),))
    with pytest.raises(TypeError, match="unknown options"):
        cuvil.compile(torch.nn.ReLU(), (torch.randn(3),), enable_fusion=True)


def test_calls_check_their_inputs():
    compiled = compile_torch(TwoHeads(), {"x": torch.randn(2, 4), "bias": torch.randn(2, 8)})
    with pytest.raises(TypeError, match="keyword arguments"):
        compiled(x=torch.randn(2, 4))
    with pytest.raises(cuvil.ShapeError):
        compiled(x=torch.randn(3, 4), bias=torch.randn(2, 8))
