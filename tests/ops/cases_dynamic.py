"""Cases for ops whose result size depends on the data, with ONNX oracles: some, none and all elements selected."""
import numpy as np

from .cases import Case, onnx_node, rand

SPARSE = np.where(rand(3, 4, 5) > 0.5, rand(3, 4, 5, seed=1), 0).astype(np.float32)
MASK = rand(6, 7, seed=2) > 0


def nonzero_case(x, id, dims=None):
    return Case("nonzero", [x], expected=lambda xs: onnx_node("NonZero", xs), id=id, dims=dims)


CASES = [
    nonzero_case(SPARSE, "f32-3d"),
    nonzero_case(SPARSE, "f32-symbolic", dims={0: {0: "n", 2: "m"}}),
    nonzero_case(MASK, "bool"),
    nonzero_case(np.ones((2, 3), np.bool_), "all-true"),
    nonzero_case(np.zeros((4,), np.float32), "none"),
    nonzero_case(np.zeros((0, 3), np.float32), "empty-input"),
    nonzero_case((rand(5, 3, dtype="int32", low=-2, high=2)), "i32"),
    nonzero_case(np.array([0.0, np.nan, -0.0, 1.0], np.float32), "nan-and-negative-zero"),
]
