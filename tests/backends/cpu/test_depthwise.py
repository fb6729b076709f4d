"""Depthwise convs (one input channel per group) on the kernel library's `cuvil_dwconv2d`, compiled against the
reference interpreter: kernel sizes, strides, pads (symmetric, asymmetric, larger than the kernel), dilation,
channel multipliers, rows narrower than a vector, 1-D convs and symbolic batch and width."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuvil.compiler import compile_module
from cuvil.interpreter import interpret

from .test_library_ops import check, rand, single_op

# name: (x shape, kernel (kh, kw), attrs besides groups); the weight has C * mult output channels.
CASES = {
    "3x3-s1-p1-mnv2": ((1, 32, 112, 112), (3, 3), {"pads": (1, 1, 1, 1)}),
    "3x3-s2-p1-mnv2": ((1, 24, 56, 56), (3, 3), {"strides": (2, 2), "pads": (1, 1, 1, 1)}),
    "3x3-s1-7x7-planes": ((1, 40, 7, 7), (3, 3), {"pads": (1, 1, 1, 1)}),
    "3x3-s2-odd-width": ((2, 5, 15, 13), (3, 3), {"strides": (2, 2), "pads": (1, 1, 1, 1)}),
    "5x5-s1-p2": ((1, 6, 20, 19), (5, 5), {"pads": (2, 2, 2, 2)}),
    "5x5-s2-p2": ((1, 6, 21, 22), (5, 5), {"strides": (2, 2), "pads": (2, 2, 2, 2)}),
    "3x3-no-pads": ((1, 3, 9, 33), (3, 3), {}),
    "3x3-s2-asymmetric-pads": ((1, 4, 12, 12), (3, 3), {"strides": (2, 2), "pads": (0, 1, 1, 0)}),
    "3x3-pads-beyond-kernel": ((1, 3, 5, 4), (3, 3), {"pads": (3, 2, 4, 3)}),
    "narrow-rows": ((1, 3, 3, 2), (3, 3), {"pads": (1, 1, 1, 1)}),
    "one-pixel": ((2, 4, 1, 1), (3, 3), {"pads": (1, 1, 1, 1)}),
    "wide-rows-band-split": ((1, 2, 3, 2100), (3, 3), {"pads": (1, 1, 1, 1)}),
    "3x3-s3": ((1, 3, 17, 16), (3, 3), {"strides": (3, 3), "pads": (1, 1, 1, 1)}),
    "3x5-strides-2x1": ((1, 4, 11, 10), (3, 5), {"strides": (2, 1), "pads": (1, 2, 1, 2)}),
    "3x3-dilated": ((1, 4, 13, 14), (3, 3), {"dilations": (2, 2), "pads": (2, 2, 2, 2)}),
    "7x7": ((1, 3, 12, 12), (7, 7), {"pads": (3, 3, 3, 3)}),
}


@pytest.mark.parametrize("mult", [1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_depthwise_matches_interpreter(name, mult):
    x_shape, (kh, kw), attrs = CASES[name]
    c = x_shape[1]
    w, bias = rand(c * mult, 1, kh, kw, seed=1) * 0.3, rand(c * mult, seed=2)
    x = rand(*x_shape)
    check(single_op("conv", [x], (w, bias), groups=c, **attrs), [x], 1e-5)


def test_depthwise_without_bias_1d():
    x, w = rand(2, 6, 37), rand(6, 1, 3, seed=1)
    check(single_op("conv", [x], (w,), groups=6, strides=(2,), pads=(1, 1)), [x], 1e-5)


def test_depthwise_symbolic_batch_and_width():
    x, w, b = rand(1, 8, 10, 17), rand(8, 1, 3, 3, seed=1), rand(8, seed=2)
    m = single_op("conv", [x], (w, b), dims={0: {0: "n", 3: "w"}}, groups=8, strides=(2, 2), pads=(1, 1, 1, 1))
    for shape in [(1, 8, 10, 17), (3, 8, 10, 6), (2, 8, 10, 31)]:
        check(m, [rand(*shape)], 1e-5)


def test_depthwise_keeps_nan_and_inf():
    x = rand(1, 2, 6, 6)
    x[0, 0, 2, 3], x[0, 1, 0, 0] = np.nan, np.inf
    w, b = rand(2, 1, 3, 3, seed=1), rand(2, seed=2)
    m = single_op("conv", [x], (w, b), groups=2, pads=(1, 1, 1, 1))
    np.testing.assert_allclose(compile_module(m)(x)[0], interpret(m, [x])[0], rtol=1e-4, atol=1e-4)


_KERNEL_GUARD = """
import sys, ctypes, numpy as np
from cuvil.backends.cpu import kernels
lib = kernels.load(1)
geom = [int(v) for v in sys.argv[1].split(",")]  # H W OH OW kh kw sh sw dh dw pt pl
batch, c, o = (int(v) for v in sys.argv[2].split(","))
x, w, b = np.ones(64, np.float32), np.ones(64, np.float32), np.ones(64, np.float32)
y = np.full(64, 7.0, np.float32)
ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
lib.cuvil_dwconv2d(batch, c, o, ptr(x), ptr(w), ptr(b), ptr(y), (ctypes.c_int64 * 12)(*geom), -np.inf, np.inf)
print("untouched" if (y == 7.0).all() else "written")
"""


@pytest.mark.parametrize("geom, channels", [
    ("2,2,1,-12,5,5,1,1,1,4,2,2", "1,1,1"),  # an output width <= 0: the window does not fit
    ("2,2,0,1,3,3,1,1,1,1,1,1", "1,1,1"),  # no output rows
    ("2,2,1,1,3,3,0,1,1,1,1,1", "1,1,1"),  # a stride of 0 (divides by zero unguarded)
    ("2,2,1,1,0,3,1,1,1,1,1,1", "1,1,1"),  # a window of no taps
    ("2,2,1,1,3,3,1,1,1,1,1,1", "1,2,3"),  # outputs not a whole multiple of the channels
])
def test_depthwise_kernel_refuses_sizes_it_cannot_run(geom, channels):
    """`cuvil_dwconv2d` itself writes nothing for sizes no conv gives (defence under the shape rules' relations);
    run in a child process, so a crash is a failure, not the end of the test run."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    out = subprocess.run([sys.executable, "-c", _KERNEL_GUARD, geom, channels], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "untouched", out.stdout + out.stderr[-2000:]
