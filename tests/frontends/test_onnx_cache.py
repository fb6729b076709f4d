"""The artifact cache for ONNX models whose weights lie in external data files (`torch.onnx.export`'s default):
they hit it like single-file models, and the key follows the data files' contents, not only the model file's."""
from __future__ import annotations

import os

import numpy as np
import pytest

import cuvil
from cuvil.frontends.onnx_cache import CompiledOnnxModel, LazyOnnxModel

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "1")
    return tmp_path / "cache"


def _save_external(folder, w: np.ndarray):
    """y = relu(x @ w) with w in `mlp.onnx.data` beside `mlp.onnx`."""
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", w.shape[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", w.shape[1]])],
                              [numpy_helper.from_array(w, "w")])
    path, data = folder / "mlp.onnx", folder / "mlp.onnx.data"
    data.unlink(missing_ok=True)  # onnx.save appends to an existing data file
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path, save_as_external_data=True,
              all_tensors_to_one_file=True, location="mlp.onnx.data", size_threshold=0)
    assert data.stat().st_size == w.nbytes
    return path


def test_external_data_models_hit_the_cache(cache, tmp_path, monkeypatch):
    w = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    path = _save_external(tmp_path, w)
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    cold = cuvil.load_onnx(path).optimize()
    assert cold.executable.cache == "miss"
    from cuvil.frontends.onnx import loader

    def fail(*args, **kwargs):
        raise AssertionError("a warm start converted the model")

    with monkeypatch.context() as m:
        m.setattr(loader, "convert_model", fail)
        lazy = cuvil.load_onnx(str(path))
        assert isinstance(lazy, LazyOnnxModel)
        warm = lazy.optimize()
    assert isinstance(warm, CompiledOnnxModel) and warm.executable.cache == "hit"
    np.testing.assert_allclose(warm(x)[0], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)


def test_new_weights_in_the_data_file_are_a_miss(cache, tmp_path):
    """The model file is unchanged; only its data file gets other weights: the old code must not answer."""
    rng = np.random.default_rng(2)
    w1, w2 = (rng.standard_normal((6, 5)).astype(np.float32) for _ in range(2))
    path = _save_external(tmp_path, w1)
    model_bytes = path.read_bytes()
    x = np.ones((2, 6), np.float32)
    assert cuvil.load_onnx(path).optimize().executable.cache == "miss"
    assert cuvil.load_onnx(path).optimize().executable.cache == "hit"
    _save_external(tmp_path, w2)
    assert path.read_bytes() == model_bytes
    fresh = cuvil.load_onnx(path).optimize()
    assert fresh.executable.cache == "miss"
    np.testing.assert_allclose(fresh(x)[0], np.maximum(x @ w2, 0), rtol=1e-5, atol=1e-6)


def test_a_missing_data_file_is_named(cache, tmp_path):
    path = _save_external(tmp_path, np.ones((6, 5), np.float32))
    cuvil.load_onnx(path).optimize()
    os.remove(tmp_path / "mlp.onnx.data")
    with pytest.raises(cuvil.SerializationError, match="mlp.onnx.data"):
        cuvil.load_onnx(path)


def test_sequence_outputs_stay_lists_on_a_second_load(cache):
    """The cache's route keeps tensor outputs only, so a model with a sequence output takes the uncached path."""
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], [seq])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(2):
        got = cuvil.load_onnx(data).optimize()(x)[0]
        assert isinstance(got, list) and len(got) == 2
        np.testing.assert_array_equal(got[1], x[1:])


def test_a_single_file_model_with_large_weights_lists_no_data_file(cache, tmp_path):
    """With `mmap=True` its weights are mapped from the model file (frontends/onnx/mapped.py): the file is not a data
    file of its own."""
    w = np.random.default_rng(3).standard_normal((64, 32)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])],
                              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = np.ones((2, 64), np.float32)
    assert cuvil.load_onnx(path, mmap=True).optimize().executable.cache == "miss"
    assert [m.read_text() for m in (cache / "artifacts" / "onnx").glob("*.ok")] == [""]
    warm = cuvil.load_onnx(path, mmap=True).optimize()
    assert warm.executable.cache == "hit"
    np.testing.assert_allclose(warm(x)[0], x @ w, rtol=1e-5, atol=1e-5)
