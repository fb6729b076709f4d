"""cuvil.quantize.compare: the figures are right on outputs whose differences are known."""
import numpy as np
import pytest

from cuvil.errors import ShapeError
from cuvil.quantize import compare

X = np.array([[3.0, -4.0], [0.0, 1.0]], np.float32)


def test_identical_models_have_no_error():
    (r,) = compare(lambda x: [x], lambda x: [x.copy()], (X,))
    assert (r.index, r.max_abs, r.max_rel, r.cosine) == (0, 0.0, 0.0, 1.0)


def test_known_differences():
    results = compare(lambda x: (x, 2 * x), lambda x: (x + 0.5, -2 * x), (X,))
    assert results[0].max_abs == 0.5 and results[0].max_rel == pytest.approx(0.5 / 4)
    assert results[1].cosine == pytest.approx(-1.0) and results[1].max_abs == 16.0


def test_zero_outputs_and_named_inputs():
    (r,) = compare(lambda x: np.zeros(2), lambda x: np.zeros(2), {"x": X})
    assert (r.max_rel, r.cosine) == (0.0, 1.0)
    (r,) = compare(lambda x: np.zeros(2), lambda x: np.ones(2), {"x": X})
    assert r.max_rel == np.inf and r.cosine == 0.0


def test_mismatched_outputs_are_named():
    with pytest.raises(ShapeError, match="1 and 2 outputs"):
        compare(lambda x: x, lambda x: (x, x), (X,))
    with pytest.raises(ShapeError, match="output 0 has shape"):
        compare(lambda x: x, lambda x: x.T[:1], (X,))
