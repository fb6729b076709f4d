"""The calibration methods on known distributions: min-max keeps every value, percentile and entropy clip rare
outliers, and each range holds 0."""
import numpy as np
import pytest

from cuvil.quantize.calibrate import Observer, scale_and_zero

RNG = np.random.default_rng(0)


def _observed(values, method):
    obs = Observer(1)
    for v in values:
        obs.update([v])
    if method != "minmax":
        for v in values:
            obs.update_histogram([v])
    return obs.ranges(method)[0]


def _gaussian_with_outlier():
    batches = [RNG.standard_normal(20000).astype(np.float32) for _ in range(4)]
    batches[2][7] = 60.0
    return batches


def test_minmax_keeps_the_outlier():
    lo, hi = _observed(_gaussian_with_outlier(), "minmax")
    assert hi == 60.0 and lo < -3


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_percentile_and_entropy_clip_the_outlier(method):
    lo, hi = _observed(_gaussian_with_outlier(), method)
    assert 2.0 < hi < 10.0 and -10.0 < lo < -2.0, (lo, hi)


def test_ranges_hold_zero():
    lo, hi = _observed([np.array([2.0, 3.0], np.float32)], "minmax")
    assert (lo, hi) == (0.0, 3.0)
    assert scale_and_zero(0.0, 3.0) == (pytest.approx(3 / 255), 0)
    scale, zero = scale_and_zero(-1.0, 1.0)
    assert zero in (127, 128) and scale == pytest.approx(2 / 255)
    assert scale_and_zero(0.0, 0.0) == (1.0, 0)  # a constant-zero tensor still gets a usable scale


def test_a_second_calibration_reads_the_saved_ranges(tmp_path, monkeypatch):
    """Same module, same samples: the ranges come from CUVIL_CACHE_DIR/calibration, nothing runs."""
    from cuvil.ir import Builder, Module, TensorType
    from cuvil.ir.dtypes import DType
    from cuvil.quantize.calibrate import calibrate
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (2, 8))])
    h = b.relu(b.args[0])
    b.ret(b.matmul(h, b.constant(np.ones((8, 3), np.float32))))
    data = [(RNG.standard_normal((2, 8)).astype(np.float32),) for _ in range(3)]
    first = calibrate(m, [h], data, "percentile")
    assert list((tmp_path / "calibration").glob("*.json"))

    def refuse(module):
        raise AssertionError("recalibrated")
    assert calibrate(m, [h], data, "percentile", run=refuse) == first
    with pytest.raises(AssertionError, match="recalibrated"):  # other samples: calibrated again
        calibrate(m, [h], data[:2], "percentile", run=refuse)
