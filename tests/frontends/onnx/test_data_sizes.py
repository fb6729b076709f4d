"""ONNX ops whose output size depends on the data (NonZero, Compress on a computed condition), interpreted and
compiled, against ONNX Runtime at several inputs: some, none and all elements selected, and empty inputs."""
from __future__ import annotations

import numpy as np
import pytest

import cuvil

from .helpers import F32, I64, helper, model, run_ort

N = helper.make_node
BOOL = 9  # TensorProto.BOOL


def _check(proto, feeds_list):
    loaded = cuvil.load_onnx(proto)
    compiled = loaded.optimize()
    for feeds in feeds_list:
        want = run_ort(proto, feeds)
        for got in (loaded(**feeds), compiled(**feeds)):
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _nonzero_then_arithmetic():
    """NonZero, then Transpose and a Mul on the computed count, and the count itself through Shape."""
    nodes = [N("NonZero", ["x"], ["nz"]), N("Transpose", ["nz"], ["t"], perm=[1, 0]), N("Mul", ["t", "t"], ["sq"]),
             N("Shape", ["nz"], ["shape"])]
    return model(nodes, [("x", F32, ["n", 3])], [("t", I64, None), ("sq", I64, None), ("shape", I64, None)])


@pytest.mark.parametrize("x", [
    np.array([[0, 1, 2], [3, 0, 0]], np.float32), np.zeros((4, 3), np.float32), np.ones((5, 3), np.float32),
    np.zeros((0, 3), np.float32)], ids=["some", "none", "all", "empty"])
def test_nonzero_matches_ort(x):
    _check(_nonzero_then_arithmetic(), [{"x": x}])


def _compress(axis):
    """Compress on a condition computed from the input (x > 0 along one axis)."""
    attrs = {} if axis is None else {"axis": axis}
    nodes = [N("ReduceSum", ["x", "ax"], ["s"], keepdims=0), N("Greater", ["s", "zero"], ["cond"]),
             N("Compress", ["x", "cond"], ["y"], **attrs), N("Relu", ["y"], ["r"])]
    inits = [("ax", np.array([1 - (axis or 0)], np.int64)), ("zero", np.array(0, np.float32))]
    return model(nodes, [("x", F32, [4, 4])], [("r", F32, None)], inits, opset=13)


@pytest.mark.parametrize("axis", [0, 1, None])
def test_compress_on_a_computed_condition_matches_ort(axis):
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((4, 4)).astype(np.float32)}, {"x": np.ones((4, 4), np.float32)},
             {"x": -np.ones((4, 4), np.float32)}]
    _check(_compress(axis), feeds)


def test_compress_ignores_a_condition_longer_than_the_axis():
    nodes = [N("Compress", ["x", "c"], ["y"], axis=0)]
    proto = model(nodes, [("x", F32, [3]), ("c", BOOL, [5])], [("y", F32, None)])
    _check(proto, [{"x": np.arange(3, dtype=np.float32), "c": np.array([1, 0, 1, 1, 1], bool)}])


def _unique(**attrs):
    """All four outputs of Unique on a computed input (x rounded), then arithmetic on the distinct values."""
    nodes = [N("Round", ["x"], ["r"]), N("Unique", ["r"], ["y", "first", "inverse", "counts"], **attrs),
             N("Mul", ["y", "y"], ["sq"])]
    outs = [("sq", F32, None), ("first", I64, None), ("inverse", I64, None), ("counts", I64, None)]
    return model(nodes, [("x", F32, ["n", 3])], outs, opset=13)


@pytest.mark.parametrize("attrs", [{}, {"sorted": 0}, {"axis": 0}, {"axis": 1, "sorted": 0}, {"axis": -1}],
                         ids=["flat", "flat-unsorted", "rows", "columns-unsorted", "negative-axis"])
def test_unique_matches_ort(attrs):
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.integers(-1, 2, (n, 3)).astype(np.float32)} for n in (1, 6, 20)]
    feeds += [{"x": np.ones((4, 3), np.float32)}, {"x": np.zeros((0, 3), np.float32)}]
    _check(_unique(**attrs), feeds)


def _nms(with_threshold: bool, center: int):
    """NonMaxSuppression on computed scores (a Sigmoid), the selection then used by a Gather of the box indices."""
    inputs = ["boxes", "scores", "limit", "iou"] + (["floor"] if with_threshold else [])
    nodes = [N("Sigmoid", ["logits"], ["scores"]), N("NonMaxSuppression", inputs, ["sel"], center_point_box=center),
             N("Gather", ["sel", "two"], ["box"], axis=1)]
    inits = [("limit", np.array([3], np.int64)), ("iou", np.array([0.4], np.float32)),
             ("floor", np.array([0.6], np.float32)), ("two", np.array(2, np.int64))]
    return model(nodes, [("boxes", F32, [2, 8, 4]), ("logits", F32, [2, 3, 8])],
                 [("sel", I64, None), ("box", I64, None)], inits, opset=13)


