"""Integer &, |, ^, <<, >> and ~ on tensors, as NumPy and torch compute them (shift counts past the width too)."""
import numpy as np
import pytest
import torch

from .helpers import TARGET, check_sizes


def ints(n, dtype=np.int32, low=-300, high=300, seed=0):
    return np.random.default_rng(seed + n).integers(low, high, (n, 3)).astype(dtype)


def operators(a, b):
    return a & b, a | b, a ^ b, ~a, a & 0xF, 1 | a, (a ^ b) & ~b


def shifts(a, n):
    return a << n, a >> n, a << 3, a >> 2, 1 << n


def functions(a, b):
    return (np.bitwise_and(a, b), np.bitwise_or(a, b), np.bitwise_xor(a, b), np.invert(a), np.left_shift(a, 2),
            np.right_shift(a, 1), np.bitwise_not(a))


def hash_rows(a):
    h = a[0] * 0 + 17
    for row in a:  # a run-time loop for 20 rows
        h = ((h << 5) ^ (h >> 2) ^ row) & 0xFFFF
    return h


def masks(x):
    return (x > 0) & (x < 100) | ~(x == 5)


@pytest.mark.parametrize("target", [TARGET, "cpu"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int8])
def test_numpy_bitwise_operators(target, dtype):
    low = 0 if dtype == np.uint8 else -100
    check_sizes(operators, lambda n: (ints(n, dtype, low, 100), ints(n, dtype, low, 100, 1)), (2, 5), target)
    check_sizes(functions, lambda n: (ints(n, dtype, low, 100), ints(n, dtype, low, 100, 1)), (2, 5), target)


@pytest.mark.parametrize("target", [TARGET, "cpu"])
def test_shifts_hashes_and_masks(target):
    counts = lambda n: np.array([[0, 1, 7], [31, 32, 40]] * n, np.int32)[:n]  # noqa: E731
    check_sizes(shifts, lambda n: (ints(n), counts(n)), (2, 4), target)
    check_sizes(hash_rows, lambda n: (ints(n, np.int64, 0, 1000),), (3, 20), target)
    check_sizes(masks, lambda n: (ints(n),), (3, 6), target)


def torch_bitwise(a, b):
    return (a & b, a | b, ~a, a << 2, a >> 1, torch.bitwise_xor(a, b), torch.bitwise_not(a),
            torch.bitwise_left_shift(a, b & 7), a.bitwise_and(b), a.bitwise_or(3))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_torch_bitwise(dtype):
    check_sizes(torch_bitwise, lambda n: (torch.from_numpy(ints(n)).to(dtype),
                                          torch.from_numpy(ints(n, seed=3)).to(dtype)), (2, 5))


def test_floats_are_refused_as_the_framework_refuses_them():
    import cuvil

    def on_floats(x):
        return x & 1
    with pytest.raises(cuvil.UnsupportedError, match="bitwise_and"):
        cuvil.jit(on_floats, target=TARGET)(np.ones(3, np.float32))
