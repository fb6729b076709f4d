"""The bf16 convolution (conv_lowp.c) on every path this CPU has (AMX-BF16, AVX512_BF16, the portable widening
one), each forced in turn, against the conv_bf16 reference over test_conv_int8.py's geometries, with a residual."""
import numpy as np
import pytest

from cuvil.backends.cpu import kernels_conv_lowp as kc, kernels_lowp as kl
from cuvil.errors import ShapeError
from cuvil.ir.dtypes import DType
from cuvil.ops import get_op
from tests.quantize.test_conv_int8 import GEOMETRIES

PATHS = ("amx_bf16", "avx512_bf16", "generic")
RNG = np.random.default_rng(8)


def _layer(geom):
    shape, o, (kh, kw), strides, pads, dilations = geom
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal((o, shape[1], kh, kw)).astype(DType.bf16.numpy)
    bias = RNG.standard_normal(o).astype(np.float32)
    return x, w, bias, {"strides": strides, "pads": pads, "dilations": dilations}


def _check(got, want):
    # fp32 accumulation in another order (and vdpbf16ps's own rounding): relative to the output's size
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("geom", GEOMETRIES.values(), ids=GEOMETRIES.keys())
def test_every_path_matches_the_reference(path, geom):
    x, w, bias, attrs = _layer(geom)
    want = get_op("conv_bf16").reference([x, w, bias], {**attrs, "act": "relu"})
    with kl.use_path(path, 1):
        got = kc.conv_bf16(x, w, bias, act="relu", opt_level=1, **attrs)
    _check(got, want)


@pytest.mark.parametrize("path", PATHS)
def test_a_residual_is_added_before_the_relu(path):
    x, w, bias, attrs = _layer(GEOMETRIES["block-tails"])
    plain = get_op("conv_bf16").reference([x, w, bias], {**attrs, "act": "none"})
    res = RNG.standard_normal(plain.shape).astype(np.float32)
    with kl.use_path(path, 1):
        got = kc.conv_bf16(x, w, bias, act="relu", residual=res, opt_level=1, **attrs)
    _check(got, np.maximum(plain + res, 0))


@pytest.mark.parametrize("path", PATHS)
def test_an_unfolded_stem_keeps_infinities_out_of_the_padding_past_kw(path):
    """Unfolded (few channels), the pair of kx 6 and 7 of a 7-wide window reads a real pixel at kx 7: it must be
    written 0, since its weight 0 times an infinite pixel would give NaN."""
    x, w, bias, attrs = _layer(GEOMETRIES["unfolded-stem"])
    x[0, 1, 5, 9:12], x[1, 2, 20, 40] = np.inf, -np.inf
    want = get_op("conv_bf16").reference([x, w, bias], {**attrs, "act": "none"})
    with kl.use_path(path, 1):
        got = kc.conv_bf16(x, w, bias, opt_level=1, **attrs)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    _check(np.where(finite, got, 0), np.where(finite, want, 0))


@pytest.mark.parametrize("path", PATHS)
def test_the_unfolded_image_is_the_same_without_vbmi(path, monkeypatch):
    x, w, bias, attrs = _layer(GEOMETRIES["unfolded-stem"])
    with kl.use_path(path, 1):
        got = kc.conv_bf16(x, w, bias, opt_level=1, **attrs)
        monkeypatch.setenv("CUVIL_DISABLE_CPU_FEATURES", "avx512vbmi")
        np.testing.assert_array_equal(kc.conv_bf16(x, w, bias, opt_level=1, **attrs), got)


def test_bad_shapes_are_refused():
    x, w, bias, attrs = _layer(GEOMETRIES["1x1"])
    with pytest.raises(ShapeError, match="bias must have shape"):
        kc.conv_bf16(x, w, bias[:3], opt_level=1, **attrs)
    with pytest.raises(ShapeError, match="channels"):
        kc.conv_bf16(x[:, :4], w, bias, opt_level=1, **attrs)