@pytest.mark.parametrize("with_threshold", [False, True], ids=["no-threshold", "threshold"])
@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_matches_ort(with_threshold, center):
    rng = np.random.default_rng(2)
    feeds = [{"boxes": rng.uniform(0, 4, (2, 8, 4)).astype(np.float32),
              "logits": rng.standard_normal((2, 3, 8)).astype(np.float32) * s} for s in (1, 3)]
    feeds += [{"boxes": np.tile(np.float32([0, 0, 1, 1]), (2, 8, 1)), "logits": np.zeros((2, 3, 8), np.float32)},
              {"boxes": np.ones((2, 8, 4), np.float32), "logits": -9 * np.ones((2, 3, 8), np.float32)}]
    _check(_nms(with_threshold, center), feeds)


def _topk_computed_k():
    """TopK whose k is computed from the data (the count of positive entries of the first row), both outputs."""
    nodes = [N("Slice", ["x", "z", "one", "z"], ["row"]), N("Greater", ["row", "zf"], ["pos"]),
             N("Cast", ["pos"], ["pos_i"], to=7), N("ReduceSum", ["pos_i"], ["k"], keepdims=0),
             N("Reshape", ["k", "shape1"], ["k1"]), N("TopK", ["x", "k1"], ["v", "i"], axis=1),
             N("Add", ["v", "v"], ["v2"])]
    inits = [("z", np.array([0], np.int64)), ("one", np.array([1], np.int64)), ("zf", np.array(0, np.float32)),
             ("shape1", np.array([1], np.int64))]
    return model(nodes, [("x", F32, [3, 5])], [("v2", F32, None), ("i", I64, None)], inits, opset=13)


def test_topk_with_a_computed_k_matches_ort():
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((3, 5)).astype(np.float32)}, {"x": np.ones((3, 5), np.float32)},
             {"x": -np.ones((3, 5), np.float32)}]
    _check(_topk_computed_k(), feeds)


def test_topk_with_k_past_the_axis_is_an_index_error():
    nodes = [N("TopK", ["x", "k"], ["v", "i"], axis=0)]
    proto = model(nodes, [("x", F32, [4]), ("k", I64, [1])], [("v", F32, None), ("i", I64, None)], opset=13)
    loaded = cuvil.load_onnx(proto)
    for run in (loaded, loaded.optimize()):
        np.testing.assert_array_equal(run(x=np.float32([3, 1, 4, 1]), k=np.int64([2]))[1], [2, 0])
        with pytest.raises(cuvil.IndexRangeError, match="index 5 is out of bounds for axis 0 with size 4"):
            run(x=np.float32([3, 1, 4, 1]), k=np.int64([5]))


def test_slice_with_computed_bounds_matches_ort():
    """x[:, argmax(x[0]) : argmax(x[0]) + 3] and x[ReduceSum(positive) :] (past the end clamps), then a Relu."""
    nodes = [N("Gather", ["x", "zero"], ["row"], axis=0), N("ArgMax", ["row"], ["at"], keepdims=1),
             N("Add", ["at", "three"], ["stop"]), N("Slice", ["x", "at", "stop", "one"], ["cols"]),
             N("Relu", ["cols"], ["y"]), N("Greater", ["row", "zf"], ["pos"]), N("Cast", ["pos"], ["pos_i"], to=7),
             N("ReduceSum", ["pos_i", "axes0"], ["start"], keepdims=1), N("Slice", ["x", "start", "big"], ["tail"])]
    inits = [("zero", np.array(0, np.int64)), ("three", np.array([3], np.int64)), ("one", np.array([1], np.int64)),
             ("zf", np.array(0, np.float32)), ("axes0", np.array([0], np.int64)), ("big", np.array([99], np.int64))]
    proto = model(nodes, [("x", F32, [6, 6])], [("y", F32, None), ("tail", F32, None)], inits, opset=13)
    rng = np.random.default_rng(4)
    _check(proto, [{"x": rng.standard_normal((6, 6)).astype(np.float32)} for _ in range(3)] +
           [{"x": np.ones((6, 6), np.float32)}, {"x": -np.ones((6, 6), np.float32)}])
