"""Cases for data-movement ops, with ONNX oracles (shape-like operands passed as int64 inputs)."""
import numpy as np

from .cases import Case, onnx_node, rand

X = rand(3, 4, 5)
M = rand(4, 6)
I32 = rand(3, 4, dtype="int32", low=-9, high=9)
BIG = 2 ** 63 - 1
SYM = {0: {0: "n"}}


def i64(*values):
    return np.array(values, np.int64)


def np1(fn):
    return lambda xs: [fn(*xs)]


def expand_case(x, shape, id="", dims=None):
    return Case("broadcast_to", [x], {"shape": shape}, expected=lambda xs: onnx_node("Expand", [xs[0], i64(*shape)]),
                id=id, dims=dims)


def reshape_case(x, shape, id="", dims=None):
    """A 0 in `shape` is a literal size in Cuvil, as in ONNX with allowzero=1."""
    return Case("reshape", [x], {"shape": shape}, id=id, dims=dims,
                expected=lambda xs: onnx_node("Reshape", [xs[0], i64(*shape)], {"allowzero": 1}))


def split_case(x, sizes, axis, id="", dims=None):
    return Case("split", [x], {"axis": axis, "sizes": sizes}, id=id, dims=dims,
                expected=lambda xs: onnx_node("Split", [xs[0], i64(*sizes)], {"axis": axis}, len(sizes)))


def slice_case(x, starts, ends, axes=None, steps=None, id="", dims=None, expected=None):
    attrs = {"starts": starts, "ends": ends, "axes": axes or (), "steps": steps or ()}
    extra = [i64(*v) for v in (axes, steps) if v is not None]
    expected = expected or (lambda xs: onnx_node("Slice", [xs[0], i64(*starts), i64(*ends), *extra]))
    return Case("slice", [x], attrs, expected=expected, id=id, dims=dims)


def pad_case(x, pads, mode="constant", value=0.0, id="", dims=None, expected=None):
    value_in = [np.array(value, x.dtype)] if mode == "constant" else []
    expected = expected or (lambda xs: onnx_node("Pad", [xs[0], i64(*pads), *value_in], {"mode": mode}))
    return Case("pad", [x], {"pads": pads, "mode": mode, "value": value}, expected=expected, id=id, dims=dims)


def range_oracle(n, dtype):
    return lambda xs: onnx_node("Range", [np.array(0, dtype), np.array(n, dtype), np.array(1, dtype)])


def _scatter_oracle(reduction):
    return lambda xs: onnx_node("ScatterElements", xs, {"axis": 1, "reduction": reduction})


IDX = np.array([[0, 2, -1], [1, 1, 0], [3, -4, 2]], np.int64)  # into axis 1 (size 4) of a [3,4] tensor
UPD = rand(3, 3, seed=5)

