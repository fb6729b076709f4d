"""TfIdfVectorizer on integer tokens against ONNX Runtime: each mode, unigrams to trigrams, skips, weights, a
batch and a single row, interpreted and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T

import cuvil

from .helpers import helper, model, run_ort

# unigrams 1, 2, 3; bigrams (1, 2), (2, 3), (3, 1); trigrams (1, 2, 3), (2, 2, 2)
POOL = dict(pool_int64s=[1, 2, 3, 1, 2, 2, 3, 3, 1, 1, 2, 3, 2, 2, 2], ngram_counts=[0, 3, 9],
            ngram_indexes=[7, 0, 1, 2, 3, 4, 5, 6], weights=[0.5, 1.0, 2.0, 0.25, 3.0, 1.5, 4.0, 0.75])


def _tfidf_model(shape, mode, lo, hi, skips, elem=T.INT64):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=lo, max_gram_length=hi,
                            max_skip_count=skips, **POOL)
    return model([node], [("x", elem, list(shape))], [("y", T.FLOAT, None)], opset=17)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("lo, hi, skips", [(1, 1, 0), (1, 3, 0), (2, 3, 2), (3, 3, 4)])
@pytest.mark.parametrize("shape", [(3, 17), (9,)])
def test_matches_onnx_runtime(mode, lo, hi, skips, shape):
    x = np.random.default_rng(lo + hi + skips).integers(0, 5, size=shape).astype(np.int64)
    proto = _tfidf_model(shape, mode, lo, hi, skips)
    (want,) = run_ort(proto, {"x": x})
    loaded = cuvil.load_onnx(proto)
    for (got,) in (loaded(x), loaded.optimize()(x)):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_int32_tokens():
    x = np.array([[1, 2, 3, 1, 2, 2, 2]], np.int32)
    proto = _tfidf_model(x.shape, "TF", 1, 3, 1, T.INT32)
    np.testing.assert_allclose(cuvil.load_onnx(proto)(x)[0], run_ort(proto, {"x": x})[0])


def test_a_pool_that_does_not_split_is_named():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=2,
                            max_skip_count=0, pool_int64s=[1, 2, 3], ngram_counts=[0, 2], ngram_indexes=[0, 1])
    with pytest.raises(cuvil.errors.CuvilError, match="whole n-grams"):
        cuvil.load_onnx(model([node], [("x", T.INT64, [4])], [("y", T.FLOAT, None)], opset=17))
