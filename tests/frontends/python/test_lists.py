"""Lists grown by `append` in loops of any length: stacked accumulators when the loop runs at run time."""
import numpy as np
import pytest
import torch

import cuvil

from .helpers import TARGET, check_sizes, f32, t32

SIZES = (3, 5, 20, 40)  # past 16 rows the loops run at run time


def scaled_rows(x):
    outs = []
    for i in range(x.shape[0]):
        outs.append(x[i] * i)
    return np.stack(outs), np.concatenate(outs), len(outs), np.stack(outs, axis=1), np.array(outs)


def recurrence(x):
    outs = [x[0]]
    h = x[0] * 0
    for row in x:
        h = np.tanh(h + row)
        outs.append(h)
    return np.stack(outs)[1:], outs[-1], outs[1:]


def fixed_trips(x):
    outs = []
    for i in range(20):
        outs.append(x * i)
    return torch.cat(outs, dim=-1), torch.stack(outs, -1)


def returned(x):
    outs = []
    for i in range(18):
        outs.append(x[0] + i)
    outs.append(x[1])
    return outs, sum(outs)


@pytest.mark.parametrize("target", [TARGET, "cpu"])
def test_lists_grown_in_loops_of_any_length(target):
    check_sizes(scaled_rows, lambda n: (f32(n, 4),), SIZES, target=target)
    check_sizes(recurrence, lambda n: (f32(n, 4),), SIZES, target=target)
    check_sizes(fixed_trips, lambda n: (t32(n, 2),), (2, 5), target=target)
    check_sizes(returned, lambda n: (f32(n, 3),), (2, 5), target=target)
    check_sizes(symbolic_items, lambda n: (f32(n, 3),), (3, 20), target=target)  # dynamic: each size compiles


def while_append(x):
    outs = []
    while x.sum() < 10:
        x = x + 1
        outs.append(x)
    return np.stack(outs)


def append_in_branch(x):
    outs = []
    for row in x:
        if row.sum() > 0:
            outs.append(row)
    return np.stack(outs)


def append_twice(x):
    outs = []
    for row in x:
        outs.append(row)
        outs.append(row * 2)
    return np.stack(outs)


def symbolic_items(x):  # a list of as many items as x has rows, returned as a list
    outs = []
    for row in x:
        outs.append(row)
    return outs


@pytest.mark.parametrize("fn,needle,options", [
    (while_append, "number of iterations is only known at run time", {}),
    (append_in_branch, "np.where picks what to append", {}),
    (append_twice, "more than once per iteration", {}),
])
def test_lists_whose_length_depends_on_the_data_are_refused(fn, needle, options):
    with pytest.raises(cuvil.UnsupportedError, match=needle):
        cuvil.jit(fn, target=TARGET, **options)(f32(20, 3))
