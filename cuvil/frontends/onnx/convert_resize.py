"""Resize and Upsample: every opset's inputs and defaults mapped onto the IR's `resize`. What that op does not
cover (antialiasing, tf_crop_and_resize, align_corners with a fractional resized length) is spelled as one
interpolation matrix per axis, built at conversion time from ONNX's formulas and applied as a matmul."""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from .registry import converter

_DEFAULTS = {"coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
             "cubic_coeff_a": -0.75, "exclude_outside": 0}
_NEAREST = {"round_prefer_floor": lambda r: (r <= 0.5, r > 0.5),
            "round_prefer_ceil": lambda r: (r < 0.5, r >= 0.5),
            "floor": lambda r: (np.ones_like(r), np.zeros_like(r)),
            "ceil": lambda r: (np.zeros_like(r), np.ones_like(r))}


def _inputs(ctx) -> tuple:
    """(scales, sizes) as given, each None when absent; Upsample and Resize-10 give scales only."""
    if ctx.op_type == "Upsample" and ctx.opset < 9:
        return tuple(ctx.attr("scales")), None
    if ctx.op_type == "Upsample" or ctx.opset < 11:
        return ctx.floats(1, "scales"), None
    scales = ctx.floats(2, "scales") if ctx.has(2) and ctx.type(2).numel != 0 else None
    sizes = ctx.dims(3, "sizes") if ctx.has(3) and ctx.type(3).numel != 0 else None
    return scales, sizes


def _out_sizes(ctx, shape: tuple, scales, sizes, axes: list) -> tuple:
    """Full output sizes and the scales the coordinate formulas use (None: sizes / input sizes)."""
    if sizes is not None:
        wanted = dict(zip(axes, sizes))
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            return tuple(wanted.get(i, d) for i, d in enumerate(shape)), None
        pick = min if policy == "not_larger" else max
        scale = pick(wanted[a] / shape[a] for a in axes)
        full = [scale if i in wanted else 1.0 for i in range(len(shape))]
        return tuple(int(math.floor(d * s + 0.5)) if i in wanted else d for i, (d, s) in enumerate(zip(shape, full))), \
            tuple(full)
    given = dict(zip(axes, scales))
    full = tuple(given.get(i, 1.0) for i in range(len(shape)))
    out = []
    for d, s in zip(shape, full):
        if isinstance(d, int):
            out.append(int(math.floor(d * s)))
        elif float(s).is_integer():
            out.append(d * int(s))
        else:
            raise ctx.unsupported(f"scale {s} of a symbolic size does not give a size Cuvil can express")
    return tuple(out), full


def _attrs(ctx) -> dict:
    attrs = {k: ctx.attr(k, v) for k, v in _DEFAULTS.items()}
    mode = ctx.attr("mode", "nearest")
    attrs["mode"] = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    attrs["exclude_outside"] = bool(attrs["exclude_outside"])
    if ctx.op_type == "Upsample" or ctx.opset < 11:
        attrs["coordinate_transformation_mode"] = "asymmetric"
    if ctx.op_type == "Upsample":
        attrs["nearest_mode"] = "floor"
    return attrs


@converter("Resize", "Upsample")
def resize(ctx):
    x = ctx.x(0)
    scales, sizes = _inputs(ctx)
    if scales is None and sizes is None:
        raise ctx.error("needs scales or sizes")
    rank = x.type.rank
    axes = [a + rank if a < 0 else a for a in ctx.attr("axes", list(range(rank)))]
    out, used = _out_sizes(ctx, x.type.shape, scales, sizes, axes)
    attrs = _attrs(ctx)
    ctm = attrs["coordinate_transformation_mode"]
    fractional = ctm == "align_corners" and used and any(
        isinstance(d, int) and not float(d * s).is_integer() for d, s in zip(x.type.shape, used))
    antialias = bool(ctx.attr("antialias", 0)) and attrs["mode"] != "nearest"
    if antialias or ctm == "tf_crop_and_resize" or fractional:
        return [_by_matrices(ctx, x, out, used, attrs, antialias, axes)]
    return [ctx.b.resize(x, sizes=out, scales=used or (), **attrs)]


