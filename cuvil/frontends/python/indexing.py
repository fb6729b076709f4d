"""`x[...]`: basic indexing becomes one `slice` plus a `reshape`; tensor indices become `gather`.

Ints, slices (any step, negative bounds, symbolic bounds), `None`, `...` and integer tensors (or lists)
are supported, following NumPy (and torch, which agrees on these). A boolean mask alone, over the leading axes,
selects through the `nonzero` op: the result's first size is computed at run time (a data-dependent size).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from .emit import Context, reshape, tensor, to
from .values import TV

BIG = 2 ** 31 - 1  # the slice op's "past the end"


def getitem(cx: Context, x: TV, index) -> TV:
    mask = mask_of(cx, index)
    if mask is not None:
        return masked_select(cx, x, mask)
    items = expand_index(cx, x, index if isinstance(index, tuple) else (index,))
    _check_advanced(items)
    cuts, plan, gathers = [], [], []
    axis = 0
    for item in items:
        if item is None:
            plan.append(("new",))
            continue
        if isinstance(item, slice):
            cut = slice_bounds(item)
            plan.append(("keep", axis))
        elif isinstance(item, TV):
            cut = None
            gathers.append((axis, item))
            plan.append(("gather", item))
        else:
            cut = int_bounds(item, x.shape[axis], axis)
            plan.append(("drop",))
        if cut is not None:
            cuts.append((axis, *cut))
        axis += 1
    out = _slice(cx, x, cuts)
    sliced = out.shape
    for axis, idx in reversed(gathers):
        out = TV(cx.b.gather(out.value, idx.value, axis=axis))
    shape = []
    for kind, *arg in plan:
        if kind == "new":
            shape.append(1)
        elif kind == "keep":
            shape.append(sliced[arg[0]])
        elif kind == "gather":
            shape.extend(arg[0].shape)
    return reshape(cx, out, shape) if tuple(shape) != out.shape else out


def mask_of(cx: Context, index):
    """The boolean mask tensor an index is, else None (a mask among other indices is refused)."""
    items = index if isinstance(index, tuple) else (index,)
    if len(items) != 1:
        if any(isinstance(i, TV) and i.dtype is DType.bool for i in items):
            raise UnsupportedError("a boolean mask mixed with other indices is not supported; index with the mask "
                                   "alone (x[mask]), or use np.where / torch.where")
        return None
    m = items[0]
    if isinstance(m, (list, np.ndarray)) and np.asarray(m).dtype == np.bool_:
        m = tensor(cx, np.asarray(m))
    return m if isinstance(m, TV) and m.dtype is DType.bool else None


def masked_select(cx: Context, x: TV, mask: TV) -> TV:
    """x[mask], the mask covering x's leading axes: the selected rows, as many as the mask holds at run time."""
    k = mask.rank
    if k == 0 or k > x.rank or tuple(mask.shape) != tuple(x.shape[:k]):
        raise ShapeError(f"a boolean mask of shape {list(mask.shape)} does not match the leading axes of a tensor "
                         f"of shape {list(x.shape)}")
    rows = reshape(cx, x, (mask.type.numel,) + tuple(x.shape[k:]))
    where = cx.b.nonzero(reshape(cx, mask, (mask.type.numel,)).value)
    picked = cx.b.reshape(where, shape=(where.type.shape[1],))
    return TV(cx.b.gather(rows.value, picked, axis=0))


def expand_index(cx: Context, x: TV, items) -> list:
    """Replace `...` by full slices, lists and arrays by index tensors; check the count."""
    items = [_index_tensor(cx, i) for i in items]
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > x.rank:
        raise ShapeError(f"too many indices for a tensor of rank {x.rank}: {used}")
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise UnsupportedError("an index can only have a single ellipsis ('...')")
    fill = [slice(None)] * (x.rank - used)
    if Ellipsis in items:
        k = next(k for k, i in enumerate(items) if i is Ellipsis)
        return items[:k] + fill + items[k + 1:]
    return items + fill


def _index_tensor(cx: Context, item):
    if isinstance(item, (list, np.ndarray)):
        arr = np.asarray(item)
        if arr.dtype.kind not in "iub" or arr.dtype.kind == "b" and arr.size:
            raise UnsupportedError(f"index lists must hold integers, got {arr.dtype}")
        item = tensor(cx, arr.astype(np.int64))
    if isinstance(item, TV):
        if not item.dtype.is_int:
            raise UnsupportedError(f"tensors used as indices must be integers, got {item.type}")
        return to(cx, item, DType.i64) if item.dtype is not DType.i32 else item
    return item


def _check_advanced(items) -> None:
    """NumPy moves the dims of non-adjacent advanced indices to the front; only adjacent ones are supported,
    with at most one tensor index of rank >= 1."""
    big = [i for i in items if isinstance(i, TV) and i.rank >= 1]
    if not big:
        return
    if len(big) > 1:
        raise UnsupportedError("indexing with several tensor indices is not supported; index with one tensor at "
                               "a time")
    adv = [k for k, i in enumerate(j for j in items if j is not None)
           if isinstance(i, TV) or _is_int(i)]
    if adv != list(range(adv[0], adv[0] + len(adv))):
        raise UnsupportedError("integer and tensor indices separated by a slice move dims to the front in "
                               "NumPy; this mix is not supported, index in two steps")


def _is_int(i) -> bool:
    return isinstance(i, (int, SymExpr, np.integer)) and not isinstance(i, bool)


def slice_bounds(s: slice) -> tuple:
    step = 1 if s.step is None else s.step
    if isinstance(step, TV) or not isinstance(step, (int, np.integer)) or step == 0:
        raise UnsupportedError(f"slice steps must be non-zero integers known at compile time, got {step!r}")
    for b in (s.start, s.stop):
        if isinstance(b, TV):
            raise UnsupportedError("slice bounds must be known at compile time (ints or x.shape[i]); inside a loop "
                                   "over a large range, raise cuvil.jit(unroll=...) so the loop unrolls")
        if b is not None and not _is_int(b):
            raise UnsupportedError(f"slice bounds must be integers, got {b!r}")
    if s.start is None and s.stop is None and step == 1:
        return None
    start = s.start if s.start is not None else (0 if step > 0 else -1)
    stop = s.stop if s.stop is not None else (BIG if step > 0 else -BIG)
    return int(start) if isinstance(start, np.integer) else start, \
        int(stop) if isinstance(stop, np.integer) else stop, int(step)


def int_bounds(i, size, axis: int) -> tuple:
    if not _is_int(i):
        raise UnsupportedError(f"cannot index a tensor with {type(i).__name__} {i!r}; supported: ints, slices, "
                               "None, ..., integer tensors and lists")
    i = int(i) if isinstance(i, np.integer) else i
    if isinstance(i, int) and isinstance(size, int) and not -size <= i < size:
        raise ShapeError(f"index {i} is out of bounds for axis {axis} with size {size}")
    return i, (BIG if isinstance(i, int) and i == -1 else i + 1), 1


def _slice(cx: Context, x: TV, cuts) -> TV:
    if not cuts:
        return x
    axes, starts, ends, steps = zip(*cuts)
    return TV(cx.b.slice(x.value, starts=starts, ends=ends, axes=axes, steps=steps), x.weak)