CASES = [
    expand_case(rand(3, 1), (3, 4)),
    expand_case(rand(4), (2, 3, 4), id="rank-grows"),
    expand_case(np.array(2.5, np.float32), (2, 2), id="scalar"),
    expand_case(rand(1, 5, dtype="int64", low=-4, high=4), (3, 5), id="i64"),
    expand_case(rand(3, 1), (3, 4), id="symbolic", dims=SYM),
    Case("broadcast_to", [rand(2, 1)], {"shape": ("n", 2, 3)}, dims={0: {0: "n"}}, id="symbolic-target",
         expected=np1(lambda x: np.broadcast_to(x, (2, 2, 3)))),
    reshape_case(X, (-1,)),
    reshape_case(X, (5, 3, 4), id="explicit"),
    reshape_case(np.zeros((2, 0), np.float32), (0, 5), id="empty"),
    reshape_case(np.array([7], np.int32), (), id="to-scalar"),
    reshape_case(X, (-1, 5), id="symbolic", dims=SYM),
    Case("reshape", [X], {"shape": ("n", -1)}, id="symbolic-cancel", dims={0: {0: "n", 2: "m"}},
         expected=lambda xs: onnx_node("Reshape", [xs[0], i64(3, -1)])),
    Case("transpose", [X], expected=lambda xs: onnx_node("Transpose", xs)),
    Case("transpose", [X], {"perm": (1, -1, 0)}, id="perm",
         expected=lambda xs: onnx_node("Transpose", xs, {"perm": [1, 2, 0]})),
    Case("transpose", [I32], {"perm": (1, 0)}, dims={0: {1: "n"}}, id="symbolic",
         expected=lambda xs: onnx_node("Transpose", xs, {"perm": [1, 0]})),
    Case("concat", [rand(2, 3), rand(4, 3), rand(1, 3)], {"axis": 0}, expected=lambda xs: onnx_node(
        "Concat", xs, {"axis": 0})),
    Case("concat", [rand(2, 3), rand(2, 0), rand(2, 2)], {"axis": -1}, id="neg-axis-empty",
         expected=lambda xs: onnx_node("Concat", xs, {"axis": -1})),
    Case("concat", [I32], {"axis": 1}, expected=lambda xs: onnx_node("Concat", xs, {"axis": 1}), id="one"),
    Case("concat", [rand(2, 3), rand(4, 3)], {"axis": 0}, dims={0: {0: "n"}, 1: {0: "m"}}, id="symbolic",
         expected=lambda xs: onnx_node("Concat", xs, {"axis": 0})),
    split_case(M, (1, 2, 3), axis=1),
    split_case(M, (4,), axis=0, id="one"),
    split_case(M, (2, 0, 2), axis=-2, id="empty-piece"),
    Case("split", [M], {"axis": 0, "sizes": ("n-1", 1)}, dims=SYM, id="symbolic",
         expected=lambda xs: onnx_node("Split", [xs[0], i64(3, 1)], {"axis": 0}, 2)),
    slice_case(X, (1,), (3,), (1,)),
    slice_case(X, (0, -3), (BIG, -1), id="default-axes"),
    slice_case(X, (-1, 4), (-BIG, 0), (0, 2), (-1, -2), id="neg-steps"),
    slice_case(X, (10, 0), (20, BIG), (2, -2), (1, 2), id="clamped"),
    slice_case(X, (3, -10), (0, BIG), (2, 1), (-1, 1), id="unsorted-axes"),
    slice_case(I32, (1,), (BIG,), (0,), id="symbolic", dims=SYM),
    slice_case(X, (0,), ("n-1",), (0,), id="symbolic-end", dims=SYM,
               expected=lambda xs: onnx_node("Slice", [xs[0], i64(0), i64(-1), i64(0)])),
    slice_case(X, (-2, 1), (BIG, -1), (0, 1), id="symbolic-negative", dims={0: {0: "n", 1: "m"}}),
    slice_case(X, (-1,), (-BIG,), (0,), (-2,), id="symbolic-reverse", dims=SYM),
    Case("gather", [X, np.array([[2, 0], [-1, 1]], np.int64)], {"axis": 1},
         expected=lambda xs: onnx_node("Gather", xs, {"axis": 1})),
    Case("gather", [X, np.array(-3, np.int32)], expected=lambda xs: onnx_node("Gather", xs), id="scalar-index"),
    Case("gather", [I32, np.array([0, 3, 3], np.int32)], {"axis": -1}, dims=SYM, id="symbolic",
         expected=lambda xs: onnx_node("Gather", xs, {"axis": 1})),
    Case("gather_elements", [rand(3, 4), IDX[:, :2]], {"axis": 1},
         expected=lambda xs: onnx_node("GatherElements", xs, {"axis": 1})),
    Case("gather_elements", [I32, np.array([[2, 0, 1, 1], [-1, 0, 2, 1]], np.int32)], id="axis0",
         expected=lambda xs: onnx_node("GatherElements", xs, {"axis": 0})),
    Case("scatter_elements", [rand(3, 4), IDX[:, [0, 1]], UPD[:, :2]], {"axis": 1},
         expected=_scatter_oracle("none")),
    *[Case("scatter_elements", [rand(3, 4), IDX, UPD], {"axis": -1, "reduction": r}, id=r,
           expected=_scatter_oracle(r)) for r in ("add", "mul", "max", "min")],
    Case("scatter_elements", [I32, IDX, rand(3, 3, dtype="int32", low=-5, high=5)], {"axis": 1, "reduction": "add"},
         expected=_scatter_oracle("add"), id="i32"),
    pad_case(M, (1, 0, 2, 3)),
    pad_case(M, (0, 2, 1, 1), value=-1.5, id="value"),
    pad_case(M, (2, 1, 1, 3), mode="reflect", id="reflect"),
    pad_case(M, (1, 2, 2, 0), mode="edge", id="edge"),
    pad_case(I32, (1, 1, 0, 2), value=7.0, id="i32"),
    pad_case(M, (-1, 2, 1, -3), id="crop",
             expected=np1(lambda x: np.pad(x[1:, :3], ((0, 1), (2, 0))))),
    pad_case(M, (1, 0, 1, 2), id="symbolic", dims={0: {0: "n", 1: "m"}}),
    Case("tile", [rand(2, 3)], {"repeats": (2, 3)}, expected=lambda xs: onnx_node("Tile", [xs[0], i64(2, 3)])),
    Case("tile", [I32], {"repeats": (1, 0)}, expected=lambda xs: onnx_node("Tile", [xs[0], i64(1, 0)]), id="zero"),
    Case("tile", [X], {"repeats": (2, 1, 2)}, dims=SYM, id="symbolic",
         expected=lambda xs: onnx_node("Tile", [xs[0], i64(2, 1, 2)])),
    Case("iota", [], {"shape": (6,)}, expected=range_oracle(6, np.int64)),
    Case("iota", [], {"shape": (5,), "dtype": "f32"}, expected=range_oracle(5, np.float32), id="f32"),
    Case("iota", [], {"shape": (2, 3, 4), "axis": -2, "dtype": "i32"}, id="axis",
         expected=lambda xs: [np.broadcast_to(np.arange(3, dtype=np.int32)[:, None], (2, 3, 4))]),
    Case("dim_size", [], {"dim": (7,)}, expected=lambda xs: [np.array(7, np.int64)]),
    Case("dim_size", [], {"dim": (12,), "dtype": "f16"}, expected=lambda xs: [np.array(12, np.float16)], id="f16"),
    Case("shape_of", [X], expected=lambda xs: onnx_node("Shape", xs)),
    Case("shape_of", [np.zeros((0, 2), np.int32)], expected=lambda xs: onnx_node("Shape", xs), dims=SYM,
         id="symbolic"),
    Case("shape_of", [np.array(1.0, np.float32)], expected=lambda xs: onnx_node("Shape", xs), id="scalar"),
]
