"""topk, sort, argsort and the cumulative products and extremes, against NumPy and eager torch; in-place sorting is
refused with what to write instead."""
import numpy as np
import pytest
import torch

import cuvil

from .helpers import TARGET, check_sizes, f32


def distinct(*shape, seed=0):
    """Values without ties, so that every sort agrees on the indices."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed + n).permutation(n).reshape(shape) - n / 2).astype(np.float32)


def numpy_sorting(x):
    return (np.sort(x), np.sort(x, axis=0), np.argsort(x), np.argsort(x, axis=None), x.argsort(axis=0),
            np.cumprod(x / 4, axis=1), np.cumprod(x.astype(np.int32) % 3, axis=0), (x / 8).cumprod(axis=-1))


def torch_sorting(x):
    top = torch.topk(x, 2)
    low = x.topk(1, dim=0, largest=False)
    s = torch.sort(x, dim=-1, descending=True)
    return (top.values, top.indices, low, s.values, s.indices, torch.argsort(x, dim=0), x.sort()[0],
            torch.cumprod(x / 4, dim=1), torch.cummax(x, 1), torch.cummin(x, dim=0), x.cummax(0).indices)


SIZES = (2, 5, 9)


@pytest.mark.parametrize("target", [TARGET, "cpu"])
def test_numpy_sorting_and_scans(target):
    check_sizes(numpy_sorting, lambda n: (distinct(n, 4),), SIZES, target=target)


@pytest.mark.parametrize("target", [TARGET, "cpu"])
def test_torch_sorting_and_scans(target):
    check_sizes(torch_sorting, lambda n: (torch.from_numpy(distinct(n, 3)),), SIZES, target=target)


def ties(x):
    return torch.cummax(x, 0), torch.sort(x, stable=True), (torch.topk(x, 3).values,)


def test_ties_follow_torch():  # cummax takes the last index of a tie; topk's order among ties is unspecified
    x = torch.tensor([1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 0.0])
    got, want = cuvil.jit(ties, target=TARGET)(x), ties(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(tuple(g), tuple(w))


def running_extremes(x):
    return torch.cummax(x, 0), torch.cummin(x, 0)


def test_running_extremes_propagate_nan_as_torch():  # the NaN wins from where it appears, at its own index
    x = torch.tensor([1.0, float("nan"), 3.0, 0.0, float("nan"), -2.0])
    got, want = cuvil.jit(running_extremes, target=TARGET)(x), running_extremes(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(tuple(g), tuple(w), equal_nan=True)


def top_rows(x, k=2):
    scores = torch.softmax(x.sum(dim=1), dim=0)
    best = torch.topk(scores, k)
    return best.values, x[best.indices]


def test_topk_picks_rows():
    check_sizes(top_rows, lambda n: (torch.from_numpy(distinct(n + 2, 4)),), SIZES)


def sorts_in_place(x):
    x.sort()
    return x


def test_sorting_in_place_says_what_to_write():
    with pytest.raises(cuvil.UnsupportedError, match=r"x.sort\(\) changes the array in place.*x = np.sort\(x\)"):
        cuvil.jit(sorts_in_place, target=TARGET)(f32(4))
