"""Sequences and optionals: resolved at conversion (a sequence input converted per call structure, one input per
element), interpreted and compiled, and compared with ONNX Runtime at several lengths."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import cuvil

from .helpers import F32, I64, helper, rand, run_ort

N = helper.make_node
BOOL = onnx.TensorProto.BOOL


def _seq(name, elem=F32, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def _t(name, elem=F32, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _opt(name, elem=F32, shape=None):
    return helper.make_value_info(name, helper.make_optional_type_proto(helper.make_tensor_type_proto(elem, shape)))


def _model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _same(got, want):
    assert type(got) is type(want) or isinstance(want, np.ndarray), (type(got), type(want))
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _check(proto, feeds: dict):
    """Interpreter and compiled code both give ONNX Runtime's outputs."""
    want = run_ort(proto, feeds)
    loaded = cuvil.load_onnx(proto)
    for run in (loaded, loaded.optimize()):
        got = run(**feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)


def _elements(n, shape=(2, 3)):
    return [rand(*shape, seed=i) for i in range(n)]


def test_a_sequence_input_is_converted_per_length():
    proto = _model([N("SequenceLength", ["s"], ["n"]), N("ConcatFromSequence", ["s"], ["c"], axis=0),
                    N("SequenceAt", ["s", "last"], ["a"])],
                   [_seq("s", F32, ["r", 3])], [_t("n", I64, []), _t("c", F32, None), _t("a", F32, None)],
                   initializers=[("last", np.int64(-1))])
    for n in (1, 2, 5):
        _check(proto, {"s": _elements(n)})


def test_sequence_elements_may_differ_in_shape():
    proto = _model([N("ConcatFromSequence", ["s"], ["c"], axis=1, new_axis=0)], [_seq("s", F32, [2, "w"])],
                   [_t("c", F32, None)])
    _check(proto, {"s": [rand(2, 1), rand(2, 4, seed=1), rand(2, 2, seed=2)]})


def test_construct_insert_erase_and_a_sequence_output():
    nodes = [N("SequenceConstruct", ["x", "y"], ["s0"]), N("SequenceInsert", ["s0", "x", "zero"], ["s1"]),
             N("SequenceInsert", ["s1", "y"], ["s2"]), N("SequenceErase", ["s2", "one"], ["s3"]),
             N("SequenceErase", ["s3"], ["out"])]
    proto = _model(nodes, [_t("x", F32, [2]), _t("y", F32, [2])], [_seq("out", F32, [2])],
                   initializers=[("zero", np.int64(0)), ("one", np.int64(1))])
    _check(proto, {"x": rand(2), "y": rand(2, seed=1)})


@pytest.mark.parametrize("split", [None, 2, [1, 3]])
def test_split_to_sequence(split):
    inputs = ["x"] + (["split"] if split is not None else [])
    inits = [("split", np.asarray(split, np.int64))] if split is not None else []
    proto = _model([N("SplitToSequence", inputs, ["s"], axis=1, keepdims=0 if split is None else 1)],
                   [_t("x", F32, [3, 4])], [_seq("s", F32, None)], initializers=inits)
    _check(proto, {"x": rand(3, 4)})


def test_sequence_map_over_a_sequence_input():
    body = helper.make_graph([N("Add", ["a", "b"], ["c"])], "body", [_t("a", F32, ["n"]), _t("b", F32, ["n"])],
                             [_t("c", F32, ["n"])])
    proto = _model([N("SequenceMap", ["s", "t"], ["out"], body=body)], [_seq("s", F32, ["n"]), _t("t", F32, [4])],
                   [_seq("out", F32, ["n"])])
    for n in (1, 3):
        _check(proto, {"s": _elements(n, (4,)), "t": rand(4, seed=9)})


def _growing_loop(trip_input: bool):
    """A Loop appending x * i to a sequence each iteration; its result is concatenated."""
    body = helper.make_graph(
        [N("Identity", ["c_in"], ["c_out"]), N("Cast", ["i"], ["f"], to=F32), N("Mul", ["x", "f"], ["row"]),
         N("SequenceInsert", ["s_in", "row"], ["s_out"])],
        "body", [_t("i", I64, []), _t("c_in", BOOL, []), _seq("s_in", F32, [3])], [_t("c_out", BOOL, []),
                                                                                   _seq("s_out", F32, [3])])
    nodes = [N("SequenceEmpty", [], ["empty"], dtype=F32), N("Loop", ["trip", "", "empty"], ["s"], body=body),
             N("SequenceLength", ["s"], ["n"]), N("ConcatFromSequence", ["s"], ["c"], axis=0, new_axis=1)]
    inputs = [_t("x", F32, [3])] + ([_t("trip", I64, [])] if trip_input else [])
    inits = [] if trip_input else [("trip", np.int64(4))]
    return _model(nodes, inputs, [_t("n", I64, []), _t("c", F32, None)], initializers=inits)


