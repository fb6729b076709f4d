"""`x[index] = value` as functional updates: the result equals NumPy's and torch's in-place assignment."""
import warnings

import numpy as np
import pytest
import torch

import cuvil

from .helpers import TARGET, check_sizes, f32, t32

SIZES = (3, 5, 20)  # 20 rows: the loops below run at run time (past the unroll limit)


def basic_indices(x):
    y = x.copy()
    y[0] = 5.0
    y[:, 1] = -1
    y[1:3, ::2] = 7
    y[-1, -1] += 100
    y[::-2, 0] = np.arange(len(y[::-2, 0]))
    y[..., 3] = y[:, 2] * 2
    y[1:] += y[:-1]
    return y


def masks(x):
    y = x.copy()
    y[y > 1] = 0
    y[x[:, 0] < 0] = -1.0
    y[y < -1.5] += 10
    return y


def rows_in_a_loop(x, idx):
    out = np.zeros((x.shape[0], 3), np.int32)  # assigned values are cast to the array's dtype, as in NumPy
    for i in range(x.shape[0]):
        out[i] = x[i, :3] * 10
        out[i, 0] += i
    out[idx] = 9
    return out


def nested_subscripts(x):
    y = np.ones_like(x)
    y[1][2] = 4.0
    y[0][::2] = x[0][::2]
    return y


def test_numpy_item_assignment():
    check_sizes(basic_indices, lambda n: (f32(n, 4),), SIZES)
    check_sizes(masks, lambda n: (f32(n, 4),), SIZES)
    check_sizes(rows_in_a_loop, lambda n: (f32(n, 4), np.array([0, -1])), SIZES)
    check_sizes(nested_subscripts, lambda n: (f32(n, 4),), SIZES)


def torch_updates(x):
    out = torch.zeros_like(x)
    out[:, 0] = x[:, 0] * 2
    out[x > 1] = 1.0
    for i in range(x.shape[0]):
        out[i, 1:] += x[i, 1:]
    return out


@pytest.mark.parametrize("target", [TARGET, "cpu"])
def test_torch_item_assignment(target):
    check_sizes(torch_updates, lambda n: (t32(n, 4),), SIZES, target=target)
    check_sizes(basic_indices, lambda n: (f32(n, 4),), (3, 17), target=target)


def python_containers(x):
    parts = [x, x]
    parts[1] = x * 2
    named = {"a": x}
    named["a"] = named["a"] + 1
    return parts[0] + parts[1] + named["a"]


def test_python_lists_and_dicts_change_at_compile_time():
    check_sizes(python_containers, lambda n: (f32(n),), (2, 4))


def mutates_argument(x):
    x[x < 0] = 0
    return x


def test_assigning_into_an_argument_warns_and_returns_the_new_value():
    x = f32(4, 3)
    with pytest.warns(UserWarning, match="caller's array is not modified"):
        out = cuvil.jit(mutates_argument, target=TARGET)(x.copy())
    np.testing.assert_array_equal(out, mutates_argument(x.copy()))


def aliased(x):
    y = x * 1
    z = y
    z[0] = 1
    return y


def through_a_view(x):
    y = x * 1
    row = y[0]
    row[1] = 5
    return y


def mask_with_array(x):
    y = x * 1
    y[y > 0] = np.arange(3.0)
    return y


def helper_mutates(buf):
    buf[0] = 0


def calls_mutating_helper(x):
    y = x * 1
    helper_mutates(y)
    return y


@pytest.mark.parametrize("fn,needle", [
    (aliased, "'z' and 'y' are the same array"),
    (through_a_view, "'row' is a view of 'y'"),
    (mask_with_array, "np.where(mask, y, x)"),
    (calls_mutating_helper, "argument 'buf' of an inlined function"),
])
def test_sharing_memory_is_refused_with_what_to_write(fn, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(cuvil.UnsupportedError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            cuvil.jit(fn, target=TARGET)(f32(4, 3))


def rows_of_a_loop(x):
    y = x * 1
    for row in y:
        row[0] = 0  # NumPy changes y through the row
    return y


def list_item_alias(x):
    y = x * 1
    parts = [y, x]
    parts[0][0] = 5
    return y


def transposed_view(x):
    y = x * 1
    t = y.T
    t[0] = 1
    return y


@pytest.mark.parametrize("fn,needle", [
    (rows_of_a_loop, "is a view of 'y'"),
    (list_item_alias, "this item and 'y' are the same array"),
    (transposed_view, "'t' is a view of 'y'"),
])
def test_views_from_loops_lists_and_methods_are_refused(fn, needle):
    with pytest.raises(cuvil.UnsupportedError, match=needle):
        cuvil.jit(fn, target=TARGET)(f32(4, 3))
