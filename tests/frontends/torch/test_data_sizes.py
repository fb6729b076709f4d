"""torch.export's data-dependent sizes (the unbacked `u0` of nonzero, masked_select, x[mask]) become the IR's:
compiled, against eager PyTorch, with some, none and all elements selected."""
from __future__ import annotations

import pytest
import torch

import cuvil


class Selections(torch.nn.Module):
    def forward(self, x):
        return (x[x > 0] * 2, torch.nonzero(x), torch.masked_select(x, x < 0), x[x.sum(1) > 0].sum(0),
                torch.argwhere(x[:, 0]))


@pytest.fixture(scope="module")
def compiled():
    return cuvil.compile(Selections(), (torch.randn(5, 3),))


@pytest.mark.parametrize("x", [torch.randn(5, 3), torch.zeros(5, 3), torch.ones(5, 3)], ids=["some", "none", "all"])
def test_selections_match_eager(compiled, x):
    got, want = compiled(x), Selections()(x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        torch.testing.assert_close(g, w)


def test_a_size_check_the_bounds_do_not_imply_is_refused():
    def fn(x):
        picked = x[x > 0]
        torch._check(picked.shape[0] >= 2)
        return picked

    with pytest.raises(cuvil.UnsupportedError, match="run-time size check"):
        cuvil.compile(fn, (torch.randn(6),))


class Positions(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x), torch.argwhere(x)


@pytest.mark.parametrize("value", [0.0, 2.5])
def test_nonzero_of_a_0d_tensor_has_no_coordinates(value):
    """OpInfo's nonzero sample: a 0-d tensor gives [count, 0] (the converter once gave [count, 1])."""
    x = torch.tensor(value)
    for got, want in zip(cuvil.compile(Positions(), (x,))(x), Positions()(x)):
        assert got.shape == want.shape and got.dtype == want.dtype
