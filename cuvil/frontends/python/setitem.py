"""`x[index] = value` as a functional update: the name is rebound to a new tensor equal to x with the indexed
part replaced, as NumPy and torch would leave x after the in-place assignment.

The index is taken apart axis by axis (ints, slices of any step, integer tensors, `...`): the part of x the
first indexed axis selects is updated recursively, then put back by a `concat` (unit steps) or a
`scatter_elements` (other steps, integer tensors). A boolean mask becomes a `where`. The value is cast to x's
dtype and broadcast to the shape of `x[index]`, as NumPy does.
"""
from __future__ import annotations


from ...errors import UnsupportedError
from ...ir.dtypes import DType
from ...ops.registry import get_op
from . import emit as E
from .emit import Context, tensor
from .indexing import BIG, expand_index, getitem, int_bounds, mask_of, slice_bounds
from .values import TV

_FULL = slice(None)


def setitem(cx: Context, x: TV, index, value) -> TV:
    """x with x[index] = value."""
    items = index if isinstance(index, tuple) else (index,)
    mask = mask_of(cx, index)
    if mask is not None:
        return masked_update(cx, x, mask, _mask_value(cx, x, mask, value))
    if any(i is None for i in items):
        raise UnsupportedError("None (np.newaxis) in the index of an assignment is not supported; leave it out")
    target = getitem(cx, x, index).shape
    v = E.to(cx, tensor(cx, value), x.dtype)
    if not _broadcasts(v.shape, target):
        raise UnsupportedError(f"could not broadcast a value of shape {list(v.shape)} into x[...] of shape "
                               f"{list(target)}")
    v = E.to(cx, v, shape=target)
    axis_items, kept = _kept_rank(cx, x, expand_index(cx, x, items), target)
    return _put(cx, x, axis_items, E.reshape(cx, v, kept))


def masked_update(cx: Context, x: TV, mask: TV, full_value) -> TV:
    """where(mask, value, x), the mask covering x's leading axes."""
    if mask.rank > x.rank or not _prefix(mask.shape, x.shape):
        raise UnsupportedError(f"a boolean mask of shape {list(mask.shape)} does not match the leading axes of a "
                               f"tensor of shape {list(x.shape)}")
    m = E.reshape(cx, mask, mask.shape + (1,) * (x.rank - mask.rank))
    return E.where(cx, m, E.to(cx, tensor(cx, full_value), x.dtype), x)


def _mask_value(cx: Context, x: TV, mask: TV, value):
    """A scalar, or a value that broadcasts to the axes after the mask's, fills every selected element."""
    v = tensor(cx, value)
    if v.rank and not _broadcasts(v.shape, x.shape[mask.rank:]):
        raise UnsupportedError("assigning an array into x[mask] depends on how many elements the mask selects; "
                               "write x = np.where(mask, y, x) (torch.where) with y shaped like x")
    return E.to(cx, v, shape=v.shape if not v.rank else x.shape[mask.rank:]) if v.rank else v


