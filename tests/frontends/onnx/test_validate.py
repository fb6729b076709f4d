"""Strict validation (validate.py): models ONNX Runtime refuses are refused at load with a Cuvil error naming
the node and attribute, where the converter used to ignore the damage or fail with a bare internal error."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import cuvil

from .helpers import F32, I64, helper, model, run_ort

N = helper.make_node


def _conv(**attrs):
    return model([N("Conv", ["x", "w"], ["y"], name="c1", **attrs)], [("x", F32, [1, 2, 5, 5])], [("y", F32, None)],
                 [("w", np.ones((3, 2, 3, 3), np.float32))])


def _refused_by_ort(proto, shape=(1, 2, 5, 5)) -> None:
    state = pytest.importorskip("onnxruntime.capi.onnxruntime_pybind11_state")
    with pytest.raises((state.Fail, state.InvalidGraph, state.InvalidArgument, state.RuntimeException)):
        run_ort(proto, {"x": np.ones(shape, np.float32)})


def test_kernel_shape_that_contradicts_the_weights():
    proto = _conv(kernel_shape=[2, 2])
    _refused_by_ort(proto)
    with pytest.raises(cuvil.ShapeError, match=r"Conv node 'c1' \(opset 17\): attribute kernel_shape \[2, 2\] "
                                               r"contradicts the weight 'w' of shape \[3, 2, 3, 3\]"):
        cuvil.load_onnx(proto)


def test_kernel_shape_that_matches_the_weights_loads():
    cuvil.load_onnx(_conv(kernel_shape=[3, 3]))


def test_attribute_of_the_wrong_type_names_node_and_attribute():
    proto = _conv(pads=3.5)
    _refused_by_ort(proto)
    with pytest.raises(cuvil.VerificationError, match=r"Conv node 'c1'.*attribute type in 'c1 : pads'.*INTS"):
        cuvil.load_onnx(proto)


def test_declared_output_type_that_contradicts_the_graph():
    proto = model([N("Relu", ["x"], ["y"], name="act")], [("x", F32, [2])], [("y", I64, [2])])
    _refused_by_ort(proto, (2,))
    with pytest.raises(cuvil.ShapeError, match=r"Relu node 'act' \(opset 17\).*elem type"):
        cuvil.load_onnx(proto)


def test_duplicate_input_names():
    proto = model([N("Add", ["x", "x"], ["y"])], [("x", F32, [2]), ("x", F32, [2])], [("y", F32, [2])])
    _refused_by_ort(proto, (2,))
    with pytest.raises(cuvil.VerificationError, match="'x' has been used as graph input names multiple times"):
        cuvil.load_onnx(proto)


def test_value_defined_twice():
    proto = model([N("Relu", ["x"], ["y"], name="a"), N("Neg", ["x"], ["y"], name="b")], [("x", F32, [2])],
                  [("y", F32, [2])])
    with pytest.raises(cuvil.VerificationError, match="'y' has been used as output names multiple times"):
        cuvil.load_onnx(proto)


@pytest.mark.parametrize("elem, count, raw, want", [(onnx.TensorProto.INT4, 4, 3, 2), (onnx.TensorProto.UINT4, 5, 2, 3),
                                                    (onnx.TensorProto.FLOAT8E4M3FN, 4, 3, 4),
                                                    (onnx.TensorProto.UINT16, 3, 8, 6)])
def test_packed_and_carried_initializers_hold_exactly_their_bytes(elem, count, raw, want):
    w = onnx.TensorProto(name="w", data_type=elem, dims=[count], raw_data=b"\x01" * raw)
    proto = model([N("Cast", ["w"], ["y"], to=F32)], [], [("y", F32, [count])], opset=21)
    proto.graph.initializer.append(w)
    with pytest.raises(cuvil.SerializationError, match=f"tensor 'w' of shape \\[{count}\\] needs {want} bytes, "
                                                       f"has {raw}"):
        cuvil.load_onnx(proto)


def test_packed_initializer_of_the_right_size_loads():
    w = onnx.TensorProto(name="w", data_type=onnx.TensorProto.INT4, dims=[3], raw_data=bytes([0x21, 0x03]))
    proto = model([N("Cast", ["w"], ["y"], to=F32)], [], [("y", F32, [3])], opset=21)
    proto.graph.initializer.append(w)
    assert cuvil.load_onnx(proto)()[0].tolist() == [1, 2, 3]


def test_name_that_is_not_utf8_text():
    """A flipped byte in a name: protobuf hands it over as bytes, which used to leak a TypeError from re.sub."""
    data = model([N("Relu", ["xq"], ["y"])], [("xq", F32, [2])], [("y", F32, [2])]).SerializeToString()
    with pytest.raises(cuvil.SerializationError, match=r"node: field 'input' holds b'x\\xff', which is not UTF-8"):
        cuvil.load_onnx(data.replace(b"xq", b"x\xff"))


def test_tensor_that_requires_grad_is_refused_clearly():
    torch = pytest.importorskip("torch")
    m = cuvil.load_onnx(model([N("Relu", ["x"], ["y"])], [("x", F32, ["n"])], [("y", F32, ["n"])]))
    with pytest.raises(cuvil.ShapeError, match="input 'x' cannot be read as a NumPy array of float32: Tensor: .*grad"):
        m(torch.ones(3, requires_grad=True))
    assert m(torch.ones(3))[0].tolist() == [1, 1, 1]


def test_ragged_list_input_is_refused_clearly():
    m = cuvil.load_onnx(model([N("Relu", ["x"], ["y"])], [("x", F32, ["n", 2])], [("y", F32, ["n", 2])]))
    with pytest.raises(cuvil.ShapeError, match="input 'x' cannot be read as a NumPy array"):
        m([[1, 2], [3]])


def test_flag_attribute_other_than_0_or_1():
    """ORT reads keepdims=-2 as 0, Cuvil's reduce read it as true: refused instead of a wrong shape."""
    proto = model([N("ReduceMean", ["x"], ["y"], axes=[1], keepdims=-2, name="pool")], [("x", F32, [2, 3])],
                  [("y", F32, None)])
    with pytest.raises(cuvil.VerificationError,
                       match=r"ReduceMean node 'pool' \(opset 17\): attribute keepdims must be 0 or 1, got -2"):
        cuvil.load_onnx(proto)


def test_pool_pads_not_smaller_than_the_kernel():
    proto = model([N("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 2], name="avg")],
                  [("x", F32, [1, 2, 5, 5])], [("y", F32, None)])
    _refused_by_ort(proto)
    with pytest.raises(cuvil.VerificationError, match=r"AveragePool node 'avg' \(opset 17\): attribute pads "
                                                      r"\[0, 0, 1, 2\] must be smaller than kernel_shape \[2, 2\]"):
        cuvil.load_onnx(proto)


def test_output_of_undefined_element_type():
    proto = model([N("Relu", ["x"], ["y"])], [("x", F32, [2])], [("y", onnx.TensorProto.UNDEFINED, [2])])
    _refused_by_ort(proto, (2,))
    with pytest.raises(cuvil.VerificationError, match="graph output 'y' has the element type UNDEFINED"):
        cuvil.load_onnx(proto)
