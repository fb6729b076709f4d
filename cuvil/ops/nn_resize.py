"""`resize`: ONNX Resize to a given output shape (nearest, linear or cubic; no antialias, no crop-and-resize).

Every mode is separable, so the reference resizes one axis at a time: nearest gathers source indices, linear
and cubic multiply by an [out, in] interpolation matrix. Coordinates follow the ONNX formulas; neighbours
outside the input take the edge value (or, with exclude_outside, drop out and the weights renormalise).
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from .registry import Attr, register_op

_CUBIC_TAPS = 4


def _coords(n_in, n_out, scale, mode):
    """The source coordinate of every output index along one axis."""
    x = np.arange(n_out, dtype=np.float64)
    if mode == "align_corners":
        return x * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    if mode == "pytorch_half_pixel" and n_out == 1:
        return np.zeros(n_out)
    offset = 0.0
    if mode == "half_pixel_symmetric":  # centre the sampled region when n_out != n_in * scale
        offset = n_in / 2 * (1 - n_out / (scale * n_in))
    return offset + (x + 0.5) / scale - 0.5


_NEAREST = {"round_prefer_floor": lambda c: np.ceil(c - 0.5), "round_prefer_ceil": lambda c: np.floor(c + 0.5),
            "floor": np.floor, "ceil": np.ceil}


def _linear_taps(ratio, a):
    return np.stack([1 - ratio, ratio], axis=1)


def _cubic_taps(ratio, a):
    """Keys' cubic convolution weights for the 4 neighbours floor(x)-1 .. floor(x)+2."""
    def near(t):  # |t| <= 1
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t):  # 1 < |t| < 2
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.stack([far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)], axis=1)


_TAPS = {"linear": (2, _linear_taps), "cubic": (_CUBIC_TAPS, _cubic_taps)}


def _interp_matrix(coords, n_in, attrs):
    """[out, in] weights. The left neighbour is the one below x (x - 1 when x is whole, as ONNX picks), so the
    ratio lies in (0, 1]."""
    count, taps = _TAPS[attrs["mode"]]
    left = np.ceil(coords) - 1
    weights = taps(coords - left, attrs["cubic_coeff_a"])
    idx = left[:, None].astype(np.int64) + np.arange(count) - (count // 2 - 1)
    if attrs["exclude_outside"]:
        weights = np.where((idx >= 0) & (idx < n_in), weights, 0.0)
        weights /= weights.sum(axis=1, keepdims=True)
    out = np.zeros((len(coords), n_in))
    np.add.at(out, (np.arange(len(coords))[:, None], np.clip(idx, 0, n_in - 1)), weights)
    return out


def nearest_indices(n_in: int, n_out: int, scale: float, attrs) -> np.ndarray:
    """The source index of every output index along one axis of a nearest resize."""
    coords = _coords(n_in, n_out, scale, attrs["coordinate_transformation_mode"])
    return np.clip(_NEAREST[attrs["nearest_mode"]](coords), 0, n_in - 1).astype(np.int64)


def resized(n_in, n_out, scale) -> bool:
    """Whether the reference resamples an axis: a new size, or a scale other than 1."""
    return n_out != n_in or scale not in (None, 1.0)


def _resize_axis(y, axis, n_out, scale, attrs):
    n_in = y.shape[axis]
    if attrs["mode"] == "nearest":
        return np.take(y, nearest_indices(n_in, n_out, scale, attrs), axis=axis)
    coords = _coords(n_in, n_out, scale, attrs["coordinate_transformation_mode"])
    return np.moveaxis(np.tensordot(_interp_matrix(coords, n_in, attrs), y, axes=([1], [axis])), 0, axis)


def _ref_resize(xs, attrs):
    x = xs[0]
    y = x if attrs["mode"] == "nearest" else x.astype(np.float64)
    for axis, (n_in, n_out) in enumerate(zip(x.shape, attrs["sizes"])):
        scale = attrs["scales"][axis] if attrs["scales"] else None
        if resized(n_in, n_out, scale):
            y = _resize_axis(y, axis, n_out, scale or n_out / n_in, attrs)
    return y.astype(x.dtype)


def _resize_shape(ctx, types, a):
    x = types[0]
    if a["mode"] != "nearest" and not x.dtype.is_float:
        raise ctx.error(f"'resize' mode {a['mode']} needs a float x, got {x}")
    if x.dtype is DType.bool:
        raise ctx.error(f"'resize' does not accept {x}")
    if len(a["sizes"]) != x.rank:
        raise ctx.error(f"'resize' sizes {list(a['sizes'])} must give one size per dim of x {x}")
    if a["scales"] and (len(a["scales"]) != x.rank or min(a["scales"]) <= 0):
        raise ctx.error(f"'resize' scales {list(a['scales'])} must give one positive scale per dim of x {x}")
    for i, (n_in, n_out) in enumerate(zip(x.shape, a["sizes"])):
        if isinstance(n_out, int) and n_out < 1 or n_in == 0 and n_out != 0:
            raise ctx.error(f"'resize' cannot resize dim {i} of {x} to {n_out}")
        if n_in != n_out:  # a resized dim reads at least one input and writes at least one output
            what = f"'resize' of dim {i} of {x} to {n_out} needs"
            ctx.require_at_least(n_in, 1, f"{what} an input of {{rhs}} or more, got {{lhs}}")
            ctx.require_at_least(n_out, 1, f"{what} an output of {{rhs}} or more, got {{lhs}}")
    return [x.with_shape(a["sizes"])]


_COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric")
register_op("resize", shape=_resize_shape, reference=_ref_resize, attrs={
    "sizes": Attr("dims"),
    "scales": Attr("floats", ()),  # the scales ONNX was given, for its coordinate math; () means sizes / x's shape
    "mode": Attr("str", "nearest", ("nearest", "linear", "cubic")),
    "coordinate_transformation_mode": Attr("str", "half_pixel", _COORDS),
    "nearest_mode": Attr("str", "round_prefer_floor", tuple(_NEAREST)),
    "cubic_coeff_a": Attr("float", -0.75),
    "exclude_outside": Attr("bool", False)}, doc="ONNX Resize to the full output shape `sizes`")
