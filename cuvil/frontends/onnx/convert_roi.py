"""RoiAlign and DeformConv: bilinear samples gathered from the flattened input, as ONNX's reference computes them.

RoiAlign (a fixed sampling_ratio): per region, the samples of each output bin (sampling_ratio^2 of them) averaged
or maxed. The sample positions along y and along x are computed elementwise from the regions (in f64), each with
its two taps, their weights and whether it lies within one pixel of the map (a sample outside reads 0); the four
taps' values come from one gather each. DeformConv: each kernel tap's sample, moved by its offset, into columns
for one grouped matmul.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from .registry import converter


def _axis_taps(ctx, start, bin_size, bins: int, grid: int, size: int) -> tuple:
    """Along one axis, for [regions, bins * grid] samples: (low tap, high tap, low weight, high weight, inside)."""
    b = ctx.b
    frac = (np.arange(bins)[:, None] + (np.arange(grid)[None, :] + 0.5) / grid).reshape(1, -1)
    shape = (start.type.shape[0], bins * grid)
    c = b.add(ctx.expand(start, shape), b.mul(ctx.expand(bin_size, shape), ctx.expand(ctx.const(frac), shape)))
    inside = b.emit("and", b.ge(c, ctx.scalar_like(-1.0, c)), b.le(c, ctx.scalar_like(float(size), c)))
    c = b.max(c, ctx.scalar_like(0.0, c))
    low = b.floor(c)
    edge = b.ge(low, ctx.scalar_like(size - 1.0, low))
    low = b.where(edge, ctx.scalar_like(size - 1.0, low), low)
    high = b.where(edge, low, b.add(low, ctx.scalar_like(1.0, low)))
    frac_high = b.sub(b.where(edge, low, c), low)
    return (ctx.cast(low, DType.i64), ctx.cast(high, DType.i64), b.sub(ctx.scalar_like(1.0, frac_high), frac_high),
            frac_high, inside)


@converter("RoiAlign")
def roi_align(ctx):
    x, b = ctx.x(0), ctx.b
    n, ch, h, w = x.type.shape
    grid, mode = ctx.attr("sampling_ratio", 0), ctx.attr("mode", "avg")
    ph, pw = ctx.attr("output_height", 1), ctx.attr("output_width", 1)
    if not (isinstance(h, int) and isinstance(w, int)):
        raise ctx.unsupported("needs static spatial sizes")
    if grid <= 0:
        raise ctx.unsupported("sampling_ratio=0 (samples per bin from each region's size, a data-dependent count) "
                              "is not supported; give a sampling_ratio")
    if mode not in ("avg", "max"):
        raise ctx.error(f"mode must be 'avg' or 'max', got {mode!r}")
    half = ctx.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel" if ctx.opset >= 16 else False
    rois = ctx.cast(ctx.x(1), DType.f64)
    regions = rois.type.shape[0]
    scale = ctx.attr("spatial_scale", 1.0)

    def column(i):
        v = ctx.reshape(b.slice(rois, starts=(i,), ends=(i + 1,), axes=(1,)), (regions, 1))
        return b.sub(b.mul(v, ctx.scalar_like(scale, v)), ctx.scalar_like(0.5 if half else 0.0, v))
    x1, y1, x2, y2 = (column(i) for i in range(4))
    taps = []
    for lo, hi, bins, size in ((y1, y2, ph, h), (x1, x2, pw, w)):
        extent = b.sub(hi, lo)
        extent = extent if half else b.max(extent, ctx.scalar_like(1.0, extent))  # malformed regions: 1x1
        taps.append(_axis_taps(ctx, lo, b.div(extent, ctx.scalar_like(float(bins), extent)), bins, grid, size))
    (ylo, yhi, wylo, wyhi, yin), (xlo, xhi, wxlo, wxhi, xin) = taps
    out = (regions, ch, ph * grid, pw * grid)

    def rows(v):
        return ctx.expand(ctx.reshape(v, (regions, 1, ph * grid, 1)), out)

    def cols(v):
        return ctx.expand(ctx.reshape(v, (regions, 1, 1, pw * grid)), out)
    planes = (regions, ch, 1, 1)
    batch = ctx.expand(ctx.reshape(ctx.cast(ctx.x(2), DType.i64), (regions, 1, 1, 1)), planes)
    channel = ctx.expand(ctx.const(np.arange(ch, dtype=np.int64).reshape(1, ch, 1, 1)), planes)
    plane = b.add(b.mul(batch, ctx.scalar_like(ch, batch)), channel)  # index of the region's (image, channel)
    base = ctx.expand(b.mul(plane, ctx.scalar_like(h * w, plane)), out)
    flat = ctx.reshape(ctx.cast(x, DType.f64), (n * ch * h * w,))
    inside = ctx.cast(b.emit("and", rows(yin), cols(xin)), DType.f64)
    terms = []
    for yi, wy in ((ylo, wylo), (yhi, wyhi)):
        for xi, wx in ((xlo, wxlo), (xhi, wxhi)):
            at = b.add(base, b.add(b.mul(rows(yi), ctx.scalar_like(w, rows(yi))), cols(xi)))
            weight = b.mul(b.mul(rows(wy), cols(wx)), inside)
            terms.append(b.mul(b.gather(flat, at, axis=0, negative=False), weight))  # a bad batch index: an error
    samples = (regions, ch, ph, grid, pw, grid)
    if mode == "avg":
        total = ctx.reshape(b.add(b.add(terms[0], terms[1]), b.add(terms[2], terms[3])), samples)
        pooled = b.reduce_sum(total, axes=(3, 5), keepdims=False)
        pooled = b.div(pooled, ctx.scalar_like(float(grid * grid), pooled))
    else:  # ONNX's max mode: the largest weighted tap of any sample
        best = ctx.reshape(b.max(b.max(terms[0], terms[1]), b.max(terms[2], terms[3])), samples)
        pooled = b.reduce_max(best, axes=(3, 5), keepdims=False)
    return [ctx.cast(pooled, x.type.dtype)]


def _bilinear_taps(ctx, c, size: int) -> list:
    """(clamped i64 tap, weight that is 0 for a tap off the map) for the two taps around each coordinate."""
    b = ctx.b
    low = b.floor(c)
    frac = b.sub(c, low)
    taps = []
    for pos, weight in ((low, b.sub(ctx.scalar_like(1.0, frac), frac)), (b.add(low, ctx.scalar_like(1.0, low)), frac)):
        inside = b.emit("and", b.ge(pos, ctx.scalar_like(0.0, pos)), b.le(pos, ctx.scalar_like(size - 1.0, pos)))
        clamped = ctx.cast(b.clip(pos, min=0.0, max=size - 1.0), DType.i64)
        taps.append((clamped, b.where(inside, weight, ctx.scalar_like(0.0, weight))))
    return taps


@converter("DeformConv")
def deform_conv(ctx):
    """Conv whose kernel taps move by learned offsets: each tap's bilinear sample (zeros off the map, scaled by
    the mask) gathered per input channel into columns [N, C * k, positions], then one grouped matmul."""
    x, w, b = ctx.cast(ctx.x(0), DType.f64), ctx.cast(ctx.x(1), DType.f64), ctx.b
    if x.type.rank != 4 or not all(isinstance(d, int) for d in x.type.shape + w.type.shape):
        raise ctx.unsupported(f"needs a static 2-D input [N, C, H, W], got {x.type}")
    n, ch, h, wd = x.type.shape
    oc, cg, kh, kw = w.type.shape
    group, og = ctx.attr("group", 1), ctx.attr("offset_group", 1)
    (sh, sw), (dh, dw) = ctx.attr("strides", [1, 1]), ctx.attr("dilations", [1, 1])
    top, left = ctx.attr("pads", [0, 0, 0, 0])[:2]
    offset = ctx.cast(ctx.x(2), DType.f64)
    oh, ow = offset.type.shape[2:]
    k = kh * kw
    if ch != cg * group or oc % group or ch % og or tuple(offset.type.shape[:2]) != (n, og * k * 2):
        raise ctx.error(f"inconsistent shapes: x {x.type}, W {w.type}, offset {offset.type} for group {group} and "
                        f"offset_group {og}")
    grid = (n, og, k, oh, ow)
    parts = ctx.reshape(offset, (n, og, k, 2, oh, ow))
    coords = []
    for axis, (stride, dil, pad, size) in enumerate(((sh, dh, top, h), (sw, dw, left, wd))):
        out_pos = np.arange(oh if axis == 0 else ow) * stride - pad
        tap = (np.arange(kh)[:, None] * dil if axis == 0 else np.arange(kw)[None, :] * dil) * np.ones((kh, kw))
        base = tap.reshape(1, 1, k, 1, 1) + (out_pos.reshape(1, 1, 1, -1, 1) if axis == 0 else
                                              out_pos.reshape(1, 1, 1, 1, -1))
        moved = ctx.reshape(b.slice(parts, starts=(axis,), ends=(axis + 1,), axes=(3,)), grid)
        coords.append(_bilinear_taps(ctx, b.add(moved, ctx.expand(ctx.const(base), grid)), size))
    mask = ctx.reshape(ctx.cast(ctx.x(4), DType.f64), grid) if ctx.has(4) else None
    cols_shape = (n, og, ch // og, k, oh, ow)

    def per_channel(v):
        return ctx.reshape(ctx.expand(ctx.reshape(v, (n, og, 1, k, oh, ow)), cols_shape), (n, ch, k, oh, ow))
    plane = np.arange(n * ch, dtype=np.int64).reshape(n, ch, 1, 1, 1) * (h * wd)
    flat = ctx.reshape(x, (n * ch * h * wd,))
    cols = None
    for yi, wy in coords[0]:
        for xi, wx in coords[1]:
            at = b.add(ctx.expand(ctx.const(plane), (n, ch, k, oh, ow)),
                       per_channel(b.add(b.mul(yi, ctx.scalar_like(wd, yi)), xi)))
            weight = b.mul(wy, wx) if mask is None else b.mul(b.mul(wy, wx), mask)
            term = b.mul(b.gather(flat, at, axis=0), per_channel(weight))
            cols = term if cols is None else b.add(cols, term)
    cols = ctx.reshape(cols, (n, group, cg * k, oh * ow))
    kernel = ctx.expand(ctx.reshape(w, (1, group, oc // group, cg * k)), (n, group, oc // group, cg * k))
    y = ctx.reshape(b.matmul(kernel, cols), (n, oc, oh, ow))
    if ctx.has(3):
        y = b.add(y, ctx.expand(ctx.reshape(ctx.cast(ctx.x(3), DType.f64), (1, oc, 1, 1)), y.type.shape))
    return [ctx.cast(y, ctx.type(0).dtype)]
