"""GridSample (any number of spatial dims; nearest, linear and cubic; zeros, border and reflection padding):
per-dim source coordinates and tap weights computed elementwise, then one gather from the flattened input per
combination of taps, weighted and summed."""
from __future__ import annotations

import itertools
import math

from ...ir.dtypes import DType
from .registry import converter

_CUBIC_A = -0.75
_MODES = {"bilinear": "linear", "bicubic": "cubic"}  # opset 16 names


def _reflect(c, v, lo: float, hi: float):
    """Fold a coordinate back into [lo, hi] by reflecting at the borders as often as needed."""
    b = c.b
    span = hi - lo
    if span <= 0:
        return c.scalar_like(lo, v)
    below, above = b.lt(v, c.scalar_like(lo, v)), b.gt(v, c.scalar_like(hi, v))
    dist = b.where(below, b.sub(c.scalar_like(lo, v), v), b.sub(v, c.scalar_like(hi, v)))
    turns = b.floor(b.div(dist, c.scalar_like(span, v)))
    rest = b.sub(dist, b.mul(turns, c.scalar_like(span, v)))
    even = b.eq(b.mod(turns, c.scalar_like(2, v)), c.scalar_like(0, v))
    from_lo, from_hi = b.add(c.scalar_like(lo, v), rest), b.sub(c.scalar_like(hi, v), rest)
    folded = b.where(below, b.where(even, from_lo, from_hi), b.where(even, from_hi, from_lo))
    return b.where(b.emit("or", below, above), folded, v)


def _source_coord(c, g, size: int, align: bool, padding: str, nearest: bool):
    """A normalized grid coordinate in [-1, 1] as a position along a dim of `size`, with padding applied."""
    b = c.b
    if align:
        x = b.mul(b.div(b.add(g, c.scalar_like(1, g)), c.scalar_like(2, g)), c.scalar_like(size - 1, g))
    else:
        x = b.div(b.sub(b.mul(b.add(g, c.scalar_like(1, g)), c.scalar_like(size, g)), c.scalar_like(1, g)),
                  c.scalar_like(2, g))
    if nearest:
        x = b.round(x)
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    outside = b.emit("or", b.lt(x, c.scalar_like(lo, x)), b.gt(x, c.scalar_like(hi, x)))
    if padding == "border":
        return b.where(outside, b.clip(x, min=0.0, max=float(size - 1)), x)
    if padding == "reflection":
        return _reflect(c, x, lo, hi)
    return x


def _tap_index(c, i, size: int, align: bool, padding: str):
    """(an in-bounds i64 index, or a mask of taps that read zeros) for an integer tap position."""
    b = c.b
    if padding == "border":
        return c.cast(b.clip(i, min=0.0, max=float(size - 1)), DType.i64), None
    if padding == "reflection":
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        return c.cast(_reflect(c, i, lo, hi), DType.i64), None
    inside = b.emit("and", b.ge(i, c.scalar_like(0, i)), b.le(i, c.scalar_like(size - 1, i)))
    return c.cast(b.clip(i, min=0.0, max=float(size - 1)), DType.i64), inside


def _cubic_weights(c, t) -> list:
    """Keys' cubic convolution weights of the taps floor-1 .. floor+2 for a fraction t in [0, 1)."""
    def poly(coeffs, u):
        out = c.scalar_like(coeffs[0], u)
        for k in coeffs[1:]:
            out = c.b.add(c.b.mul(out, u), c.scalar_like(k, u))
        return out
    a = _CUBIC_A
    near, far = (a + 2, -(a + 3), 0.0, 1.0), (a, -5 * a, 8 * a, -4 * a)
    one, two = c.scalar_like(1, t), c.scalar_like(2, t)
    return [poly(far, c.b.add(t, one)), poly(near, t), poly(near, c.b.sub(one, t)), poly(far, c.b.sub(two, t))]


def _taps(c, x, mode: str) -> list:
    """(integer position, weight) per tap along one dim."""
    b = c.b
    if mode == "nearest":
        return [(x, None)]
    base = b.floor(x)
    t = b.sub(x, base)
    if mode == "linear":
        return [(base, b.sub(c.scalar_like(1, t), t)), (b.add(base, c.scalar_like(1, base)), t)]
    return [(b.add(base, c.scalar_like(k, base)), w) for k, w in zip((-1, 0, 1, 2), _cubic_weights(c, t))]


@converter("GridSample")
def grid_sample(ctx):
    x, grid = ctx.x(0), ctx.cast(ctx.x(1), ctx.type(0).dtype)
    mode = _MODES.get(ctx.attr("mode", "linear"), ctx.attr("mode", "linear"))
    padding, align = ctx.attr("padding_mode", "zeros"), bool(ctx.attr("align_corners", 0))
    n, ch, *sizes = x.type.shape
    if not all(isinstance(s, int) for s in sizes):
        raise ctx.unsupported("GridSample needs static spatial sizes")
    r = len(sizes)
    out_pos = grid.type.shape[1:-1]
    count = math.prod(out_pos, start=1)
    comps = [ctx.b.reshape(ctx.b.slice(grid, starts=(r - 1 - d,), ends=(r - d,), axes=(grid.type.rank - 1,)),
                           shape=(n, 1, count)) for d in range(r)]
    coords = [_source_coord(ctx, g, s, align, padding, mode == "nearest") for g, s in zip(comps, sizes)]
    flat = ctx.b.reshape(x, shape=(n, ch, math.prod(sizes)))
    total = None
    for combo in itertools.product(*[_taps(ctx, v, mode) for v in coords]):
        index, weight = None, None
        for d, (pos, w) in enumerate(combo):
            i, inside = _tap_index(ctx, pos, sizes[d], align, padding)
            stride = math.prod(sizes[d + 1:], start=1)
            i = ctx.b.mul(i, ctx.scalar_like(stride, i)) if stride != 1 else i
            index = i if index is None else ctx.b.add(index, i)
            w = w if inside is None else (ctx.b.cast(inside, dtype=x.type.dtype) if w is None else
                                          ctx.b.where(inside, w, ctx.scalar_like(0, w)))
            weight = w if weight is None else (weight if w is None else ctx.b.mul(weight, w))
        picked = ctx.b.gather_elements(flat, ctx.expand(index, (n, ch, count)), axis=2)
        term = picked if weight is None else ctx.b.mul(picked, ctx.expand(weight, picked.type.shape))
        total = term if total is None else ctx.b.add(total, term)
    return [ctx.b.reshape(total, shape=(n, ch, *out_pos))]