def test_a_loop_growing_a_sequence_is_unrolled():
    _check(_growing_loop(False), {"x": rand(3)})


def test_a_loop_over_a_sequence_specializes_on_its_trip_count():
    proto = _growing_loop(True)
    for trip in (1, 4, 2):
        _check(proto, {"x": rand(3), "trip": np.array(trip, np.int64)})


def test_if_on_sequences_of_one_length_is_compiled_as_cond():
    def branch(op):
        return helper.make_graph([N(op, ["x"], ["y"]), N("SequenceConstruct", ["y", "x"], ["s"])], op,
                                 [], [_seq("s", F32, [3])])
    nodes = [N("ReduceSum", ["x"], ["r"], keepdims=0), N("Greater", ["r", "zero"], ["c"]),
             N("If", ["c"], ["s"], then_branch=branch("Relu"), else_branch=branch("Neg"))]
    proto = _model(nodes, [_t("x", F32, [3])], [_seq("s", F32, [3])], opset=13,
                   initializers=[("zero", np.float32(0))])
    assert "cond" in cuvil.inspect_ir(cuvil.load_onnx(proto))
    for x in (np.float32([1, 2, 3]), np.float32([-1, -2, 0.5])):
        _check(proto, {"x": x})


def test_optional_inputs_present_and_absent():
    proto = _model([N("OptionalHasElement", ["o"], ["has"])], [_opt("o", F32, [2])], [_t("has", BOOL, [])],
                   opset=18)
    model = cuvil.load_onnx(proto)
    for run in (model, model.optimize()):
        assert run(None)[0].item() is False and run(o=rand(2))[0].item() is True


def test_optional_get_element_of_an_absent_optional_is_named():
    proto = _model([N("OptionalGetElement", ["o"], ["y"], name="get")], [_opt("o", F32, [2])], [_t("y", F32, [2])],
                   opset=18)
    model = cuvil.load_onnx(proto)
    np.testing.assert_array_equal(model(np.float32([1, 2]))[0], [1, 2])
    with pytest.raises(cuvil.ShapeError, match="OptionalGetElement node 'get'.*absent"):
        model(None)


def test_scan_before_opset_9_with_a_batch_axis():
    body = helper.make_graph([N("Add", ["s_in", "x"], ["s_out"]), N("Identity", ["s_out"], ["row"])], "body",
                             [_t("s_in", F32, [2]), _t("x", F32, [2])], [_t("s_out", F32, [2]), _t("row", F32, [2])])
    proto = _model([N("Scan", ["", "init", "xs"], ["final", "rows"], num_scan_inputs=1, body=body,
                      directions=[1])], [_t("init", F32, [3, 2]), _t("xs", F32, [3, 4, 2])],
                   [_t("final", F32, [3, 2]), _t("rows", F32, [3, 4, 2])], opset=8)
    _check(proto, {"init": rand(3, 2), "xs": rand(3, 4, 2, seed=1)})


# -- errors -----------------------------------------------------------------------------------------------------
def _at_model():
    return _model([N("SequenceAt", ["s", "pos"], ["y"], name="at")], [_seq("s", F32, [2])], [_t("y", F32, [2])],
                  initializers=[("pos", np.int64(2))])


def test_a_position_past_the_sequence_names_the_node_and_length():
    model = cuvil.load_onnx(_at_model())
    np.testing.assert_array_equal(model([np.float32([0, 0]), np.float32([1, 1]), np.float32([2, 2])])[0], [2, 2])
    with pytest.raises(cuvil.IndexRangeError, match=r"SequenceAt node 'at'.*position 2.*sequence of 2 elements"):
        model([np.float32([0, 0]), np.float32([1, 1])])


def test_a_sequence_input_given_an_array_or_a_wrong_element_is_named():
    model = cuvil.load_onnx(_at_model())
    with pytest.raises(cuvil.ShapeError, match=r"input 's' is a sequence.*list of arrays"):
        model(np.zeros((3, 2), np.float32))
    with pytest.raises(cuvil.ShapeError, match=r"input 's' element 1 has shape \(3,\)"):
        model([np.zeros(2, np.float32), np.zeros(3, np.float32), np.zeros(2, np.float32)])
    with pytest.raises(cuvil.ShapeError, match=r"input 's\[0\]' must have element type float32"):
        model([np.zeros(2, np.int64)] * 3)


def test_a_tensor_op_given_a_sequence_is_named():
    proto = _model([N("Relu", ["s"], ["y"], name="relu")], [_seq("s", F32, [2])], [_t("y", F32, [2])])
    with pytest.raises(cuvil.CuvilError, match=r"Relu node 'relu'.*seq\(tensor\(float\)\)"):
        cuvil.load_onnx(proto)([np.zeros(2, np.float32)])


