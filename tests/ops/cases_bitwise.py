"""Cases for the bitwise ops, with NumPy oracles (shift counts past the width included)."""
import numpy as np

from .cases import Case, rand

A = rand(3, 5, dtype="int32", low=-1000, high=1000)
B = rand(3, 5, dtype="int32", low=-1000, high=1000, seed=1)
COUNTS = np.array([[0, 1, 5, 31, 32], [40, -1, 3, 7, 30], [2, 2, 2, 2, 2]], np.int32)
BYTES = np.array([1, 127, 255, 8, 3], np.uint8)


def np1(fn):
    return lambda xs: [fn(*xs)]


def shift(fn, fill):
    """NumPy's shift, with the counts outside [0, bits) spelled out."""
    def oracle(x, n):
        bits = x.dtype.itemsize * 8
        inside = (n >= 0) & (n < bits)
        return np.where(inside, fn(x, np.where(inside, n, 0)), fill(x)).astype(x.dtype)
    return np1(oracle)


CASES = [
    Case("bitwise_and", [A, B], expected=np1(lambda a, b: a & b)),
    Case("bitwise_or", [A, B], expected=np1(lambda a, b: a | b)),
    Case("bitwise_xor", [A, B], expected=np1(lambda a, b: a ^ b)),
    Case("bitwise_xor", [BYTES, BYTES[::-1].copy()], expected=np1(lambda a, b: a ^ b), id="u8"),
    Case("bitwise_not", [A], expected=np1(lambda a: -a - 1)),
    Case("bitwise_not", [BYTES], expected=np1(lambda a: (255 - a).astype(np.uint8)), id="u8"),
    Case("shift_left", [A, COUNTS], expected=shift(np.left_shift, np.zeros_like)),
    Case("shift_right", [A, COUNTS], expected=shift(np.right_shift, lambda x: np.where(x < 0, -1, 0))),
    Case("shift_left", [BYTES, np.array([1, 1, 1, 8, 9], np.uint8)], expected=shift(np.left_shift, np.zeros_like),
         id="u8"),
]

FLOATS = np.array([[0.0, -0.0, 1.5, np.inf], [-np.inf, np.nan, 1e-45, -3.25]], np.float32)
WORDS = np.array([0, -1, 0x7F800001, -2 ** 31, 0x3F800000, 12345], np.int32)  # a signalling NaN among them
CASES += [
    Case("bitcast", [FLOATS], {"dtype": "i32"}, expected=np1(lambda a: a.view(np.int32)), id="f32-i32"),
    Case("bitcast", [WORDS], {"dtype": "f32"}, expected=np1(lambda a: a.view(np.float32)), id="i32-f32"),
    Case("bitcast", [FLOATS.astype(np.float64)], {"dtype": "i64"}, expected=np1(lambda a: a.view(np.int64)),
         id="f64-i64"),
    Case("bitcast", [BYTES], {"dtype": "i8"}, expected=np1(lambda a: a.view(np.int8)), id="u8-i8"),
    Case("bitcast", [np.array([True, False, True])], {"dtype": "u8"}, expected=np1(lambda a: a.view(np.uint8)),
         id="bool-u8"),
    Case("bitcast", [np.array(-1.5, np.float32)], {"dtype": "i32"}, expected=np1(lambda a: a.view(np.int32)),
         id="scalar"),
]
