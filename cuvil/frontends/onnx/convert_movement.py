"""Data movement: Transpose, Split, Tile, Pad, the gathers and scatters (ND forms through flattened indices),
EyeLike, OneHot, Trilu, DepthToSpace/SpaceToDepth, ReverseSequence, and the data-dependent ops (Compress,
NonZero, Unique, NonMaxSuppression) through the IR's data-dependent sizes."""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from .fold import has_symbols
from .registry import converter, folder
from .tensors import Tensor, ir_dtype


@converter("Transpose")
def transpose(ctx):
    perm = ctx.attr("perm")
    return [ctx.b.transpose(ctx.x(0), perm=tuple(perm) if perm else ())]


# -- split, tile, pad -----------------------------------------------------------------------------------------
def split_sizes(ctx, d, n_out: int) -> tuple:
    if ctx.opset < 13 and ctx.has_attr("split"):
        return tuple(ctx.attr("split"))
    if ctx.opset >= 13 and ctx.has(1):
        return ctx.dims(1, "split")
    n = ctx.attr("num_outputs", n_out)
    if not isinstance(d, int):
        return (d // n,) * n
    chunk = -(-d // n)
    return (chunk,) * (n - 1) + (d - chunk * (n - 1),)


@converter("Split")
def split(ctx):
    x, axis = ctx.x(0), ctx.attr("axis", 0)
    sizes = split_sizes(ctx, x.type.shape[axis], len(ctx.node.output))
    out = ctx.b.split(x, axis=axis, sizes=sizes)
    return list(out) if isinstance(out, tuple) else [out]


@converter("Tile")
def tile(ctx):
    x, reps = ctx.x(0), ctx.dims(1, "repeats")
    if all(isinstance(r, int) for r in reps):
        return [ctx.b.tile(x, repeats=reps)]
    pairs = list(zip(reps, x.type.shape))  # symbolic repeats: [d0,d1] -> [1,d0,1,d1] -> [r0,d0,r1,d1] -> [r0*d0,...]
    spread = ctx.b.reshape(x, shape=[v for _, d in pairs for v in (1, d)])
    wide = ctx.b.broadcast_to(spread, shape=[v for r, d in pairs for v in (r, d)])
    return [ctx.b.reshape(wide, shape=[r * d for r, d in pairs])]


def pad_widths(ctx, rank: int) -> tuple:
    """All begins then all ends, one per axis; opset 18's `axes` input names the axes that pads cover."""
    if ctx.opset < 11:
        return tuple(ctx.attr("pads", ctx.attr("paddings")))
    pads = ctx.dims(1, "pads")
    if not ctx.has(3):
        return pads
    axes = [a + rank if a < 0 else a for a in ctx.dims(3, "axes")]
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        full[a], full[rank + a] = pads[i], pads[len(axes) + i]
    return tuple(full)


def _wrap_pad(ctx, x, pads):
    rank = x.type.rank
    for axis in range(rank):
        begin, end = pads[axis], pads[rank + axis]
        if begin < 0 or end < 0:
            raise ctx.unsupported("wrap padding with negative pads is not supported")
        d = x.type.shape[axis]
        parts = [ctx.b.slice(x, starts=(d - begin,), ends=(d,), axes=(axis,))] if begin else []
        parts += [x] + ([ctx.b.slice(x, starts=(0,), ends=(end,), axes=(axis,))] if end else [])
        x = ctx.b.concat(*parts, axis=axis) if len(parts) > 1 else x
    return x


@converter("Pad")
def pad(ctx):
    x, mode = ctx.x(0), ctx.attr("mode", "constant")
    pads = pad_widths(ctx, x.type.rank)
    if mode == "wrap":
        return [_wrap_pad(ctx, x, pads)]
    if mode != "constant":
        return [ctx.b.pad(x, pads=pads, mode=mode)]
    if ctx.opset < 11:
        return [ctx.b.pad(x, pads=pads, value=ctx.attr("value", 0.0))]
    if not ctx.has(2) or ctx.known(2) is not None:
        return [ctx.b.pad(x, pads=pads, value=float(ctx.known_scalar(2, "constant_value", 0)))]
    inside = ctx.b.pad(ctx.b.full(1.0, x.type.shape, DType.bool), pads=pads)  # the value is only known at run time
    padded = ctx.b.pad(x, pads=pads)
    return [ctx.b.where(inside, padded, ctx.expand(ctx.b.reshape(ctx.x(2), shape=()), padded.type.shape))]


# -- gathers and scatters -----------------------------------------------------------------------------------
@converter("GatherElements")
def gather_elements(ctx):
    return [ctx.b.gather_elements(ctx.x(0), ctx.x(1), axis=ctx.attr("axis", 0))]


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx):
    return [ctx.b.scatter_elements(ctx.x(0), ctx.x(1), ctx.x(2), axis=ctx.attr("axis", 0),
                                   reduction=ctx.attr("reduction", "none"))]


def _linear_index(ctx, idx, dims: tuple):
    """Row-major linear index of the last axis of idx over `dims` (negative indices count from the end)."""
    b, k = ctx.b, len(dims)
    idx = ctx.cast(idx, DType.i64)
    total = None
    for j, d in enumerate(dims):
        part = b.reshape(b.slice(idx, starts=(j,), ends=(j + 1,), axes=(idx.type.rank - 1,)), shape=idx.type.shape[:-1])
        part = b.where(b.lt(part, ctx.scalar_like(0, part)), b.add(part, ctx.scalar_like(d, part)), part)
        stride = math.prod(dims[j + 1:k], start=1)
        part = b.mul(part, ctx.scalar_like(stride, part)) if stride != 1 else part
        total = part if total is None else b.add(total, part)
    return total


@converter("GatherND")
def gather_nd(ctx):
    data, idx, nb = ctx.x(0), ctx.x(1), ctx.attr("batch_dims", 0)
    k = idx.type.shape[-1]
    if not isinstance(k, int):
        raise ctx.unsupported("the last dim of indices must be static")
    batch, picked, rest = data.type.shape[:nb], data.type.shape[nb:nb + k], data.type.shape[nb + k:]
    linear = _linear_index(ctx, idx, picked)
    if nb:  # fold the batch position into the index: batch_id * prod(picked) + local
        batch_id = _batch_ids(ctx, linear.type.shape, nb)
        linear = ctx.b.add(ctx.b.mul(batch_id, ctx.scalar_like(math.prod(picked, start=1), batch_id)), linear)
    flat = ctx.b.reshape(data, shape=(math.prod(batch + picked, start=1),) + rest)
    return [ctx.b.gather(flat, linear, axis=0)]


def _batch_ids(ctx, shape: tuple, nb: int):
    """For each position of `shape`, the row-major number of its first nb coordinates."""
    total = None
    for axis in range(nb):
        ids = ctx.b.iota(shape=shape, axis=axis, dtype=DType.i64)
        stride = math.prod(shape[axis + 1:nb], start=1)
        ids = ctx.b.mul(ids, ctx.scalar_like(stride, ids)) if stride != 1 else ids
        total = ids if total is None else ctx.b.add(total, ids)
    return total


@converter("ScatterND")
def scatter_nd(ctx):
    """Scatter rows of the flattened data: data [P, R] at linear indices [M], updates [M, R]."""
    data, idx, upd = ctx.x(0), ctx.x(1), ctx.x(2)
    k = idx.type.shape[-1]
    picked, rest = data.type.shape[:k], data.type.shape[k:]
    rows, width = math.prod(picked, start=1), math.prod(rest, start=1)
    linear = ctx.b.reshape(_linear_index(ctx, idx, picked), shape=(math.prod(idx.type.shape[:-1], start=1), 1))
    n = linear.type.shape[0]
    flat = ctx.b.reshape(data, shape=(rows, width))
    updates = ctx.b.reshape(upd, shape=(n, width))
    out = ctx.b.scatter_elements(flat, ctx.expand(linear, (n, width)), updates, axis=0,
                                 reduction=ctx.attr("reduction", "none"))
    return [ctx.b.reshape(out, shape=data.type.shape)]


# -- index patterns -------------------------------------------------------------------------------------------
@converter("EyeLike")
def eye_like(ctx):
    shape = ctx.type(0).shape
    dtype = ir_dtype(ctx.attr("dtype"), ctx.where) if ctx.has_attr("dtype") else ctx.type(0).dtype
    row, col = (ctx.b.iota(shape=shape, axis=a, dtype=DType.i64) for a in (0, 1))
    on = ctx.b.eq(ctx.b.sub(col, row), ctx.scalar_like(ctx.attr("k", 0), row))
    return [ctx.b.cast(on, dtype=dtype)]


@converter("Trilu")
def trilu(ctx):
    x = ctx.x(0)
    k = ctx.known_scalar(1, "k", 0)
    shape = x.type.shape[-2:]
    diff = ctx.b.sub(*(ctx.b.iota(shape=shape, axis=a, dtype=DType.i64) for a in (1, 0)))
    keep = (ctx.b.ge if ctx.attr("upper", 1) else ctx.b.le)(diff, ctx.scalar_like(k, diff))
    return [ctx.b.where(ctx.expand(keep, x.type.shape), x, ctx.scalar_like(0, x))]


@converter("OneHot")
def one_hot(ctx):
    idx, depth = ctx.x(0), ctx.known_scalar(1, "depth")
    depth = depth if isinstance(depth, (int, SymExpr)) else int(depth)
    axis = ctx.attr("axis", -1)
    axis = axis + idx.type.rank + 1 if axis < 0 else axis
    shape = idx.type.shape[:axis] + (depth,) + idx.type.shape[axis:]
    i64 = ctx.cast(idx, DType.i64)
    i64 = ctx.b.where(ctx.b.lt(i64, ctx.scalar_like(0, i64)), ctx.b.add(i64, ctx.scalar_like(depth, i64)), i64)
    spread = ctx.expand(ctx.b.reshape(i64, shape=idx.type.shape[:axis] + (1,) + idx.type.shape[axis:]), shape)
    hit = ctx.b.eq(spread, ctx.b.iota(shape=shape, axis=axis, dtype=DType.i64))
    values = ctx.x(2)
    off, on = (ctx.expand(ctx.b.reshape(ctx.b.slice(values, starts=(i,), ends=(i + 1,)), shape=()), shape)
               for i in (0, 1))
    return [ctx.b.where(hit, on, off)]


@converter("DepthToSpace")
def depth_to_space(ctx):
    x, bs = ctx.x(0), ctx.attr("blocksize")
    n, c, h, w = x.type.shape
    if ctx.attr("mode", "DCR") == "DCR":
        y = ctx.b.transpose(ctx.b.reshape(x, shape=(n, bs, bs, c // (bs * bs), h, w)), perm=(0, 3, 4, 1, 5, 2))
    else:
        y = ctx.b.transpose(ctx.b.reshape(x, shape=(n, c // (bs * bs), bs, bs, h, w)), perm=(0, 1, 4, 2, 5, 3))
    return [ctx.b.reshape(y, shape=(n, c // (bs * bs), h * bs, w * bs))]


@converter("SpaceToDepth")
def space_to_depth(ctx):
    x, bs = ctx.x(0), ctx.attr("blocksize")
    n, c, h, w = x.type.shape
    perm = (0, 3, 5, 1, 2, 4) if ctx.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    y = ctx.b.transpose(ctx.b.reshape(x, shape=(n, c, h // bs, bs, w // bs, bs)), perm=perm)
    return [ctx.b.reshape(y, shape=(n, c * bs * bs, h // bs, w // bs))]


@converter("ReverseSequence")
def reverse_sequence(ctx):
    x, lens = ctx.x(0), ctx.cast(ctx.x(1), DType.i64)
    t_axis, b_axis = ctx.attr("time_axis", 0), ctx.attr("batch_axis", 1)
    t = ctx.b.iota(shape=x.type.shape, axis=t_axis, dtype=DType.i64)
    lens = ctx.expand(ctx.b.reshape(lens, shape=[d if i == b_axis else 1 for i, d in enumerate(x.type.shape)]),
                      x.type.shape)
    flipped = ctx.b.sub(ctx.b.sub(lens, ctx.scalar_like(1, lens)), t)
    return [ctx.b.gather_elements(x, ctx.b.where(ctx.b.lt(t, lens), flipped, t), axis=t_axis)]


# -- data-dependent shapes: only with known inputs -------------------------------------------------------------
@converter("Compress")
def compress(ctx):
    """The slices where the condition holds: picked at conversion time when it is known, else by a run-time
    NonZero (a data-dependent size), whose indices the gather checks against the axis."""
    x, axis = ctx.x(0), ctx.attr("axis")
    if axis is None:
        x, axis = ctx.b.reshape(x, shape=(x.type.numel,)), 0
    cond = ctx.known(1)
    if cond is None:
        flags, d = ctx.b.reshape(ctx.x(1), shape=(ctx.x(1).type.numel,)), x.type.shape[axis]
        if isinstance(d, int) and isinstance(flags.type.shape[0], int) and flags.type.shape[0] > d:
            flags = ctx.b.slice(flags, starts=(0,), ends=(d,), axes=(0,), steps=(1,))  # entries past the axis: none
        where = ctx.b.nonzero(flags)
        return [ctx.b.gather(x, ctx.b.reshape(where, shape=(where.type.shape[1],)), axis=axis)]
    picked = np.nonzero(np.asarray(cond).reshape(-1))[0]
    picked = picked[picked < x.type.shape[axis]] if isinstance(x.type.shape[axis], int) else picked
    return [ctx.b.gather(x, ctx.const(picked.astype(np.int64)), axis=axis)]


@folder("NonZero")
def fold_nonzero(ctx):
    k = ctx.known(0)
    if k is None or has_symbols(k):
        return None
    return [Tensor.of_array(np.array(np.nonzero(k), dtype=np.int64).reshape(k.ndim, -1))]


@converter("NonZero")
def nonzero(ctx):
    """A run-time count (the IR's data-dependent size, at most the element count); a scalar counts as [1]."""
    x = ctx.x(0)
    return [ctx.b.nonzero(x if x.type.rank else ctx.b.reshape(x, shape=(1,)))]


@converter("Unique")
def unique(ctx):
    """All four outputs; without an axis, over the flattened input."""
    x, axis = ctx.x(0), ctx.attr("axis")
    if axis is None:
        x, axis = ctx.b.reshape(x, shape=(x.type.numel,)), 0
    return list(ctx.b.unique(x, axis=axis, sorted=bool(ctx.attr("sorted", 1))))


@converter("NonMaxSuppression")
def non_max_suppression(ctx):
    """Omitted limits are ONNX's defaults: no boxes per class, an IoU threshold of 0, no score filter."""
    limit = ctx.x(2) if ctx.has(2) else ctx.scalar(0, DType.i64)
    iou = ctx.x(3) if ctx.has(3) else ctx.scalar(0.0, DType.f32)
    floor = ctx.x(4) if ctx.has(4) else ctx.scalar(0.0, DType.f32)
    return [ctx.b.non_max_suppression(ctx.x(0), ctx.x(1), limit, iou, floor, score_threshold=ctx.has(4),
                                      center_point_box=bool(ctx.attr("center_point_box", 0)))]


# -- scattering into fresh or cached tensors -----------------------------------------------------------------
@converter("MaxUnpool")
def max_unpool(ctx):
    """Values written at MaxPool's indices (flat over the unpooled shape) into zeros; a larger output_shape
    extends that with zeros at the end of each dim."""
    x, idx = ctx.x(0), ctx.cast(ctx.x(1), DType.i64)
    s = x.type.rank - 2
    kernel, strides = ctx.attr("kernel_shape"), ctx.attr("strides", [1] * s)
    pads = ctx.attr("pads", [0] * (2 * s))
    shape = x.type.shape[:2] + tuple((n - 1) * st + k - pb - pe for n, st, k, pb, pe in
                                     zip(x.type.shape[2:], strides, kernel, pads[:s], pads[s:]))
    zeros = ctx.b.full(0.0, (math.prod(shape, start=1),), x.type.dtype)
    flat = ctx.b.scatter_elements(zeros, ctx.b.reshape(idx, shape=(idx.type.numel,)),
                                  ctx.b.reshape(x, shape=(x.type.numel,)), axis=0)
    out = ctx.b.reshape(flat, shape=shape)
    if ctx.has(2):
        want = ctx.dims(2, "output_shape")
        out = ctx.b.pad(out, pads=(0,) * len(shape) + tuple(w - d for w, d in zip(want, shape)))
    return [out]


@converter("TensorScatter")
def tensor_scatter(ctx):
    """update written into the cache from write_indices[b] on along `axis` (wrapping in circular mode)."""
    cache, update = ctx.x(0), ctx.x(1)
    axis = ctx.attr("axis", -2)
    axis = axis + cache.type.rank if axis < 0 else axis
    pos = ctx.b.iota(shape=update.type.shape, axis=axis, dtype=DType.i64)
    if ctx.has(2):
        start = ctx.cast(ctx.x(2), DType.i64)
        start = ctx.b.reshape(start, shape=(start.type.shape[0],) + (1,) * (update.type.rank - 1))
        pos = ctx.b.add(pos, ctx.expand(start, update.type.shape))
    if ctx.attr("mode", "linear") == "circular":
        pos = ctx.b.mod(pos, ctx.scalar_like(cache.type.shape[axis], pos))
    return [ctx.b.scatter_elements(cache, pos, update, axis=axis)]


@converter("Col2Im")
def col2im(ctx):
    """Columns [N, C*K, L] summed back into the image: a scatter-add through a table of padded positions."""
    x = ctx.x(0)
    image, block = ctx.dims(1, "image_shape"), ctx.dims(2, "block_shape")
    r = len(image)
    dil, strides = ctx.attr("dilations", [1] * r), ctx.attr("strides", [1] * r)
    pads = ctx.attr("pads", [0] * (2 * r))
    padded = [d + pb + pe for d, pb, pe in zip(image, pads[:r], pads[r:])]
    counts = [(p - (dl * (k - 1) + 1)) // st + 1 for p, k, dl, st in zip(padded, block, dil, strides)]
    taps, blocks = np.indices(block).reshape(r, -1, 1), np.indices(counts).reshape(r, 1, -1)
    where = np.ravel_multi_index([blocks[d] * strides[d] + taps[d] * dil[d] for d in range(r)], padded)
    n, ck, cols = x.type.shape
    c = ck // math.prod(block)
    flat = ctx.b.reshape(x, shape=(n, c, where.size))
    index = ctx.expand(ctx.b.reshape(ctx.const(where.reshape(-1)), shape=(1, 1, where.size)), flat.type.shape)
    zeros = ctx.b.full(0.0, (n, c, math.prod(padded)), x.type.dtype)
    summed = ctx.b.reshape(ctx.b.scatter_elements(zeros, index, flat, axis=2, reduction="add"), shape=(n, c, *padded))
    return [ctx.b.slice(summed, starts=tuple(pads[:r]), ends=tuple(p - pe for p, pe in zip(padded, pads[r:])),
                        axes=tuple(range(2, 2 + r)))]
