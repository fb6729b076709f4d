"""Converters spelled with other converters (slices, transposes, reductions), shared by the NumPy and torch
tables: flips and rolls, norms, differences, padding, torch's gather/index_select and scaled dot-product
attention. Each follows its framework's function exactly on what it accepts; anything else is an error."""
from __future__ import annotations

import collections
import math

import numpy as np

from ...errors import UnsupportedError
from ...ir.dtypes import DType
from ...ops.common import broadcast_shapes
from . import emit as E
from .emit import tensor
from .indexing import getitem
from .values import TV, result_dtype


def _axes(axis, rank: int) -> tuple:
    return E.axes_of(axis, rank)


def _along(rank: int, axis: int, item) -> tuple:
    return tuple(item if k == axis else slice(None) for k in range(rank))


def flip(cx, x, axis=None) -> TV:
    t = tensor(cx, x)
    return getitem(cx, t, tuple(slice(None, None, -1) if k in _axes(axis, t.rank) else slice(None)
                               for k in range(t.rank)))


def roll(cx, x, shift, axis=None) -> TV:
    """The last `shift` elements along each axis move to the front (the whole tensor, flattened, without axis)."""
    t = tensor(cx, x)
    if axis is None:
        return E.reshape(cx, roll(cx, E.reshape(cx, t, (-1,)), shift, 0), t.shape)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,) * len(_as_tuple(axis))
    for s, ax in zip(shifts, _as_tuple(axis)):
        ax = _axes(ax, t.rank)[0]
        n = t.shape[ax]
        if not isinstance(n, int) or not isinstance(s, int):
            raise UnsupportedError("roll needs a static size and an integer shift")
        s = s % n if n else 0
        if s:
            t = E.concat(cx, [getitem(cx, t, _along(t.rank, ax, slice(n - s, None))),
                              getitem(cx, t, _along(t.rank, ax, slice(None, n - s)))], ax)
    return t


