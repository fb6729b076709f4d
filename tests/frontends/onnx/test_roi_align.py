"""RoiAlign against ONNX Runtime: both modes and coordinate transforms, regions partly or wholly off the map,
a spatial scale, several images and channels, interpreted and compiled; what it refuses, named."""
from __future__ import annotations

import numpy as np
import pytest

import cuvil

from .helpers import I64, F32, helper, model, run_ort

ROIS = np.float32([[0, 0, 9, 9], [1.5, 2.25, 6.5, 8], [-3, -2, 4, 3], [7, 7, 14, 12], [5, 5, 5.2, 5.1],
                   [20, 20, 30, 30]])
BATCH = np.int64([0, 1, 1, 0, 1, 0])


def _roi_model(x_shape, **attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    return model([node], [("x", F32, list(x_shape)), ("rois", F32, [None, 4]), ("batch", I64, [None])],
                 [("y", F32, None)], opset=16)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio, scale, out", [(2, 1.0, (3, 4)), (1, 0.5, (2, 2)), (3, 1.25, (1, 5))])
def test_matches_onnx_runtime(mode, transform, ratio, scale, out):
    x = np.random.default_rng(ratio).standard_normal((2, 3, 10, 11)).astype(np.float32)
    proto = _roi_model(x.shape, mode=mode, coordinate_transformation_mode=transform, sampling_ratio=ratio,
                       spatial_scale=scale, output_height=out[0], output_width=out[1])
    (want,) = run_ort(proto, {"x": x, "rois": ROIS, "batch": BATCH})
    loaded = cuvil.load_onnx(proto)
    for (got,) in (loaded(x, ROIS, BATCH), loaded.optimize()(x, ROIS, BATCH)):
        assert got.shape == want.shape == (len(ROIS), 3, *out)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_adaptive_sampling_is_refused_clearly():
    with pytest.raises(cuvil.errors.UnsupportedError, match="sampling_ratio=0"):
        cuvil.load_onnx(_roi_model((1, 1, 4, 4)))


@pytest.mark.parametrize("index", [3, -1])
def test_a_batch_index_outside_the_images_is_an_error_not_a_read(index):
    loaded = cuvil.load_onnx(_roi_model((1, 1, 4, 4), sampling_ratio=1))
    for fn in (loaded, loaded.optimize()):
        with pytest.raises(cuvil.errors.IndexRangeError):
            fn(np.zeros((1, 1, 4, 4), np.float32), ROIS[:1], np.int64([index]))
