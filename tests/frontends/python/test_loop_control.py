"""`break`, `continue` and `return` under an `if` on a tensor value inside loops, unrolled or run at run time."""
import numpy as np
import pytest
import torch

import cuvil

from .helpers import TARGET, check_sizes, f32, t32

SIZES = (3, 5, 20, 40)  # past 16 the loops over rows run at run time


def skip_negative_rows(x):
    total = x[0] * 0
    for row in x:
        if row.sum() < 0:
            continue
        total = total + row
    return total


def first_big_row(x):
    found = x[0] * 0 - 1
    for row in x:
        if row.max() > 1.5:
            found = row
            break
    return found


def index_of_first(x, limit=1.0):
    for i in range(x.shape[0]):
        if x[i].sum() > limit:
            return i, x[i]
    return -1, x[0] * 0


def grow_until(x):
    steps = 0
    while True:
        x = x * 1.5
        steps += 1
        if np.abs(x).sum() > 100:
            break
    return x, steps


def nested(x):
    out = x[0] * 0
    for i in range(x.shape[0]):
        row = x[i]
        if row[0] > 0:
            if row[1] > 0:
                continue
            out = out + row
        else:
            out = out - row
    return out


@pytest.mark.parametrize("target", [TARGET, "cpu"])
def test_jumps_on_tensor_conditions_in_loops(target):
    for fn in (skip_negative_rows, first_big_row, index_of_first, nested):
        check_sizes(fn, lambda n: (f32(n, 4),), SIZES, target=target)
    check_sizes(grow_until, lambda n: (f32(n) + 0.5,), (2, 7), target=target)


def torch_search(x):
    for k in range(20):
        x = torch.tanh(x) + 0.3
        if x.mean() > 0.5:
            return x, k
    return x * 0, -1


def test_torch_return_in_a_fixed_loop():
    check_sizes(torch_search, lambda n: (t32(n, 3),), (2, 6))


def loop_with_else(x):
    for row in x:
        if row.sum() > 0:
            break
    else:
        return x[0]
    return x[1]


def return_in_nested_loops(x):
    for row in x:
        for v in row:
            if v > 1:
                return v
    return x[0, 0]


@pytest.mark.parametrize("fn,needle", [
    (loop_with_else, "`else` on the loop"),
    (return_in_nested_loops, "nested in another loop"),
])
def test_what_stays_refused_says_what_to_write(fn, needle):
    with pytest.raises(cuvil.UnsupportedError, match=needle):
        cuvil.jit(fn, target=TARGET)(f32(20, 20))


def test_an_unrolled_loop_that_breaks_on_a_tensor_becomes_a_while():
    ops = [op.name for op in cuvil.jit(first_big_row, target=TARGET).lower(f32(4, 3)).main.walk()]
    assert ops.count("while") == 1
    np.testing.assert_array_equal(cuvil.jit(first_big_row, target=TARGET)(np.eye(3, dtype=np.float32) * 2),
                                  first_big_row(np.eye(3, dtype=np.float32) * 2))
