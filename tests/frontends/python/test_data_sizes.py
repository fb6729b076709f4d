"""Results whose size depends on the data: `x[mask]`, np.nonzero / argwhere / flatnonzero, torch.nonzero /
masked_select, through the IR's data-dependent sizes, interpreted and compiled, with some, none and all selected."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cuvil

from .helpers import check, check_sizes, f32, t32

TARGETS = ["interpreter", "cpu"]


def positives_doubled(x):
    return x[x > 0] * 2.0


def rows_with_positive_sum(x):
    rows = x[x.sum(axis=1) > 0]
    return rows.sum(axis=0), rows @ np.ones((4, 2), np.float32)


def numpy_indices(x):
    return np.nonzero(x > 0), np.argwhere(x < 0), np.flatnonzero(x), (x > 0).nonzero()


def torch_indices(x, mask):
    return torch.nonzero(x > 0), x.nonzero(as_tuple=True), torch.masked_select(x, mask), torch.argwhere(x)


SAMPLES = {"some": f32(5, 4), "none": -np.ones((3, 4), np.float32), "all": np.ones((2, 4), np.float32),
           "empty": np.zeros((0, 4), np.float32)}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_mask_indexing(target, sample):
    x = SAMPLES[sample]
    check(positives_doubled, x, target=target)
    check(rows_with_positive_sum, x, target=target)
    check(numpy_indices, x, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_mask_indexing_at_several_sizes(target):
    check_sizes(positives_doubled, lambda n: (f32(n, 3),), (1, 4, 9), target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_torch_nonzero_and_masked_select(target):
    x = t32(3, 4)
    x[1] = 0
    check(torch_indices, x, torch.tensor([True, False, True, True]), target=target)
    check(torch_indices, torch.zeros(2, 4), torch.zeros(4, dtype=torch.bool), target=target)


def select(x, m):
    return x[m]


def test_a_mask_that_does_not_fit_is_refused():
    with pytest.raises(cuvil.ShapeError, match=r"mask of shape \[3\] does not match .* \[4, 2\]"):
        cuvil.jit(select, target="interpreter")(f32(4, 2), np.ones(3, bool))


def numpy_unique(x):
    r = np.round(x)
    values, first, inverse, counts = np.unique(r, return_index=True, return_inverse=True, return_counts=True)
    return values * 2, first, inverse, counts, np.unique(r, axis=0), np.unique(r[:, 0])


def torch_unique(x):
    r = torch.round(x)
    values, inverse, counts = torch.unique(r, return_inverse=True, return_counts=True)
    columns = torch.unique(r, dim=1) if r.shape[0] else r  # eager torch refuses unique over empty slices
    return values, inverse, counts, columns, r.unique()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_unique(target, sample):
    check(numpy_unique, SAMPLES[sample], target=target)
    check(torch_unique, torch.from_numpy(SAMPLES[sample]), target=target)


def argwhere_of(x):
    return np.argwhere(x)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("value", [0.0, 2.5])
def test_argwhere_of_a_0d_array_has_no_coordinates(target, value):
    """NumPy (and torch.nonzero) give [count, 0] for a 0-d array: one empty position when it is nonzero."""
    x = np.array(value, np.float32)
    got = cuvil.jit(argwhere_of, target=target)(x)
    assert got.shape == np.argwhere(x).shape and got.dtype == np.int64
