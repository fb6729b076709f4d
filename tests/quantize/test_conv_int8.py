"""The direct int8 convolution (conv_int8.c) on every code path this CPU has, each forced in turn: against the
qconv_i8 reference, and the paths against each other bit for bit (all are exact), over ResNet-like layers and the
shapes at the edges of its blocks (channels not a multiple of 4 or 8, outputs narrower than a vector, strides,
dilations, uneven pads, windows as large as the image, and channels in whole AMX tiles)."""
import numpy as np
import pytest

from cuvil.backends.cpu import kernels_int8 as k8
from cuvil.errors import ShapeError
from cuvil.ops import get_op

PATHS = [p for p in (4, 3, 2, 1, 0) if p <= k8.best_isa(1)]
RNG = np.random.default_rng(5)

# (x shape, out channels, kernel (kh, kw), strides, pads (top, left, bottom, right), dilations)
GEOMETRIES = {
    "1x1": ((1, 16, 8, 8), 40, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    "3x3-odd-channels": ((1, 5, 7, 10), 9, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3-stride2": ((2, 8, 9, 9), 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "1x1-stride2-downsample": ((1, 12, 7, 7), 24, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    "7x7-stem": ((1, 3, 20, 18), 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    "dilated": ((1, 6, 11, 9), 10, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    "dilated-strided": ((1, 4, 12, 13), 8, (3, 3), (2, 3), (1, 2, 2, 1), (2, 3)),
    "uneven": ((1, 7, 9, 7), 5, (2, 3), (2, 1), (1, 0, 1, 2), (1, 2)),
    "window-is-the-image": ((1, 9, 3, 3), 3, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),
    "one-pixel-padded": ((1, 4, 1, 1), 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "block-tails": ((1, 32, 13, 13), 17, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "resnet-layer4": ((1, 64, 7, 7), 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    # AMX (path 4) takes channels in whole tiles of 64: its layout, block of 16 output channels and 3 x 16 pixels
    "amx-3x3": ((1, 64, 9, 11), 40, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "amx-1x1-stride2": ((2, 128, 7, 9), 20, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    "amx-dilated-strided": ((1, 64, 12, 10), 16, (3, 3), (2, 2), (2, 1, 1, 2), (2, 1)),
    # few channels (C * KH * KW <= 256) run unfolded on AMX: groups of 4 kx, 16 pixels per byte permutation (VBMI)
    # where 16 pixels' windows fit in 64 bytes, else pixel by pixel; rows of whole vectors and a tail
    "unfolded-stem": ((2, 3, 41, 75), 24, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    "unfolded-wide-stride": ((1, 2, 13, 70), 12, (3, 5), (2, 4), (1, 2, 0, 1), (2, 2)),
}
UNFOLDED = ["7x7-stem", "3x3-odd-channels", "dilated-strided", "uneven", "unfolded-stem", "unfolded-wide-stride"]


def _layer(geom, **attrs):
    shape, o, (kh, kw), strides, pads, dilations = geom
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.integers(-127, 128, (o, shape[1], kh, kw)).astype(np.int8)
    ws, bias = (RNG.random(o) * 0.01).astype(np.float32), RNG.standard_normal(o).astype(np.float32)
    full = {"strides": strides, "pads": pads, "dilations": dilations, "x_scale": 0.0, "x_zero": 0, "act": "none",
            "out_scale": 0.0, "out_zero": 0, **attrs}
    return x, w, ws, bias, full


def _run_paths(x, w, ws, bias, attrs, **kw):
    outs = []
    for path in PATHS:
        with k8.isa(path, 1):
            outs.append(k8.qconv2d(x, w, ws, bias, opt_level=1, **attrs, **kw))
    for path, got in zip(PATHS[1:], outs[1:]):
        np.testing.assert_array_equal(got, outs[0], err_msg=f"path {path} differs from path {PATHS[0]}")
    return outs[0]


@pytest.mark.parametrize("geom", GEOMETRIES.values(), ids=GEOMETRIES.keys())
@pytest.mark.parametrize("mode", ["static-relu", "dynamic", "requantized"])
def test_every_path_matches_the_reference(geom, mode):
    attrs = {"static-relu": dict(x_scale=0.02, x_zero=128, act="relu"), "dynamic": {},
             "requantized": dict(x_scale=0.03, x_zero=100, act="relu", out_scale=0.2, out_zero=7)}[mode]
    x, w, ws, bias, full = _layer(geom, **attrs)
    want = get_op("qconv_i8").reference([x, w, ws, bias], full)
    got = _run_paths(x, w, ws, bias, full)
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype == np.uint8:
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # a rounding tie may fall either way
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", UNFOLDED)
@pytest.mark.parametrize("x_u8", [False, True])
def test_the_unfolded_image_gives_the_same_bits_with_and_without_vbmi(name, x_u8, monkeypatch):
    """The unfolded layout (AMX, few channels) gathered by byte permutations and pixel by pixel: the same bytes,
    so the same answer as the reference and every other path."""
    x, w, ws, bias, full = _layer(GEOMETRIES[name], x_scale=0.03, x_zero=100, act="relu", out_scale=0.2, out_zero=7)
    if x_u8:
        x = RNG.integers(0, 256, x.shape).astype(np.uint8)
    want = get_op("qconv_i8").reference([x, w, ws, bias], full)
    got = _run_paths(x, w, ws, bias, full)
    monkeypatch.setenv("CUVIL_DISABLE_CPU_FEATURES", "avx512vbmi")
    np.testing.assert_array_equal(_run_paths(x, w, ws, bias, full), got)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


@pytest.mark.parametrize("geom", [GEOMETRIES["3x3-stride2"], GEOMETRIES["block-tails"]], ids=["stride2", "tails"])
def test_uint8_in_and_out(geom):
    """An int8 tensor flowing from layer to layer: u8 in with its scale and zero point, u8 out."""
    x, w, ws, bias, full = _layer(geom, x_scale=0.05, x_zero=9, act="relu", out_scale=0.1, out_zero=3)
    xq = RNG.integers(0, 256, x.shape).astype(np.uint8)
    want = get_op("qconv_i8").reference([xq, w, ws, bias], full)
    assert np.abs(_run_paths(xq, w, ws, bias, full).astype(int) - want.astype(int)).max() <= 1


@pytest.mark.parametrize("act", ["none", "relu"])
def test_a_residual_is_added_before_the_activation(act):
    x, w, ws, bias, full = _layer(GEOMETRIES["3x3-odd-channels"], x_scale=0.02, x_zero=128)
    res = RNG.standard_normal((1, 9, 7, 10)).astype(np.float32)
    plain = get_op("qconv_i8").reference([x, w, ws, bias], full)
    want = np.maximum(plain + res, 0) if act == "relu" else plain + res
    got = _run_paths(x, w, ws, bias, {**full, "act": act}, residual=res)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_residual_of_the_wrong_shape_is_refused():
    x, w, ws, bias, full = _layer(GEOMETRIES["1x1"])
    with pytest.raises(ShapeError, match="residual must have shape"):
        k8.qconv2d(x, w, ws, bias, opt_level=1, **full, residual=np.zeros((1, 40, 8, 7), np.float32))


def _requantisation_cases(div):
    """Biases at and one ulp either side of every tie (k + 0.5) * div over the uint8 range, and the extremes."""
    ties = ((np.arange(-300, 300) + 0.5) * div).astype(np.float32)
    big = np.array([np.inf, -np.inf, 3e38, -3e38, 1e-40, -1e-40, 0.0, -0.0], np.float32)
    return np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf)), big])


@pytest.mark.parametrize("div", [0.1, 0.02486344799399376, 0.3])
def test_requantisation_divides_exactly_at_ties_and_extremes(div):
    """The uint8 epilogue multiplies by 1 / out_scale and corrects the quotient with an fma (no division): it must
    still round every value as rint(y / out_scale) does, at ties and for infinities, on every path."""
    bias = _requantisation_cases(np.float32(div))
    o = len(bias)
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "x_scale": 0.05, "x_zero": 3,
             "act": "none", "out_scale": div, "out_zero": 7}
    x = RNG.integers(0, 256, (1, 4, 3, 5)).astype(np.uint8)
    w, ws = np.zeros((o, 4, 1, 1), np.int8), np.ones(o, np.float32)  # y is the bias, exactly
    want = get_op("qconv_i8").reference([x, w, ws, bias], attrs)
    np.testing.assert_array_equal(_run_paths(x, w, ws, bias, attrs), want)
    for path in PATHS:
        with k8.isa(path, 1):
            got = k8.qlinear(x[0, :, 0].T, w[:, :, 0, 0], ws, bias, x_scale=0.05, x_zero=3, out_scale=div,
                             out_zero=7, opt_level=1)
        np.testing.assert_array_equal(got, np.broadcast_to(want[0, :, 0, 0], got.shape), err_msg=f"path {path}")
