"""torch.cond and while_loop become `cond` and `while` regions; both branches run correctly at run time."""
from __future__ import annotations

import torch
from torch._higher_order_ops.while_loop import while_loop
from torch.export import Dim

import cuvil

from .helpers import check


class Gate(torch.nn.Module):
    """The seed's dynamic_inference: relu or sigmoid depending on the data, with a parameter in one branch."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 2.0, 4))

    def forward(self, x, y):
        def bright(x, y):
            return (torch.relu(x) * self.scale + y,)

        def dark(x, y):
            return (torch.sigmoid(x) - y,)

        return torch.cond(x.mean() > 0.5, bright, dark, (x, y))[0] + 1


def test_cond_takes_either_branch_with_a_dynamic_dim():
    n = Dim("n")
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    more = [((torch.randn(5, 4) + 2, torch.randn(5, 4)), None), ((torch.randn(2, 4) - 2, torch.randn(2, 4)), None)]
    compiled = check(Gate(), x, y, dynamic_shapes={"x": {0: n}, "y": {0: n}}, more=more)
    text = cuvil.inspect_ir(compiled)
    assert "cond %" in text and "f32[n,4]" in text


class Nested(torch.nn.Module):
    def forward(self, x):
        def inner_true(x):
            return x * 2

        def inner_false(x):
            return x - 3

        def outer_true(x):
            return torch.cond(x.sum() > 0, inner_true, inner_false, (x,))

        def outer_false(x):
            return -x

        return torch.cond(x.max() > 1, outer_true, outer_false, (x,))


def test_nested_cond():
    more = [((torch.full((3,), 2.0),), None), ((torch.tensor([2.0, -9.0, 0.0]),), None),
            ((torch.zeros(3),), None)]
    check(Nested(), torch.randn(3), more=more)


class Doubling(torch.nn.Module):
    def forward(self, x, limit):
        def cond_fn(i, v):
            return v.sum() < limit

        def body_fn(i, v):
            return i + 1, v * 2 + 0.5

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


def test_while_loop_with_a_loop_invariant_input():
    x = torch.rand(3)
    compiled = check(Doubling(), x, torch.tensor(50.0), more=[((torch.rand(3), torch.tensor(1000.0)), None)])
    assert "while %" in cuvil.inspect_ir(compiled)
