"""The model object: loading from a path, bytes or a ModelProto, weights without copies (external data
memory-mapped), inputs/outputs, calling conventions, .optimize(), locations, value specialization."""
from __future__ import annotations

import mmap

import numpy as np
import onnx
import pytest

import cuvil
from cuvil.frontends.onnx import OnnxModel

from .helpers import F32, I64, check_against_ort, helper, model, rand


def _mlp(opset: int = 17):
    w = rand(4, 3, seed=1)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"])]
    return model(nodes, [("x", F32, ["batch size", 4])], [("y", F32, ["batch size", 3])], [("w", w)], opset), w


def _owner(arr):
    while isinstance(arr, np.ndarray) and arr.base is not None:
        arr = arr.base
    return arr


def test_path_bytes_and_proto_give_the_same_model(tmp_path):
    proto, w = _mlp()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    x = rand(2, 4)
    want = np.maximum(x @ w, 0)
    for source in (proto, proto.SerializeToString(), str(path), path):
        (got,) = cuvil.load_onnx(source)(x)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_initializers_are_views_not_copies(tmp_path):
    proto, _ = _mlp()
    m = cuvil.load_onnx(proto.SerializeToString())
    assert not m.weights["w"].flags.owndata and isinstance(_owner(m.weights["w"]), bytes)


def test_external_data_is_memory_mapped(tmp_path):
    proto, w = _mlp()
    onnx.save_model(proto, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    m = cuvil.load_onnx(tmp_path / "m.onnx")
    assert isinstance(_owner(m.weights["w"]), (np.memmap, mmap.mmap))
    x = rand(3, 4)
    np.testing.assert_allclose(m(x)[0], np.maximum(x @ w, 0), rtol=1e-6)


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    proto, _ = _mlp()
    t = proto.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value="../../etc/passwd")
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(cuvil.SerializationError, match="outside the model's folder"):
        cuvil.load_onnx(tmp_path / "m.onnx")


def test_inputs_outputs_and_symbolic_dims():
    proto, _ = _mlp()
    m = cuvil.load_onnx(proto)
    assert isinstance(m, OnnxModel)
    (x,), (y,) = m.inputs, m.outputs
    assert (x.name, x.dtype, str(x)) == ("x", np.dtype("float32"), "x: f32[batch_size,4]")
    assert str(y) == "y: f32[batch_size,3]"
    assert "f32[batch_size,4]" in cuvil.inspect_ir(m)


def test_calls_by_position_and_by_name_and_bad_calls():
    proto = model([helper.make_node("Sub", ["a", "b"], ["y"])], [("a", F32, [2]), ("b", F32, [2])], [("y", F32, [2])])
    m = cuvil.load_onnx(proto)
    a, b = np.float32([5, 6]), np.float32([1, 2])
    for got in (m(a, b), m(a=a, b=b), m(a, b=b), m(b=b, a=a)):
        np.testing.assert_array_equal(got[0], [4, 4])
    with pytest.raises(cuvil.ShapeError, match="missing model inputs: b"):
        m(a)
    with pytest.raises(cuvil.ShapeError, match="no input 'c'"):
        m(a, b, c=b)
    with pytest.raises(cuvil.ShapeError, match="both by position and by name"):
        m(a, a=b)
    with pytest.raises(cuvil.ShapeError, match="'b' must have element type float32, got float64"):
        m(a, np.float64([1, 2]))
    with pytest.raises(cuvil.ShapeError, match="'a' must have size 2 in dim 0"):
        m(np.float32([1, 2, 3]), b)
    with pytest.raises(cuvil.ShapeError, match="'a' must have rank 1"):
        m(np.float32([[1, 2]]), b)
    for run in (m, m.optimize()):  # big-endian arrays hold the same values
        np.testing.assert_array_equal(run(a.astype(">f4"), b)[0], [4, 4])


