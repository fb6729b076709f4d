"""jaxpr primitives for contractions, convolutions, windows, indexing and sorting.

`dot_general` and `conv_general_dilated` take arbitrary dimension numbers; they become transposes and
reshapes around the IR's `matmul` and `conv` (NC... layout). XLA's `gather`/`scatter` are converted in their
point form (each index addresses single positions of the indexed axes, which is what `x[i]`, `jnp.take` and
`x.at[i].set(v)` produce) and their slice form with one start vector (`x[1:]` on a symbolic size).
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from .context import primitive, to_dim


def _inverse(perm) -> list:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return out


def _transpose(b, x, perm):
    return x if list(perm) == list(range(x.type.rank)) else b.transpose(x, perm=list(perm))


def _reshape(b, x, shape):
    return x if x.type.shape == tuple(shape) else b.reshape(x, shape=tuple(shape))


# -- contractions ----------------------------------------------------------------------------------------
@primitive("dot_general")
def dot_general(cx, lhs, rhs, dimension_numbers, **params):
    """lhs [batch, free, contract] @ rhs [batch, contract, free] as one matmul; results are batch, lhs free,
    rhs free (JAX's order). A shared 2-D rhs contracted on lhs's last axis needs no reshape at all."""
    (lc, rc), (lb, rb) = dimension_numbers
    dtype, b = cx.out_type().dtype, cx.b
    lhs, rhs = cx.tensor(lhs, dtype), cx.tensor(rhs, dtype)
    lf = [i for i in range(lhs.type.rank) if i not in lc and i not in lb]
    rf = [i for i in range(rhs.type.rank) if i not in rc and i not in rb]
    if not lb and len(lc) == 1 and lc[0] == lhs.type.rank - 1 and rhs.type.rank == 2 and lhs.type.rank >= 2:
        return b.matmul(lhs, _transpose(b, rhs, list(rc) + rf))
    a = _transpose(b, lhs, list(lb) + lf + list(lc))
    w = _transpose(b, rhs, list(rb) + list(rc) + rf)
    ls, rs = lhs.type.shape, rhs.type.shape
    batch = tuple(ls[i] for i in lb)
    m, k, n = (math.prod((s[i] for i in dims), start=1) for s, dims in ((ls, lf), (ls, lc), (rs, rf)))
    y = b.matmul(_reshape(b, a, batch + (m, k)), _reshape(b, w, batch + (k, n)))
    return _reshape(b, y, cx.out_type().shape)


@primitive("conv_general_dilated")
def conv_general_dilated(cx, lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
                         feature_group_count, batch_group_count, **params):
    if any(d != 1 for d in lhs_dilation or ()):
        raise cx.error("input dilation (a transposed convolution) is not supported")
    if batch_group_count != 1:
        raise cx.error("batch_group_count != 1 is not supported")
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    b, dtype = cx.b, cx.out_type().dtype
    x = _transpose(b, cx.tensor(lhs, dtype), lhs_spec)
    w = _transpose(b, cx.tensor(rhs, dtype), rhs_spec)
    pads = [lo for lo, _ in padding] + [hi for _, hi in padding]
    y = b.conv(x, w, strides=list(window_strides), pads=pads, dilations=list(rhs_dilation or ()),
               groups=feature_group_count)
    return _transpose(b, y, _inverse(out_spec))


# -- windows ---------------------------------------------------------------------------------------------
@primitive("reduce_window_max", "reduce_window_sum")
def reduce_window(cx, x, window_dimensions, window_strides, padding, base_dilation, window_dilation):
    """The axes with a real window are moved last and the others merged into one channel axis, so the IR's
    pools (N, C, *spatial) do the work; a window sum is an average pool times the window size."""
    if any(d != 1 for d in base_dilation):
        raise cx.error("base dilation is not supported")
    b, t, rank = cx.b, x.type, x.type.rank
    spatial = [i for i in range(rank) if window_dimensions[i] != 1 or window_strides[i] != 1
               or tuple(padding[i]) != (0, 0) or window_dilation[i] != 1]
    if not spatial:
        return x
    if not 1 <= len(spatial) <= 3:
        raise cx.error(f"windows over {len(spatial)} axes are not supported (1 to 3)")
    other = [i for i in range(rank) if i not in spatial]
    moved = _transpose(b, x, other + spatial)
    pooled_in = _reshape(b, moved, (1, math.prod((t.shape[i] for i in other), start=1))
                         + tuple(t.shape[i] for i in spatial))
    attrs = dict(kernel=[window_dimensions[i] for i in spatial], strides=[window_strides[i] for i in spatial],
                 pads=[padding[i][0] for i in spatial] + [padding[i][1] for i in spatial])
    if cx.eqn.primitive.name == "reduce_window_max":
        y = b.max_pool(pooled_in, dilations=[window_dilation[i] for i in spatial], **attrs)
    else:
        if not t.dtype.is_float or any(window_dilation[i] != 1 for i in spatial):
            raise cx.error("window sums need a float operand and no window dilation")
        y = b.avg_pool(pooled_in, count_include_pad=True, **attrs)
        y = b.mul(y, cx.tensor(math.prod(attrs["kernel"]), t.dtype, y.type.shape))
    out = cx.out_type().shape
    y = _reshape(b, y, tuple(t.shape[i] for i in other) + tuple(out[i] for i in spatial))
    return _transpose(b, y, _inverse(other + spatial))


# -- dynamic slices --------------------------------------------------------------------------------------
def _start(cx, start, size, dim):
    """A start index clamped into [0, dim - size] as XLA does; static when it is known at conversion."""
    known = cx.walker.static_value(start)
    if known is not None and isinstance(dim, int):
        return min(max(int(known), 0), dim - size)
    if known is not None:
        return int(known)
    start = cx.tensor(start, DType.i64)
    hi = cx.tensor(dim - size, DType.i64)
    return cx.b.min(cx.b.max(start, cx.tensor(0, DType.i64)), hi)


def _window_indices(cx, start, size):
    """start + iota(size) as i64 indices along one axis."""
    return cx.b.add(cx.b.iota(shape=[size], dtype=DType.i64), cx.tensor(start, DType.i64, (size,)))


def dynamic_slice_values(cx, x, starts, sizes):
    for axis, (start, size) in enumerate(zip(starts, map(to_dim, sizes))):
        dim = x.type.shape[axis]
        if size == dim:
            continue
        s = _start(cx, start, size, dim)
        if isinstance(s, int):
            x = cx.b.slice(x, starts=[s], ends=[s + size], axes=[axis])
        else:
            x = cx.b.gather(x, _window_indices(cx, s, size), axis=axis)
    return x


@primitive("dynamic_slice")
def dynamic_slice(cx, x, *starts, slice_sizes):
    return dynamic_slice_values(cx, x, starts, slice_sizes)


@primitive("dynamic_update_slice")
def dynamic_update_slice(cx, x, update, *starts):
    """The update is spread to x's shape axis by axis (a gather of clamped shifted positions) and selected
    where the window lies: O(size of x), with no op the IR lacks."""
    b, shape = cx.b, x.type.shape
    spread, inside = cx.tensor(update, x.type.dtype), None
    for axis, start in enumerate(starts):
        size, dim = update.type.shape[axis], shape[axis]
        if size == dim:
            continue
        s = cx.tensor(_start(cx, start, size, dim), DType.i64, (dim,))
        pos = b.iota(shape=[dim], dtype=DType.i64)
        rel = b.sub(pos, s)
        src = b.min(b.max(rel, cx.tensor(0, DType.i64, (dim,))), cx.tensor(size - 1, DType.i64, (dim,)))
        spread = b.gather(spread, src, axis=axis)
        hit = b.emit("and", b.ge(rel, cx.tensor(0, DType.i64, (dim,))), b.lt(rel, cx.tensor(size, DType.i64, (dim,))))
        hit = b.broadcast_to(_reshape(b, hit, [dim if i == axis else 1 for i in range(len(shape))]), shape=shape)
        inside = hit if inside is None else b.emit("and", inside, hit)
    return spread if inside is None else b.where(inside, spread, x)


# -- gather and scatter ----------------------------------------------------------------------------------
def _bounded(cx, part, size, mode):
    """Index `part` (i64) clamped into [0, size) unless in-bounds is promised; the in-bounds mask in fill mode."""
    if "PROMISE" in str(mode):
        return part, None
    b, shape = cx.b, part.type.shape
    size = cx.tensor(size, DType.i64, shape)
    ok = b.emit("and", b.ge(part, cx.tensor(0, DType.i64, shape)), b.lt(part, size))
    part = b.min(b.max(part, cx.tensor(0, DType.i64, shape)), b.sub(size, cx.tensor(1, DType.i64, shape)))
    return part, (ok if "FILL" in str(mode) else None)


def _point_index(cx, x, indices, axes, mode):
    """One flat i64 index into the indexed `axes` (merged) from indices [..., len(axes)], and the in-bounds
    mask in fill mode (else None)."""
    b, shape = cx.b, x.type.shape
    batch = indices.type.shape[:-1]
    flat, valid = None, None
    for k, axis in enumerate(axes):
        part = _reshape(b, b.slice(indices, starts=[k], ends=[k + 1], axes=[indices.type.rank - 1]), batch)
        part, ok = _bounded(cx, cx.tensor(part, DType.i64), shape[axis], mode)
        valid = ok if valid is None or ok is None else b.emit("and", valid, ok)
        stride = math.prod((shape[a] for a in axes[k + 1:]), start=1)
        part = part if stride == 1 else b.mul(part, cx.tensor(stride, DType.i64, batch))
        flat = part if flat is None else b.add(flat, part)
    return flat, valid


def _filled(cx, y, valid, fill_value):
    """y where the index was in bounds, the fill value elsewhere (valid broadcasts over y's trailing dims)."""
    if valid is None:
        return y
    extra = y.type.rank - valid.type.rank
    mask = cx.b.broadcast_to(_reshape(cx.b, valid, valid.type.shape + (1,) * extra), shape=y.type.shape)
    return cx.b.where(mask, y, cx.tensor(_fill_value(y.type.dtype, fill_value), y.type.dtype, y.type.shape))


def _merged(cx, x, axes):
    """x with `axes` moved first and merged into one: [prod(axes), *rest]."""
    rest = [i for i in range(x.type.rank) if i not in axes]
    moved = _transpose(cx.b, x, list(axes) + rest)
    size = math.prod((x.type.shape[a] for a in axes), start=1)
    return _reshape(cx.b, moved, (size,) + tuple(x.type.shape[i] for i in rest)), rest


def _fill_value(dtype: DType, fill):
    if fill is not None:
        return float(fill)
    if dtype.is_float:
        return float("nan")
    if dtype is DType.bool:
        return 1.0
    info = np.iinfo(dtype.numpy)
    return float(info.min if dtype.is_signed else info.max)


@primitive("gather")
def gather(cx, x, indices, dimension_numbers, slice_sizes, mode=None, fill_value=None, **params):
    dn = dimension_numbers
    axes = list(dn.start_index_map)
    if dn.operand_batching_dims:
        return _batched_gather(cx, x, indices, dn, slice_sizes, mode, fill_value)
    if indices.type.rank == 1 and not dn.collapsed_slice_dims:  # one start vector: a (dynamic) slice
        starts = [0] * x.type.rank
        for k, axis in enumerate(axes):
            starts[axis] = cx.walker.static_value(indices, k)
            if starts[axis] is None:
                starts[axis] = _reshape(cx.b, cx.b.slice(indices, starts=[k], ends=[k + 1]), ())
        return _reshape(cx.b, dynamic_slice_values(cx, x, starts, slice_sizes), cx.out_type().shape)
    point = sorted(dn.collapsed_slice_dims) == sorted(axes) and all(
        slice_sizes[i] == (1 if i in axes else x.type.shape[i]) for i in range(x.type.rank))
    if not point:
        raise cx.error(f"this gather ({dn}) is not supported: only point gathers (x[i], jnp.take, "
                       f"take_along_axis) and single-start slices")
    flat, valid = _point_index(cx, x, indices, axes, mode)
    merged, rest = _merged(cx, x, axes)
    y = _filled(cx, cx.b.gather(merged, flat, axis=0), valid, fill_value)  # [*batch, *rest]
    n_batch = flat.type.rank
    order = [d for d in range(y.type.rank) if d not in dn.offset_dims]  # output positions of the batch dims
    perm = [0] * y.type.rank
    for i, d in enumerate(order):
        perm[d] = i
    for i, d in enumerate(dn.offset_dims):
        perm[d] = n_batch + i
    return _transpose(cx.b, y, perm)


def _batched_gather(cx, x, indices, dn, slice_sizes, mode, fill_value):
    """take_along_axis: every operand axis but one is a batch axis paired with an index axis, so it is a
    `gather_elements` along the remaining one, with the index axes put in operand order first."""
    a = dn.start_index_map[0] if len(dn.start_index_map) == 1 else None
    batch_axes, index_batch = list(dn.operand_batching_dims), list(dn.start_indices_batching_dims)
    if a is None or dn.offset_dims or any(s != 1 for s in slice_sizes) or \
            sorted(batch_axes + [a]) != list(range(x.type.rank)) or indices.type.rank != x.type.rank + 1:
        raise cx.error(f"this batched gather ({dn}) is not supported: only take_along_axis")
    free = [j for j in range(x.type.rank) if j not in index_batch][0]
    src = [free if d == a else index_batch[batch_axes.index(d)] for d in range(x.type.rank)]
    idx = _transpose(cx.b, _reshape(cx.b, indices, indices.type.shape[:-1]), src)
    idx, valid = _bounded(cx, cx.tensor(idx, DType.i64), x.type.shape[a], mode)
    y = _filled(cx, cx.b.gather_elements(x, idx, axis=a), valid, fill_value)
    return _transpose(cx.b, y, _inverse(src))


_SCATTER = {"scatter": "none", "scatter-add": "add", "scatter_add": "add", "scatter-mul": "mul",
            "scatter_mul": "mul", "scatter-max": "max", "scatter_max": "max", "scatter-min": "min",
            "scatter_min": "min"}


@primitive(*_SCATTER)
def scatter(cx, x, indices, updates, dimension_numbers, mode=None, **params):
    """Point scatters (`x.at[i].set(v)`, `.add`, ...): the indexed axes merged into one and a
    `scatter_elements` along it. Out-of-bounds updates are clamped, not dropped."""
    dn = dimension_numbers
    axes = list(dn.scatter_dims_to_operand_dims)
    if dn.operand_batching_dims or sorted(dn.inserted_window_dims) != sorted(axes):
        raise cx.error(f"this scatter ({dn}) is not supported: only point scatters like x.at[i].set(v)")
    flat, _ = _point_index(cx, x, indices, axes, "CLIP")
    merged, rest = _merged(cx, x, axes)
    n = math.prod(flat.type.shape, start=1)
    rest_shape = merged.type.shape[1:]
    ups = _reshape(cx.b, cx.tensor(updates, x.type.dtype), (n,) + rest_shape)
    idx = cx.b.broadcast_to(_reshape(cx.b, flat, (n,) + (1,) * len(rest)), shape=(n,) + rest_shape)
    out = cx.b.scatter_elements(merged, idx, ups, axis=0, reduction=_SCATTER[cx.eqn.primitive.name])
    out = _reshape(cx.b, out, tuple(x.type.shape[a] for a in axes) + rest_shape)
    return _transpose(cx.b, out, _inverse(axes + rest))


# -- sorting ---------------------------------------------------------------------------------------------
@primitive("sort")
def sort(cx, *operands, dimension, is_stable=True, num_keys=1):
    """An ascending stable sort is a full `topk` of the smallest; the other operands follow its indices."""
    if num_keys != 1:
        raise cx.error("sorting by several keys is not supported")
    keys = operands[0]
    n = keys.type.shape[dimension]
    if not isinstance(n, int):
        raise cx.error("sorting along a symbolic axis is not supported")
    values, idx = cx.b.topk(keys, k=n, axis=dimension, largest=False)
    return [values] + [cx.b.gather_elements(v, idx, axis=dimension) for v in operands[1:]]


@primitive("top_k")
def top_k(cx, x, k, axis=-1, **params):
    values, idx = cx.b.topk(x, k=k, axis=axis)
    return [values, cx.tensor(idx, cx.out_type(1).dtype)]