def test_a_loop_over_a_sequence_with_a_data_dependent_condition_is_refused():
    body = helper.make_graph(
        [N("ReduceSum", ["x"], ["r"], keepdims=0), N("Greater", ["r", "zero"], ["c_out"]),
         N("SequenceInsert", ["s_in", "x"], ["s_out"])],
        "body", [_t("i", I64, []), _t("c_in", BOOL, []), _seq("s_in", F32, [100])], [_t("c_out", BOOL, []),
                                                                                     _seq("s_out", F32, [100])])
    proto = _model([N("SequenceEmpty", [], ["e"]), N("Loop", ["", "", "e"], ["s"], body=body, name="grow"),
                    N("SequenceLength", ["s"], ["n"])], [_t("x", F32, [100])], [_t("n", I64, [])],
                   initializers=[("zero", np.float32(0))])
    with pytest.raises(cuvil.UnsupportedError, match=r"Loop node 'grow'.*condition must be known.*depends on 'x'"):
        cuvil.load_onnx(proto)(rand(100))


def test_sequence_elements_of_different_types_are_refused():
    proto = _model([N("SequenceConstruct", ["x", "i"], ["s"], name="mk"), N("SequenceLength", ["s"], ["n"])],
                   [_t("x", F32, [2]), _t("i", I64, [2])], [_t("n", I64, [])])
    with pytest.raises(cuvil.ShapeError, match=r"SequenceConstruct node 'mk'.*same"):
        cuvil.load_onnx(proto)(rand(2), np.zeros(2, np.int64))



def _loop_over_rows(new_axis: int, axis: int):
    """for i in range(x.shape[0]): s.append(x[i] * 2), a Loop of symbolic trip count growing a sequence."""
    body = helper.make_graph(
        [N("Identity", ["c_in"], ["c_out"]), N("Gather", ["x", "i"], ["row"], axis=0), N("Add", ["row", "row"], ["d"]),
         N("SequenceInsert", ["s_in", "d"], ["s_out"])],
        "body", [_t("i", I64, []), _t("c_in", BOOL, []), _seq("s_in", F32, [3])], [_t("c_out", BOOL, []),
                                                                                   _seq("s_out", F32, [3])])
    nodes = [N("Shape", ["x"], ["shape"]), N("Gather", ["shape", "zero"], ["n"], axis=0),
             N("SequenceEmpty", [], ["empty"], dtype=F32), N("Loop", ["n", "", "empty"], ["s"], body=body),
             N("SequenceLength", ["s"], ["k"]), N("ConcatFromSequence", ["s"], ["c"], axis=axis, new_axis=new_axis),
             N("SequenceAt", ["s", "minus_one"], ["last"])]
    outputs = [_seq("s", F32, [3]), _t("k", I64, []), _t("c", F32, None), _t("last", F32, [3])]
    return _model(nodes, [_t("x", F32, ["n", 3])], outputs,
                  initializers=[("zero", np.int64(0)), ("minus_one", np.int64(-1))])


@pytest.mark.parametrize("new_axis,axis", [(0, 0), (1, 0), (1, 1), (0, -1)])
def test_a_loop_of_symbolic_trip_count_grows_a_stacked_sequence(new_axis, axis):
    proto = _loop_over_rows(new_axis, axis)
    assert "while" in cuvil.inspect_ir(cuvil.load_onnx(proto).optimize())
    for n in (1, 3, 6):
        _check(proto, {"x": rand(n, 3, seed=n)})


def test_a_grown_sequence_read_inside_its_loop_is_refused_by_name():
    body = helper.make_graph(
        [N("Identity", ["c_in"], ["c_out"]), N("SequenceLength", ["s_in"], ["k"], name="len"),
         N("SequenceInsert", ["s_in", "k"], ["s_out"])],
        "body", [_t("i", I64, []), _t("c_in", BOOL, []), _seq("s_in", I64, [])], [_t("c_out", BOOL, []),
                                                                                  _seq("s_out", I64, [])])
    nodes = [N("Shape", ["x"], ["shape"]), N("Gather", ["shape", "zero"], ["n"], axis=0),
             N("SequenceEmpty", [], ["empty"], dtype=I64), N("Loop", ["n", "", "empty"], ["s"], body=body)]
    proto = _model(nodes, [_t("x", F32, ["n", 3])], [_seq("s", I64, [])], initializers=[("zero", np.int64(0))])
    with pytest.raises(cuvil.ShapeError, match=r"SequenceLength node 'Loop/len'.*grown by a Loop of run-time trip"):
        cuvil.load_onnx(proto)


def test_the_module_of_a_model_with_sequence_inputs_exists_after_a_call():
    model = cuvil.load_onnx(_at_model())
    assert str(model.inputs[0]) == "s: seq(float32[2])"
    with pytest.raises(cuvil.UnsupportedError, match="per length of its sequence inputs"):
        cuvil.inspect_ir(model)
    model([np.zeros(2, np.float32)] * 3)
    text = cuvil.inspect_ir(model)
    assert "s_0_" in text and "s_2_" in text and "s_3_" not in text  # one argument per element