def test_every_op_carries_its_onnx_node_name():
    proto, _ = _mlp()
    m = cuvil.load_onnx(proto)
    locs = {str(op.loc) for op in m.module.main.walk() if op.name != "return"}
    assert locs == {"onnx:mm", "onnx:Relu"}


def test_optimize_runs_the_pipeline_on_a_copy():
    proto, w = _mlp()
    m = cuvil.load_onnx(proto)
    before = cuvil.inspect_ir(m)
    fast = m.optimize(target="cpu")
    x = rand(5, 4)
    np.testing.assert_allclose(fast(x)[0], m(x)[0], rtol=1e-6)
    assert cuvil.inspect_ir(m) == before and fast.inputs == m.inputs
    with pytest.raises(cuvil.UnsupportedError, match="target"):
        m.optimize(target="tpu")


def test_shape_inputs_given_at_run_time_specialize_the_model():
    """Reshape's shape as a graph input: converted once per distinct value (small integer inputs only)."""
    proto = model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [("x", F32, [2, 6]), ("shape", I64, [2])],
                  [("y", F32, None)])
    m = cuvil.load_onnx(proto)
    assert m.value_inputs == {"shape"}
    with pytest.raises(cuvil.UnsupportedError, match="call it once"):
        cuvil.inspect_ir(m)
    x = rand(2, 6)
    fast = m.optimize()
    np.testing.assert_array_equal(fast(x, np.int64([4, 3]))[0], x.reshape(4, 3))
    assert str(fast.outputs[0]) == "y: f32[4,3]"
    for shape in ([3, 4], [-1, 2], [12, 1]):
        check_against_ort(proto, {"x": x, "shape": np.int64(shape)})
        assert m(x, np.int64(shape))[0].shape == x.reshape(shape).shape
    assert "reshape" in cuvil.inspect_ir(m)


def test_data_inputs_are_never_specialized_on():
    proto = model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                  [("x", F32, [2, 6]), ("shape", I64, ["n"])], [("y", F32, None)])
    with pytest.raises(cuvil.UnsupportedError, match="depends on the values of 'shape'"):
        cuvil.load_onnx(proto)


@pytest.mark.parametrize("elem,dtype", [(onnx.TensorProto.UINT16, np.uint16), (onnx.TensorProto.UINT32, np.uint32)])
def test_unsigned_types_are_carried_and_wrap(elem, dtype):
    proto = model([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Less", ["s", "a"], ["lt"])],
                  [("a", elem, [3]), ("b", elem, [3])], [("s", elem, [3]), ("lt", onnx.TensorProto.BOOL, [3])])
    top = np.iinfo(dtype).max
    a, b = np.array([1, top, 7], dtype), np.array([2, 3, 0], dtype)
    s, lt = check_against_ort(proto, {"a": a, "b": b})
    assert s.dtype == dtype and s.tolist() == [3, 2, 7] and lt.tolist() == [False, True, False]


def test_float8_cast_rounds_to_the_format():
    import ml_dtypes

    proto = model([helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT8E4M3FN)],
                  [("x", F32, [6])], [("y", onnx.TensorProto.FLOAT8E4M3FN, [6])], opset=21)
    x = np.float32([0.3, -1.06, 500, np.inf, np.nan, 1e-9])
    (y,) = cuvil.load_onnx(proto)(x)
    assert y.dtype == ml_dtypes.float8_e4m3fn
    want = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(y.astype(np.float32), want.astype(np.float32))


def test_initializers_of_carried_types_keep_their_type():
    import ml_dtypes

    weights = np.array([-8, -1, 0, 7], ml_dtypes.int4)
    proto = model([helper.make_node("DequantizeLinear", ["w", "scale"], ["y"])], [("scale", F32, [])],
                  [("y", F32, [4])], [("w", weights)], opset=21)
    (y,) = cuvil.load_onnx(proto)(np.float32(0.5))
    np.testing.assert_array_equal(y, [-4, -0.5, 0, 3.5])