def _broadcasts(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(a == 1 or a == b for a, b in zip(reversed(shape), reversed(target)))


def _prefix(short, long) -> bool:
    return all(a == b for a, b in zip(short, long))


def _kept_rank(cx: Context, x: TV, items, target) -> tuple:
    """Per axis of x: a slice, an int or a 1-D index tensor; and the value's shape with every axis of x kept
    (an int index leaves a 1, the dims of a tensor index merge into one)."""
    out, kept, dims = [], [], iter(target)
    for item in items:
        if isinstance(item, slice):
            out.append(item)
            kept.append(next(dims))
        elif isinstance(item, TV):
            out.append(E.reshape(cx, item, (-1,)))
            n = 1
            for _ in range(item.rank):
                n = n * next(dims)
            kept.append(n)
        else:
            out.append(item)
            kept.append(1)
    return out, tuple(kept)


def _put(cx: Context, x: TV, items, v: TV) -> TV:
    """x with the part `items` selects (every axis kept) replaced by v."""
    axis = next((a for a, it in enumerate(items) if not (isinstance(it, slice) and it == _FULL)), None)
    if axis is None:
        return v
    item = items[axis]
    part = _take(cx, x, axis, item)
    rest = items[:axis] + [_FULL] + items[axis + 1:]
    return _place(cx, x, axis, item, _put(cx, part, rest, v))


def _along(rank: int, axis: int, item) -> tuple:
    return tuple(item if k == axis else _FULL for k in range(rank))


def _take(cx: Context, x: TV, axis: int, item) -> TV:
    if isinstance(item, TV):
        return TV(cx.b.gather(x.value, _wrapped(cx, item, x.shape[axis]).value, axis=axis))
    if not isinstance(item, slice):
        start, stop, _ = int_bounds(item, x.shape[axis], axis)
        item = slice(start, None if stop == BIG else stop)
    return getitem(cx, x, _along(x.rank, axis, item))


def _place(cx: Context, x: TV, axis: int, item, part: TV) -> TV:
    size = x.shape[axis]
    if isinstance(item, TV):
        return _scatter(cx, x, axis, _wrapped(cx, item, size), part)
    if not isinstance(item, slice):
        i = int_bounds(item, size, axis)[0]
        start = size + i if isinstance(i, int) and i < 0 else i
        return _join(cx, x, axis, start, start + 1, part)
    start, stop, step = _normalized(x, axis, item)
    if step == 1:
        return _join(cx, x, axis, start, stop, part)
    line = TV(cx.b.iota(shape=(part.shape[axis],), dtype=DType.i64), weak=True)
    positions = E.binary(cx, "add", "add", E.binary(cx, "mul", "mul", line, step), start)
    return _scatter(cx, x, axis, positions, part)


def _normalized(x: TV, axis: int, s: slice) -> tuple:
    """The slice op's own normal form of the bounds (Python clamping on static sizes)."""
    bounds = slice_bounds(s) or (0, BIG, 1)
    attrs = {"starts": (bounds[0],), "ends": (bounds[1],), "axes": (axis,), "steps": (bounds[2],)}
    norm = get_op("slice").normalize([x.type], attrs)
    start, stop, step = norm["starts"][0], norm["ends"][0], norm["steps"][0]
    if step == 1 and isinstance(start, int) and isinstance(stop, int):
        stop = max(stop, start)  # an empty slice: nothing is replaced, x[:start] and x[start:] rejoin
    return start, stop, step


def _join(cx: Context, x: TV, axis: int, start, stop, part: TV) -> TV:
    """x[:start] + part + x[stop:] along axis."""
    pieces = []
    if not (isinstance(start, int) and start == 0):
        pieces.append(getitem(cx, x, _along(x.rank, axis, slice(0, start))))
    pieces.append(part)
    if not (stop == x.shape[axis]):
        pieces.append(getitem(cx, x, _along(x.rank, axis, slice(stop, None))))
    return pieces[0] if len(pieces) == 1 else E.concat(cx, pieces, axis)


def _wrapped(cx: Context, idx: TV, size) -> TV:
    """Negative indices count from the end."""
    idx = E.to(cx, idx, DType.i64)
    return E.where(cx, E.binary(cx, "lt", None, idx, 0), E.binary(cx, "add", "add", idx, size), idx)


def _scatter(cx: Context, x: TV, axis: int, positions: TV, part: TV) -> TV:
    """x with x[..., positions[k], ...] = part[..., k, ...] along axis."""
    shape = tuple(part.shape[axis] if k == axis else 1 for k in range(part.rank))
    idx = E.to(cx, E.reshape(cx, E.to(cx, positions, DType.i64), shape), shape=part.shape)
    return TV(cx.b.scatter_elements(x.value, idx.value, E.to(cx, part, x.dtype).value, axis=axis))
