"""ONNX's random ops and training-mode Dropout, tested by statistics (mean, variance, histogram), by determinism
(same seed, same values; interpreted and compiled equal bit for bit) and by their range."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto as T

import cuvil

from .helpers import helper, model

N = 200_000


def _run_both(proto, *args, exact: bool = True):
    """Outputs of the interpreter and of compiled code: identical bit for bit, or (for Box-Muller's log and cos,
    which NumPy and libm round apart in the last place) within a few ulps."""
    loaded = cuvil.load_onnx(proto)
    interpreted, compiled = loaded(*args), loaded.optimize()(*args)
    for a, b in zip(interpreted, compiled):
        assert a.dtype == b.dtype and a.shape == b.shape
        if exact:
            assert a.tobytes() == b.tobytes()
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=0)
    return interpreted


def _node_model(op, inputs, outputs, opset=22, **attrs):
    return model([helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outputs], **attrs)], inputs, outputs,
                 opset=opset)


def _histogram_matches(x, cdf, edges, slack=0.01):
    """Each bin holds the share of draws the distribution's CDF gives it, within `slack`."""
    counts = np.histogram(x, bins=edges)[0] / x.size
    want = np.diff([cdf(e) for e in edges])
    assert np.abs(counts - want).max() < slack, (counts, want)


def test_uniform_statistics_and_range():
    proto = _node_model("RandomUniform", [], [("y", T.FLOAT, [N])], shape=[N], low=-1.0, high=3.0, seed=7.0)
    (y,) = _run_both(proto)
    assert y.dtype == np.float32 and y.min() >= -1.0 and y.max() < 3.0
    assert abs(y.mean() - 1.0) < 5 * 4 / math.sqrt(12 * N) and abs(y.var() - 16 / 12) < 0.02
    _histogram_matches(y, lambda e: (e + 1) / 4, np.linspace(-1, 3, 21))


def test_normal_statistics():
    proto = _node_model("RandomNormal", [], [("y", T.DOUBLE, [N // 4, 4])], shape=[N // 4, 4], mean=2.0, scale=0.5,
                        seed=3.0, dtype=T.DOUBLE)
    (y,) = _run_both(proto, exact=False)
    assert y.dtype == np.float64 and y.shape == (N // 4, 4)
    assert abs(y.mean() - 2.0) < 5 * 0.5 / math.sqrt(N) and abs(y.std() - 0.5) < 0.005
    _histogram_matches(y.ravel(), lambda e: 0.5 * (1 + math.erf((e - 2.0) / (0.5 * math.sqrt(2)))),
                       np.linspace(0.0, 4.0, 17))


def test_like_forms_take_shape_and_type_from_their_input():
    x = np.zeros((300, 200), np.float64)
    for op in ("RandomUniformLike", "RandomNormalLike"):
        proto = _node_model(op, [("x", T.DOUBLE, [300, 200])], [("y", T.DOUBLE, [300, 200])], seed=1.0)
        (y,) = _run_both(proto, x, exact=op == "RandomUniformLike")
        assert y.dtype == np.float64 and y.shape == x.shape and len(np.unique(y)) > 0.99 * y.size


def test_bernoulli_frequency_follows_each_probability():
    p = np.repeat(np.float32([0.0, 0.1, 0.5, 0.9, 1.0]), 20_000)
    proto = _node_model("Bernoulli", [("p", T.FLOAT, [p.size])], [("y", T.FLOAT, [p.size])], seed=5.0)
    (y,) = _run_both(proto, p)
    assert set(np.unique(y)) <= {0.0, 1.0}
    np.testing.assert_allclose(y.reshape(5, -1).mean(axis=1), [0.0, 0.1, 0.5, 0.9, 1.0], atol=0.01)


def test_multinomial_frequency_follows_the_softmax():
    logp = np.log(np.float32([[0.1, 0.2, 0.3, 0.4], [0.7, 0.0001, 0.2, 0.0999]]))
    proto = _node_model("Multinomial", [("x", T.FLOAT, [2, 4])], [("y", T.INT64, [2, 50_000])], sample_size=50_000,
                        seed=9.0, dtype=T.INT64)
    (y,) = _run_both(proto, logp)
    assert y.dtype == np.int64 and y.min() >= 0 and y.max() <= 3
    freq = np.stack([np.bincount(row, minlength=4) / row.size for row in y])
    np.testing.assert_allclose(freq, np.exp(logp), atol=0.01)


def test_training_dropout_keeps_one_minus_ratio_scaled():
    x = np.ones((400, 250), np.float32)
    proto = model([helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=11)],
                  [("x", T.FLOAT, [400, 250])], [("y", T.FLOAT, [400, 250]), ("m", T.BOOL, [400, 250])],
                  initializers=[("r", np.float32(0.3)), ("t", np.bool_(True))], opset=22)
    y, m = _run_both(proto, x)
    assert abs(m.mean() - 0.7) < 0.005
    np.testing.assert_allclose(y[m], 1 / 0.7, rtol=1e-6)
    assert (y[~m] == 0).all()


def test_a_seed_fixes_the_values_and_another_seed_changes_them():
    def draw(seed):
        return cuvil.load_onnx(_node_model("RandomUniform", [], [("y", T.FLOAT, [1000])], shape=[1000],
                                           seed=seed))()[0]
    assert (draw(1.0) == draw(1.0)).all() and (draw(1.0) != draw(2.0)).mean() > 0.99


def test_an_unseeded_node_is_repeatable_and_differs_from_its_neighbour():
    nodes = [helper.make_node("RandomNormal", [], [name], shape=[1000]) for name in ("a", "b")]
    proto = model(nodes, [], [("a", T.FLOAT, [1000]), ("b", T.FLOAT, [1000])], opset=22)
    a, b = _run_both(proto, exact=False)
    again = cuvil.load_onnx(proto)()
    assert (a == again[0]).all() and (a != b).mean() > 0.99


def test_integer_draws_are_refused_clearly():
    proto = _node_model("RandomUniform", [], [("y", T.INT32, [4])], shape=[4], dtype=T.INT32)
    with pytest.raises(cuvil.errors.CuvilError, match="RandomUniform"):
        cuvil.load_onnx(proto)
