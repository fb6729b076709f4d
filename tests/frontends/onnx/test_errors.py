"""Bad input gives a Cuvil error that names what is wrong (op type, node name, opset), never a crash."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import cuvil

from .helpers import F32, helper, model

N = helper.make_node


def _relu_model(opset=17):
    return model([N("Relu", ["x"], ["y"], name="act")], [("x", F32, [2])], [("y", F32, [2])], opset=opset)


def test_unsupported_op_names_op_node_and_opset():
    proto = model([N("Frobnicate", ["x"], ["y"], name="weird")], [("x", F32, [2])], [("y", F32, [2])], opset=17)
    with pytest.raises(cuvil.UnsupportedError, match=r"ONNX Frobnicate node 'weird' \(opset 17\)"):
        cuvil.load_onnx(proto)


def test_op_newer_than_the_model_opset():
    proto = model([N("Gelu", ["x"], ["y"], name="g")], [("x", F32, [2])], [("y", F32, [2])], opset=13)
    with pytest.raises(cuvil.UnsupportedError, match=r"Gelu node 'g' \(opset 13\).*not an op of the default domain"):
        cuvil.load_onnx(proto)


def test_op_of_an_imported_contrib_domain():
    """What onnxruntime's QOperator quantisation writes (QLinearConcat, DynamicQuantizeLSTM): named as a domain op."""
    proto = model([N("DynamicQuantizeLSTM", ["x"], ["y"], name="lstm_quant", domain="com.microsoft")],
                  [("x", F32, [2])], [("y", F32, [2])])
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(cuvil.UnsupportedError, match=r"DynamicQuantizeLSTM node 'lstm_quant'.*domain 'com.microsoft'"):
        cuvil.load_onnx(proto)


def test_op_of_an_unknown_domain():
    proto = model([N("Thing", ["x"], ["y"], domain="com.example")], [("x", F32, [2])], [("y", F32, [2])])
    with pytest.raises(cuvil.UnsupportedError, match="domain 'com.example'"):
        cuvil.load_onnx(proto)


@pytest.mark.parametrize("opset", [0, 99])
def test_unsupported_opsets(opset):
    with pytest.raises(cuvil.UnsupportedError, match=f"opset {opset} of the default ONNX domain"):
        cuvil.load_onnx(_relu_model(opset))


def test_truncated_and_corrupt_files(tmp_path):
    data = _relu_model().SerializeToString()
    for bad in (data[: len(data) // 2], b"\xff" * 40, b"not an onnx model at all"):
        with pytest.raises(cuvil.SerializationError, match="not a valid ONNX model|not an ONNX model"):
            cuvil.load_onnx(bad)
    with pytest.raises(cuvil.SerializationError, match="cannot read ONNX model"):
        cuvil.load_onnx(tmp_path / "missing.onnx")


def test_dangling_name():
    proto = model([N("Relu", ["nowhere"], ["y"], name="act")], [("x", F32, [2])], [("y", F32, [2])])
    with pytest.raises(cuvil.VerificationError, match="Relu node 'act' reads 'nowhere'"):
        cuvil.load_onnx(proto)


def test_initializer_whose_data_does_not_match_its_shape():
    proto = model([N("Add", ["x", "w"], ["y"])], [("x", F32, [2])], [("y", F32, [2])], [("w", np.float32([1, 2]))])
    proto.graph.initializer[0].dims[:] = [3]
    with pytest.raises(cuvil.SerializationError, match="tensor 'w' of shape \\[3\\] needs 12 bytes, has 8"):
        cuvil.load_onnx(proto)


def test_shape_mismatch_inside_the_graph_names_the_node():
    proto = model([N("Add", ["x", "y"], ["z"], name="plus")], [("x", F32, [2]), ("y", F32, [3])], [("z", F32, None)])
    with pytest.raises(cuvil.ShapeError, match=r"Add node 'plus' \(opset 17\).*Incompatible dimensions"):
        cuvil.load_onnx(proto)


def test_unsupported_input_types():
    proto = model([N("Identity", ["x"], ["y"])], [("x", onnx.TensorProto.STRING, [2])],
                  [("y", onnx.TensorProto.STRING, [2])])
    with pytest.raises(cuvil.UnsupportedError, match="graph input 'x' has element type STRING"):
        cuvil.load_onnx(proto)


def test_wrong_argument_type():
    with pytest.raises(TypeError, match="path, bytes or an onnx.ModelProto"):
        cuvil.load_onnx(42)
