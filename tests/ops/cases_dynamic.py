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


def unique_case(x, id, axis=0, sorted=True, dims=None):
    return Case("unique", [x], {"axis": axis, "sorted": sorted}, id=id, dims=dims,
                expected=lambda xs: _onnx_unique(xs[0], axis, sorted))


def _onnx_unique(x, axis, sorted):
    return onnx_node("Unique", [x], {"axis": axis, "sorted": int(sorted)}, n_outputs=4)


REPEATS = np.array([2, 1, 1, 3, 4, 3, 1], np.float32)
ROWS = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [1, 0, 0], [0, 9, 9]], np.float32)
CASES += [
    unique_case(REPEATS, "sorted"),
    unique_case(REPEATS, "first-occurrence", sorted=False),
    unique_case(ROWS, "rows", axis=0),
    unique_case(ROWS, "rows-first-occurrence", axis=0, sorted=False),
    unique_case(ROWS, "columns", axis=1, dims={0: {0: "n"}}),
    unique_case(rand(2, 6, 3, dtype="int32", low=0, high=2), "i32-3d-middle-axis", axis=1),
    unique_case(np.ones(5, np.float32), "all-equal"),
    unique_case(np.zeros((0,), np.float32), "empty"),
]


def nms_case(boxes, scores, limit, iou, floor, id, **attrs):
    inputs = [boxes, scores, np.array([limit], np.int64), np.array([iou], np.float32), np.array([floor], np.float32)]
    onnx_inputs = inputs if attrs.get("score_threshold") else inputs[:4]
    onnx_attrs = {"center_point_box": int(attrs.get("center_point_box", False))}
    return Case("non_max_suppression", inputs, attrs, id=id,
                expected=lambda xs: onnx_node("NonMaxSuppression", onnx_inputs, onnx_attrs))


CORNERS = np.abs(rand(2, 7, 4, seed=3)).astype(np.float32)
SCORES = np.abs(rand(2, 3, 7, seed=4)).astype(np.float32)
CASES += [
    nms_case(CORNERS, SCORES, 4, 0.3, 0.0, "corners"),
    nms_case(CORNERS, SCORES, 7, 0.1, 0.8, "score-threshold", score_threshold=True),
    nms_case(CORNERS, SCORES, 3, 0.5, 0.0, "center-format", center_point_box=True),
    nms_case(CORNERS, SCORES, 0, 0.5, 0.0, "no-boxes-per-class"),
    nms_case(CORNERS, SCORES, 9, 1.0, 9.0, "all-below-threshold", score_threshold=True),
    nms_case(CORNERS, SCORES, 9, 1.0, 0.0, "all-kept"),
]


def dynamic_slice_case(xs, start, end, id, axis=0, exact=False, dims=None):
    bounds = [np.array([start], np.int64), np.array([end], np.int64)]
    return Case("dynamic_slice", bounds + xs, {"axis": axis, "exact": exact}, id=id, dims=dims,
                expected=lambda v: [onnx_node("Slice", [x, *bounds, np.array([axis], np.int64)])[0] for x in xs])


GRID = rand(3, 6, 2, seed=5)
CASES += [
    dynamic_slice_case([GRID], 1, 4, "middle", axis=1),
    dynamic_slice_case([GRID, GRID * 2], -4, 100, "negative-and-past-the-end", axis=1),
    dynamic_slice_case([GRID], 5, 2, "empty", axis=1),
    dynamic_slice_case([GRID], 0, 6, "exact-whole", axis=1, exact=True),
    dynamic_slice_case([GRID], 0, 2, "symbolic", axis=0, dims={2: {0: "n"}}),
]