def _as_tuple(v) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def moveaxis(cx, a, source, destination) -> TV:
    t = tensor(cx, a)
    src = [s % t.rank for s in _as_tuple(source)]
    dst = [d % t.rank for d in _as_tuple(destination)]
    order = [k for k in range(t.rank) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return E.transpose(cx, t, order)


def outer(cx, a, b) -> TV:
    return E.binary(cx, "mul", "multiply", E.reshape(cx, tensor(cx, a), (-1, 1)), E.reshape(cx, tensor(cx, b), (1, -1)))


def trunc(cx, x) -> TV:
    t = tensor(cx, x)
    if not t.dtype.is_float:
        return t
    toward_zero = E.unary(cx, "ceil", "ceil", t), E.unary(cx, "floor", "floor", t)
    return E.where(cx, E.binary(cx, "lt", "less", t, 0), *toward_zero)


def count_nonzero(cx, a, axis=None, *, keepdims=False) -> TV:
    nonzero = E.binary(cx, "ne", "not_equal", a, 0)
    return E.reduce(cx, "reduce_sum", "sum", E.cast(cx, nonzero, DType.i64), axis, keepdims, DType.i64)


def diff(cx, a, n=1, axis=-1) -> TV:
    t = tensor(cx, a)
    ax = _axes(axis, t.rank)[0]
    for _ in range(n):
        t = E.binary(cx, "sub", "subtract", getitem(cx, t, _along(t.rank, ax, slice(1, None))),
                     getitem(cx, t, _along(t.rank, ax, slice(None, -1))))
    return t


def isclose(cx, a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> TV:
    if equal_nan:
        raise UnsupportedError("isclose(equal_nan=True) is not supported")
    gap = E.unary(cx, "abs", "abs", E.binary(cx, "sub", "subtract", a, b))
    bound = E.binary(cx, "add", "add", E.binary(cx, "mul", "multiply", E.unary(cx, "abs", "abs", b), rtol), atol)
    return E.binary(cx, "le", "less_equal", gap, bound)


def np_pad(cx, array, pad_width, mode="constant", constant_values=0) -> TV:
    t = tensor(cx, array)
    width = np.broadcast_to(np.asarray(pad_width, dtype=object), (t.rank, 2))
    if mode not in ("constant", "reflect", "edge") or not np.isscalar(constant_values):
        raise UnsupportedError(f"np.pad supports the modes constant (one scalar value), reflect and edge, got {mode!r}")
    pads = tuple(int(w) for w in width[:, 0]) + tuple(int(w) for w in width[:, 1])
    return TV(cx.b.pad(t.value, pads=pads, mode=mode, value=float(constant_values)), t.weak)


def repeat(cx, a, repeats, axis=None) -> TV:
    """Each element `repeats` times in a row: a new axis after `axis`, broadcast, then merged into it."""
    t = tensor(cx, a)
    if axis is None:
        t, axis = E.reshape(cx, t, (-1,)), 0
    if not isinstance(repeats, int):
        raise UnsupportedError("repeat supports one integer count for every element")
    ax = _axes(axis, t.rank)[0]
    wide = E.unsqueeze(cx, t, ax + 1)
    shape = t.shape[:ax + 1] + (repeats,) + t.shape[ax + 1:]
    merged = t.shape[:ax] + (t.shape[ax] * repeats,) + t.shape[ax + 1:]
    return E.reshape(cx, E.to(cx, wide, shape=shape), merged)


def norm2(cx, x, axis=None, keepdims=False) -> TV:
    """The 2-norm over `axis` (the Frobenius norm of everything without one)."""
    t = tensor(cx, x)
    t = E.to(cx, t, t.dtype if t.dtype.is_float else cx.default_float)
    sq = E.reduce(cx, "reduce_sum", "sum", E.binary(cx, "mul", "multiply", t, t), axis, keepdims)
    return E.unary(cx, "sqrt", "sqrt", sq)


def np_norm(cx, x, ord=None, axis=None, keepdims=False) -> TV:
    if ord not in (None, 2, "fro") or ord == 2 and (axis is None or isinstance(axis, (tuple, list))):
        raise UnsupportedError(f"np.linalg.norm supports the 2-norm of vectors and the Frobenius norm, not ord={ord!r}")
    return norm2(cx, x, axis, keepdims)


def t_norm(cx, input, p="fro", dim=None, keepdim=False, dtype=None) -> TV:
    if p not in (2, 2.0, "fro"):
        raise UnsupportedError(f"norm supports p=2 and 'fro', got p={p!r}")
    out = norm2(cx, input, dim, keepdim)
    return E.cast(cx, out, dtype) if dtype is not None else out


def f_normalize(cx, input, p=2.0, dim=1, eps=1e-12, out=None) -> TV:
    if p != 2:
        raise UnsupportedError(f"F.normalize supports p=2, got p={p!r}")
    norm = norm2(cx, input, dim, True)
    return E.binary(cx, "div", "div", input, TV(cx.b.clip(norm.value, min=eps, max=math.inf)))


def t_gather(cx, input, dim, index, *, sparse_grad=False) -> TV:
    t = tensor(cx, input)
    return TV(cx.b.gather_elements(t.value, E.to(cx, tensor(cx, index), DType.i64).value, axis=_axes(dim, t.rank)[0]))


def t_index_select(cx, input, dim, index) -> TV:
    t = tensor(cx, input)
    return TV(cx.b.gather(t.value, E.to(cx, tensor(cx, index), DType.i64).value, axis=_axes(dim, t.rank)[0]))


def f_sdpa(cx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """softmax(q @ k^T * scale + mask) @ v; a boolean mask (or is_causal) keeps the True positions."""
    q, k = tensor(cx, query), tensor(cx, key)
    if enable_gqa:
        raise UnsupportedError("scaled_dot_product_attention(enable_gqa=True) is not supported")
    scores = E.matmul(cx, q, E.swap(cx, k, -2, -1))
    if scale is None and not isinstance(q.shape[-1], int):  # 1 / sqrt(E) of a size bound at run time
        root = E.unary(cx, "sqrt", None, E.to(cx, tensor(cx, q.shape[-1]), scores.dtype))
        scores = E.binary(cx, "div", "div", scores, root)
    else:
        scores = E.binary(cx, "mul", "mul", scores, 1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        attn_mask = TV(cx.b.ge(cx.b.iota(shape=scores.shape[-2:], axis=0), cx.b.iota(shape=scores.shape[-2:], axis=1)))
    if attn_mask is not None:
        mask = tensor(cx, attn_mask)
        scores = E.where(cx, mask, scores, -math.inf) if mask.dtype is DType.bool else \
            E.binary(cx, "add", "add", scores, mask)
    return E.matmul(cx, TV(cx.b.softmax(scores.value, axis=scores.rank - 1)), value)


# -- sorting and scans ----------------------------------------------------------------------------------------
SortResult = collections.namedtuple("torch_return_types", ["values", "indices"])


def _static_axis(t: TV, axis, what: str) -> int:
    ax = _axes(axis, t.rank)[0]
    if not isinstance(t.shape[ax], int):
        raise UnsupportedError(f"{what} along an axis whose size is only known at run time is not supported (with "
                               "dynamic=True each size then compiles on its own)")
    return ax


def topk(cx, x, k, axis=-1, largest=True) -> SortResult:
    """The k largest (or smallest) along axis, sorted, with their indices (among equal values the lower index
    first, as a stable sort gives)."""
    t = tensor(cx, x)
    if t.rank == 0:
        t = E.reshape(cx, t, (1,))
    ax = _static_axis(t, axis, "sorting")
    if not isinstance(k, int) or not 0 <= k <= t.shape[ax]:
        raise UnsupportedError(f"k must be an int in [0, {t.shape[ax]}] known at compile time, got {k!r}")
    values, idx = cx.b.topk(t.value, k=k, axis=ax, largest=bool(largest))
    return SortResult(TV(values), TV(idx))


def _flat_axis(cx, a, axis):
    return (E.reshape(cx, tensor(cx, a), (-1,)), 0) if axis is None else (tensor(cx, a), axis)


def np_sort(cx, a, axis=-1, kind=None, order=None, stable=None):
    t, axis = _flat_axis(cx, a, axis)
    return topk(cx, t, t.shape[_axes(axis, t.rank)[0]], axis, largest=False).values


def np_argsort(cx, a, axis=-1, kind=None, order=None, stable=None):
    t, axis = _flat_axis(cx, a, axis)
    return topk(cx, t, t.shape[_axes(axis, t.rank)[0]], axis, largest=False).indices


def t_topk(cx, input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 (torch's names)
    return topk(cx, input, k, dim, largest)


def t_sort(cx, input, dim=-1, descending=False, stable=False):
    t = tensor(cx, input)
    return topk(cx, t, t.shape[_axes(dim, t.rank)[0]], dim, largest=descending)


def t_argsort(cx, input, dim=-1, descending=False, stable=False):
    return t_sort(cx, input, dim, descending).indices


def cumprod(cx, x, axis, dtype=None) -> TV:
    t = tensor(cx, x)
    if axis is None:
        t, axis = E.reshape(cx, t, (-1,)), 0
    d = dtype if dtype is not None else result_dtype(cx.mode, "prod", t)
    t = E.to(cx, t, d)
    if t.rank == 0:
        return t
    return TV(cx.b.cumprod(t.value, axis=_static_axis(t, axis, "cumprod")))


def cumulative_extreme(cx, x, dim, largest: bool) -> SortResult:
    """torch.cummax / cummin: the running extreme and the index it was last seen at (the IR's cummax/cummin)."""
    t = tensor(cx, x)
    values, indices = cx.b.emit("cummax" if largest else "cummin", t.value, axis=_static_axis(t, dim, "cummax/cummin"))
    return SortResult(TV(values), TV(indices))


def nonzero_rows(cx, a) -> TV:
    """i64[rank, u]: the coordinates of a's nonzero elements, one row per axis (u is computed at run time)."""
    t = tensor(cx, a)
    return TV(cx.b.nonzero(t.value if t.rank else E.reshape(cx, t, (1,)).value))


def np_nonzero(cx, a) -> tuple:
    """np.nonzero: a tuple of one index array per axis."""
    rows = nonzero_rows(cx, a)
    return tuple(getitem(cx, rows, k) for k in range(rows.shape[0]))


def argwhere(cx, a) -> TV:
    """np.argwhere / torch.nonzero: i64[u, rank] (a 0-d a: [u, 0], one empty position when it is nonzero)."""
    positions = E.transpose(cx, nonzero_rows(cx, a), (1, 0))
    if tensor(cx, a).rank:
        return positions
    return TV(cx.b.slice(positions.value, starts=(0,), ends=(0,), axes=(1,)))


def flatnonzero(cx, a) -> TV:
    return getitem(cx, nonzero_rows(cx, E.reshape(cx, a, (-1,))), 0)


def masked_select(cx, x, mask) -> TV:
    """torch.masked_select: x and mask broadcast together, the selected elements flattened."""
    x, mask = tensor(cx, x), tensor(cx, mask)
    shape = broadcast_shapes(x.shape, mask.shape)
    flat = E.reshape(cx, E.to(cx, x, shape=shape), (-1,))
    return getitem(cx, flat, E.reshape(cx, E.to(cx, mask, shape=shape), (-1,)))


def unique(cx, x, axis=None, index=False, inverse=False, counts=False):
    """np.unique / torch.unique through the `unique` op: the sorted distinct values (or slices along `axis`), then
    the asked-for first indices, inverse (shaped like x when flattened) and counts, in NumPy's order."""
    t = tensor(cx, x)
    flat = E.reshape(cx, t, (-1,)) if axis is None else t
    values, first, where, sizes = (TV(v) for v in cx.b.unique(flat.value, axis=0 if axis is None else axis))
    if axis is None and inverse:
        where = E.reshape(cx, where, t.shape)
    extra = [v for v, asked in ((first, index), (where, inverse), (sizes, counts)) if asked]
    return tuple([values, *extra]) if extra else values


def np_unique(cx, ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True):
    if not equal_nan:
        raise UnsupportedError("np.unique(equal_nan=False) is not supported (NaNs are one value)")
    return unique(cx, ar, axis, return_index, return_inverse, return_counts)


def torch_unique(cx, input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """torch.unique sorts whatever `sorted` says (on CPU)."""
    return unique(cx, input, dim, False, return_inverse, return_counts)


def in_place(name: str, instead: str):
    """Methods that change the tensor in place and return None: an error that says what to write instead."""
    def conv(cx, *args, **kwargs):
        raise UnsupportedError(f"{name} changes the array in place, which compiled code does not do; write {instead}")
    return conv


