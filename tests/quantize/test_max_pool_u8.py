"""The uint8 max_pool (conv_int8.c's cuvil_max_pool_u8, which a max_pool between quantized layers compiles to) on
every code path this CPU has, each forced in turn, against the max_pool reference: the 512-bit columns (strides 1
and 2), the scalar ones, rows longer than a chunk, windows hanging off the image, ceil mode, and the pixel by pixel
fallback of windows too wide to buffer."""
import numpy as np
import pytest

from cuvil.backends.cpu import kernels_int8 as k8
from cuvil.ops import get_op

PATHS = [p for p in (4, 3, 2, 1, 0) if p <= k8.best_isa(1)]
RNG = np.random.default_rng(11)

# (x shape, kernel, strides, pads (top, left, bottom, right), dilations, ceil mode)
CASES = {
    "resnet-stem": ((1, 4, 112, 112), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    "odd-sizes": ((2, 3, 13, 37), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    "stride1-dilated": ((1, 2, 9, 70), (2, 3), (1, 1), (0, 1, 1, 1), (2, 2), False),
    "2x2-stride2": ((1, 3, 8, 65), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),
    "ceil-mode": ((1, 2, 10, 11), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True),
    "stride3-scalar": ((1, 2, 11, 40), (3, 2), (3, 3), (1, 1, 1, 1), (1, 2), False),
    "longer-than-a-chunk": ((1, 1, 3, 1100), (1, 3), (1, 2), (0, 1, 0, 1), (1, 1), False),
    "too-wide-to-buffer": ((1, 1, 2, 9000), (1, 2), (1, 40), (0, 0, 0, 0), (1, 1), False),
    "window-is-the-image": ((1, 2, 3, 3), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), False),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_every_path_matches_the_reference(case):
    shape, kernel, strides, pads, dilations, ceil = case
    x = RNG.integers(0, 256, shape).astype(np.uint8)
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "dilations": dilations, "ceil_mode": ceil}
    want = get_op("max_pool").reference([x], attrs)
    for path in PATHS:
        with k8.isa(path, 1):
            got = k8.max_pool_u8(x, kernel, strides, pads, dilations, want.shape[2:], opt_level=1)
        np.testing.assert_array_equal(got, want, err_msg=f"path {path}")
