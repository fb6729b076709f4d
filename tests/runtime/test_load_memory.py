"""`cuvil.load` of a `.cuv` held in memory (bytes, a memoryview, a uint8 array: what Ray's object store hands a
worker): used in place when 64-byte aligned, copied into an aligned buffer otherwise, so that saved prepared
buffers (Winograd weights) and constants stay aligned views whatever address the caller's bytes start at."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import cuvil
from cuvil.backends.cpu.kernels import aligned_empty


@pytest.fixture(scope="module")
def winograd_cuv(tmp_path_factory):
    """A convolution whose Winograd-transformed weights are saved in the file's `prepared` section."""
    rng = np.random.default_rng(3)
    w, fc = rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1, rng.standard_normal((16, 5))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("ReduceMean", ["r"], ["m"], axes=[2, 3], keepdims=0),
         helper.make_node("MatMul", ["m", "fc"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc.astype(np.float32), "fc")])
    model = cuvil.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                            .SerializeToString()).optimize()
    path = tmp_path_factory.mktemp("memory") / "winograd.cuv"
    cuvil.export(model, path)
    x = np.random.default_rng(4).standard_normal((1, 16, 20, 20)).astype(np.float32)
    return path.read_bytes(), x, model(x)[0]


def _at_offset(data: bytes, offset: int) -> np.ndarray:
    """`data` in a uint8 array starting `offset` bytes past a 64-byte boundary."""
    raw = aligned_empty(len(data) + 64, np.uint8)
    view = raw[offset:offset + len(data)]
    view[:] = np.frombuffer(data, np.uint8)
    return view


@pytest.mark.parametrize("offset", [0, 1, 16, 32])
def test_load_from_memory_at_any_alignment(winograd_cuv, offset):
    data, x, expected = winograd_cuv
    buf = _at_offset(data, offset)
    art = cuvil.load(memoryview(buf))
    assert art.metadata["entries"]["main"]["prepared"], "the file should hold saved prepared buffers"
    np.testing.assert_array_equal(art(x), expected)
    consts, prepared = art.constants("main")
    stored = [a for a in [*consts.values(), *prepared.values()] if a is not None]  # None: a weight left out
    assert stored and all(a.ctypes.data % 64 == 0 for a in stored)
    assert np.shares_memory(prepared[0], buf) is (offset == 0)  # in place when aligned, else a copy


def test_load_from_a_uint8_array_and_from_bytes(winograd_cuv):
    data, x, expected = winograd_cuv
    np.testing.assert_array_equal(cuvil.load(_at_offset(data, 0))(x), expected)
    np.testing.assert_array_equal(cuvil.load(data)(x), expected)
