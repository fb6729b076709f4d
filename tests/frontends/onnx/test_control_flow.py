"""If, Loop and Scan: converted to cond/while regions (or folded when the condition is known) and compared
with ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import cuvil

from .helpers import F32, I64, check_against_ort, helper, model, rand

N = helper.make_node
BOOL = onnx.TensorProto.BOOL


def _graph(nodes, inputs, outputs, name="body"):
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info(*i) for i in inputs],
                             [helper.make_tensor_value_info(*o) for o in outputs])


def _if_model(else_shape=(3,)):
    then_g = _graph([N("Mul", ["x", "x"], ["t"])], [], [("t", F32, [3])], "then")
    else_nodes = [N("Neg", ["x"], ["e"])] if else_shape == (3,) else \
        [N("Concat", ["x", "x"], ["e"], axis=0)]
    else_g = _graph(else_nodes, [], [("e", F32, list(else_shape))], "else")
    nodes = [N("ReduceSum", ["x"], ["s"], keepdims=0), N("Greater", ["s", "zero"], ["c"]),
             N("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="choose")]
    return model(nodes, [("x", F32, [3])], [("y", F32, None)], [("zero", np.float32(0))], opset=13)


def test_if_with_a_runtime_condition_becomes_cond():
    proto = _if_model()
    assert "cond" in cuvil.inspect_ir(cuvil.load_onnx(proto))
    for x in (np.float32([1, 2, 3]), np.float32([-1, -2, 0.5])):
        check_against_ort(proto, {"x": x})


def test_if_with_a_known_condition_keeps_only_the_taken_branch():
    then_g = _graph([N("Relu", ["x"], ["t"])], [], [("t", F32, ["n"])], "then")
    else_g = _graph([N("Neg", ["x"], ["e"])], [], [("e", F32, ["n"])], "else")
    nodes = [N("Shape", ["x"], ["shp"]), N("Equal", ["shp", "four"], ["c"]),
             N("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    proto = model(nodes, [("x", F32, [4])], [("y", F32, None)], [("four", np.int64([4]))], opset=13)
    text = cuvil.inspect_ir(cuvil.load_onnx(proto))
    assert "cond" not in text and "relu" in text and "neg" not in text
    check_against_ort(proto, {"x": np.float32([-1, 2, -3, 4])})


def test_if_branches_of_different_shapes_are_unsupported_when_the_condition_is_data():
    with pytest.raises(cuvil.UnsupportedError, match="If node 'choose'.*different types or shapes"):
        cuvil.load_onnx(_if_model(else_shape=(6,)))


def _loop_body(grow=False):
    """(i, cond, acc) -> (acc + x * i < 100, acc + x * i) and a scan output acc."""
    nodes = [N("Cast", ["i"], ["fi"], to=onnx.TensorProto.FLOAT), N("Mul", ["x", "fi"], ["step"]),
             N("Add", ["acc", "step"], ["acc2"]) if not grow else N("Concat", ["acc", "step"], ["acc2"], axis=0),
             N("ReduceSum", ["acc2"], ["total"], keepdims=0), N("Less", ["total", "limit"], ["keep"]),
             N("Identity", ["acc2"], ["row"])]
    return _graph(nodes, [("i", I64, []), ("c", BOOL, []), ("acc", F32, [2])],
                  [("keep", BOOL, []), ("acc2", F32, [2]), ("row", F32, [2])])


def test_loop_with_trip_count_and_condition():
    body = _loop_body()
    body.output.pop()  # no scan output: the condition may stop the loop early
    body.node.pop()
    nodes = [N("Loop", ["n", "c0", "acc0"], ["acc"], body=body)]
    proto = model(nodes, [("x", F32, [2]), ("n", I64, []), ("c0", BOOL, []), ("acc0", F32, [2])],
                  [("acc", F32, [2])], [("limit", np.float32(100))], opset=13)
    for n, x in ((5, np.float32([1, 2])), (50, np.float32([1, 2])), (0, np.float32([3, 4]))):
        check_against_ort(proto, {"x": x, "n": np.array(n, np.int64), "c0": np.array(True), "acc0": np.float32([0, 0])})


def test_loop_scan_outputs_with_a_known_trip_count():
    body = _loop_body()
    body.node[4].CopyFrom(N("Identity", ["c"], ["keep"]))  # the condition passes through: runs all 4 trips
    nodes = [N("Loop", ["n", "", "acc0"], ["acc", "rows"], body=body)]
    proto = model(nodes, [("x", F32, [2]), ("acc0", F32, [2])], [("acc", F32, [2]), ("rows", F32, [4, 2])],
                  [("limit", np.float32(100)), ("n", np.int64(4))], opset=13)
    acc, rows = check_against_ort(proto, {"x": np.float32([1, 2]), "acc0": np.float32([0, 1])})
    assert rows.shape == (4, 2)


def test_loop_whose_carried_value_grows_is_unsupported():
    body = _loop_body(grow=True)
    body.output.pop()
    body.node.pop()
    body.output[1].type.tensor_type.ClearField("shape")  # Concat makes it [4]: declared [2], ONNX would refuse it
    proto = model([N("Loop", ["n", "", "acc0"], ["acc"], body=body, name="grow")],
                  [("x", F32, [2]), ("acc0", F32, [2])], [("acc", F32, None)],
                  [("limit", np.float32(100)), ("n", np.int64(3))], opset=13)
    with pytest.raises(cuvil.UnsupportedError, match="Loop node 'grow'.*changes type or shape"):
        cuvil.load_onnx(proto)


@pytest.mark.parametrize("reverse", [0, 1])
def test_scan_running_sum(reverse):
    body = _graph([N("Add", ["s", "row"], ["s2"]), N("Identity", ["s2"], ["out"])],
                  [("s", F32, [3]), ("row", F32, [3])], [("s2", F32, [3]), ("out", F32, [3])])
    nodes = [N("Scan", ["init", "xs"], ["final", "partial"], body=body, num_scan_inputs=1,
               scan_input_directions=[reverse], scan_output_axes=[1])]
    proto = model(nodes, [("init", F32, [3]), ("xs", F32, ["t", 3])], [("final", F32, [3]), ("partial", F32, None)],
                  opset=16)
    for t in (1, 4):
        check_against_ort(proto, {"init": np.float32([0, 1, 2]), "xs": rand(t, 3, seed=t)})


def test_loop_slicing_by_its_counter_into_scan_outputs_is_unrolled():
    """ONNX's test_loop11: the body's Slice by the counter has a size computed from the data inside one iteration,
    which cannot leave a `while`; the Loop is unrolled on its trip count and condition (graph inputs it is
    specialised on), interpreted and compiled."""
    import warnings

    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case = next(c for c in node.collect_testcases(None) if c.name == "test_loop11")
    inputs, expected = case.data_sets[0]
    inputs = [onnx.numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else t for t in inputs]
    loaded = cuvil.load_onnx(case.model)
    for run in (loaded, loaded.optimize()):
        for got, want in zip(run(*inputs), expected):
            np.testing.assert_allclose(got, want, rtol=1e-6)