# -- the general path: one interpolation matrix per axis -------------------------------------------------------
def _source(ctm: str, y, scale: float, n_in: int, n_out: int, roi: tuple):
    """ONNX's source coordinate of output positions y (the resized length is n_in * scale, not rounded)."""
    length = scale * n_in
    if ctm == "align_corners":
        return np.zeros_like(y) if length == 1 else y * (n_in - 1) / (length - 1)
    if ctm == "asymmetric":
        return y / scale
    if ctm == "tf_crop_and_resize":
        lo, hi = roi
        span = (hi - lo) * (n_in - 1)
        return (np.full_like(y, span / 2) if length == 1 else y * span / (length - 1)) + lo * (n_in - 1)
    if ctm == "pytorch_half_pixel":
        return np.full_like(y, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    offset = n_in / 2 * (1 - n_out / length) if ctm == "half_pixel_symmetric" else 0.0
    return offset + (y + 0.5) / scale - 0.5


def _keys(t, a: float):
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _coeffs(ratio, scale: float, attrs: dict, antialias: bool):
    """Per output position, the weights of its taps (columns): the first tap is at ceil(x) - taps // 2."""
    mode, r = attrs["mode"], ratio[:, None]
    if mode == "nearest":  # a whole coordinate (ratio 1 by convention) takes its second tap, x itself
        picked = np.stack(_NEAREST[attrs["nearest_mode"]](ratio), axis=1).astype(np.float64)
        return np.where(ratio[:, None] == 1.0, np.array([[0.0, 1.0]]), picked)
    s = min(scale, 1.0) if antialias else 1.0
    start = int(np.floor(-(1 if mode == "linear" else 2) / s) + 1)
    offsets = np.arange(start, 2 - start)
    args = (offsets[None, :] - r) * s
    weights = np.clip(1 - np.abs(args), 0, 1) if mode == "linear" else _keys(args, attrs["cubic_coeff_a"])
    return weights / weights.sum(axis=1, keepdims=True) if antialias else weights


def axis_matrix(n_in: int, n_out: int, scale: float, attrs: dict, antialias: bool, roi: tuple) -> tuple:
    """([n_out, n_in] interpolation weights, [n_out] bools: outside the crop box) along one axis."""
    ctm = attrs["coordinate_transformation_mode"]
    x = _source(ctm, np.arange(n_out, dtype=np.float64), scale, n_in, n_out, roi)
    whole = np.floor(x) == x
    ratio = np.where(whole, 1.0, x - np.floor(x))
    weights = _coeffs(ratio, scale, attrs, antialias)
    taps = weights.shape[1]
    idx = np.ceil(x).astype(np.int64)[:, None] - taps // 2 + np.arange(taps)[None, :]
    if attrs["exclude_outside"]:
        weights = np.where((idx >= 0) & (idx < n_in), weights, 0.0)
        weights = weights / weights.sum(axis=1, keepdims=True)
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (np.arange(n_out)[:, None], np.clip(idx, 0, n_in - 1)), weights)
    outside = (x < 0) | (x > n_in - 1) if ctm == "tf_crop_and_resize" else None
    return matrix, outside


def _by_matrices(ctx, x, out: tuple, scales, attrs: dict, antialias: bool, axes: list):
    shape = x.type.shape
    if not all(isinstance(d, int) for d in shape):
        raise ctx.unsupported("this Resize (antialias, tf_crop_and_resize or fractional align_corners) needs static "
                              "shapes")
    scales = scales or tuple(o / d for o, d in zip(out, shape))
    roi = _roi(ctx, x.type.rank, axes)
    y, outside = ctx.cast(x, DType.f64), np.zeros(out, bool)
    for axis, (n_in, n_out, s) in enumerate(zip(shape, out, scales)):
        if n_in == n_out and s == 1.0 and roi[axis] == (0.0, 1.0):
            continue
        matrix, mask = axis_matrix(n_in, n_out, s, attrs, antialias, roi[axis])
        perm = tuple(i for i in range(len(shape)) if i != axis) + (axis,)
        moved = ctx.b.matmul(ctx.b.transpose(y, perm=perm), ctx.const(matrix.T))
        y = ctx.b.transpose(moved, perm=tuple(int(i) for i in np.argsort(perm)))
        if mask is not None:
            outside |= mask.reshape([-1 if i == axis else 1 for i in range(len(shape))])
    if outside.any():
        fill = ctx.scalar_like(ctx.attr("extrapolation_value", 0.0), y)
        y = ctx.b.where(ctx.const(outside), fill, y)
    return ctx.cast(y, x.type.dtype)


def _roi(ctx, rank: int, axes: list) -> list:
    """(start, end) per axis in normalized coordinates (tf_crop_and_resize); (0, 1) where there is none."""
    full = [(0.0, 1.0)] * rank
    if ctx.opset < 11 or not ctx.has(1) or ctx.type(1).numel == 0:
        return full
    roi = ctx.floats(1, "roi")
    k = len(roi) // 2
    for a, lo, hi in zip(axes if k == len(axes) else range(rank), roi[:k], roi[k:]):
        full[a] = (lo, hi)
    return full
