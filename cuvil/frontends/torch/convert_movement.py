"""ATen data movement and tensor creation: views and reshapes, permutes, expand, slicing and selecting,
advanced indexing, joins and splits, gathers and embeddings, padding, `arange`/`full` and friends.

Result shapes come from the node's example value (sizes resolved, SymInts as symbolic dims), so views
never have to re-derive what PyTorch already computed.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ops.common import broadcast_shapes, norm_axis
from .context import INT_MAX, aten

_BIG = 2 ** 31 - 1  # the IR's "to the end" slice bound


@aten("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "flatten", "unflatten", "view_as", "reshape_as",
      "_reshape_alias", "view_copy", "squeeze_copy", "unsqueeze_copy")
def reshape(cx, x, *rest):
    shape = cx.out_shape()
    return x if x.type.shape == shape else cx.b.reshape(x, shape=shape)


@aten("permute", "permute_copy")
def permute(cx, x, dims):
    return cx.b.transpose(x, perm=[norm_axis(d, x.type.rank, "permute") for d in dims])


@aten("transpose", "swapaxes", "transpose_copy")
def transpose(cx, x, d0, d1):
    perm = list(range(x.type.rank))
    d0, d1 = norm_axis(d0, x.type.rank, "transpose"), norm_axis(d1, x.type.rank, "transpose")
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return cx.b.transpose(x, perm=perm)


@aten("t", "numpy_T")
def t(cx, x):
    return x if x.type.rank < 2 else cx.b.transpose(x)


@aten("expand", "expand_as", "broadcast_to", "expand_copy")
def expand(cx, x, *rest):
    return cx.broadcast(x, cx.out_shape())


@aten("slice", "slice_copy")
def slice_(cx, x, dim=0, start=None, end=None, step=1):
    start = 0 if start is None else start
    end = _BIG if end is None or (isinstance(end, int) and end >= INT_MAX) else end
    return cx.b.slice(x, starts=[start], ends=[end], axes=[dim], steps=[step])


@aten("narrow", "narrow_copy")
def narrow(cx, x, dim, start, length):
    return cx.b.slice(x, starts=[start], ends=[start + length], axes=[dim])


@aten("select", "select_copy")
def select(cx, x, dim, index):
    end = index + 1 if not isinstance(index, int) or index != -1 else _BIG
    return cx.b.reshape(cx.b.slice(x, starts=[index], ends=[end], axes=[dim]), shape=cx.out_shape())


@aten("cat", "concat", "concatenate")
def cat(cx, tensors, dim=0):
    dtype = cx.out_dtype()
    parts = [cx.tensor(v, dtype) for v in tensors if not (v.type.rank == 1 and v.type.shape[0] == 0)]
    return parts[0] if len(parts) == 1 else cx.b.concat(*parts, axis=dim)


@aten("stack")
def stack(cx, tensors, dim=0):
    rank = tensors[0].type.rank + 1
    axis = norm_axis(dim, rank, "stack")
    parts = [cx.b.reshape(v, shape=v.type.shape[:axis] + (1,) + v.type.shape[axis:]) for v in tensors]
    return cx.b.concat(*[cx.tensor(v, cx.out_dtype()) for v in parts], axis=axis)


@aten("split", "split_with_sizes", "chunk", "tensor_split", "split_copy", "split_with_sizes_copy")
def split(cx, x, _sizes, dim=0):
    axis = norm_axis(dim, x.type.rank, "split")
    sizes = [cx.walker.shape(o.shape)[axis] for o in cx.out]
    if len(sizes) == 1:
        return [x]
    return list(cx.b.split(x, axis=axis, sizes=sizes))


@aten("diagonal", "diagonal_copy")
def diagonal(cx, x, offset=0, dim1=0, dim2=1):
    """x's diagonal over dim1 and dim2 (moved last): the two axes flattened, then every (m + 1)-th element."""
    rank = x.type.rank
    d1, d2 = norm_axis(dim1, rank, "diagonal"), norm_axis(dim2, rank, "diagonal")
    n, m = x.type.shape[d1], x.type.shape[d2]
    if not (isinstance(n, int) and isinstance(m, int)):
        raise cx.error("diagonal over axes of symbolic size is not supported")
    rest = [a for a in range(rank) if a not in (d1, d2)]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    x = cx.b.reshape(cx.b.transpose(x, perm=rest + [d1, d2]), shape=[x.type.shape[a] for a in rest] + [n * m])
    start = offset if offset >= 0 else -offset * m
    if not length:
        return cx.b.slice(x, starts=[0], ends=[0], axes=[len(rest)])
    return cx.b.slice(x, starts=[start], ends=[start + (length - 1) * (m + 1) + 1], axes=[len(rest)], steps=[m + 1])


@aten("unbind", "unbind_copy")
def unbind(cx, x, dim=0):
    axis = norm_axis(dim, x.type.rank, "unbind")
    parts = cx.b.split(x, axis=axis, sizes=[1] * x.type.shape[axis])
    parts = parts if isinstance(parts, tuple) else (parts,)
    return [cx.b.reshape(p, shape=cx.out_shape(i)) for i, p in enumerate(parts)]


@aten("getitem")
def getitem(cx, seq, i):
    value = seq[i]
    if value is None:
        raise cx.error(f"output {i} of {cx.node.args[0]} is not computed by Cuvil (only the main result is)")
    return value


@aten("unfold", "unfold_copy")
def unfold(cx, x, dim, size, step):
    """Tensor.unfold: every window of `size` along `dim`, `step` apart, as a new last axis (a gather of the
    window positions i * step + k, then that axis moved to the end)."""
    if x.type.rank == 0:
        return cx.b.reshape(x, shape=cx.out_shape())
    dim = dim % x.type.rank
    length = x.type.shape[dim]
    if not isinstance(length, int):
        raise cx.error("unfold along a symbolic axis is not supported")
    windows = (length - size) // step + 1
    positions = np.arange(windows, dtype=np.int64)[:, None] * step + np.arange(size, dtype=np.int64)[None, :]
    y = cx.b.gather(x, cx.b.constant(positions, "unfold_index"), axis=dim)
    perm = [a for a in range(y.type.rank) if a != dim + 1] + [dim + 1]
    return cx.b.transpose(y, perm=perm)


@aten("as_strided", "as_strided_copy")
def as_strided(cx, x, size, stride, storage_offset=None):
    """A view of x's storage. PyTorch's decompositions use it to restride a result to a memory format (mean over
    a transposed input): x's own sizes, and its own strides on every axis longer than one, which is x itself.
    Any other view (static sizes) gathers x's elements at the storage positions it reads."""
    src = cx.node.args[0].meta["val"]
    shape, offset = cx.out_shape(), src.storage_offset() if storage_offset is None else storage_offset
    own = cx.walker.shape(src.stride()), cx.walker.shape([src.storage_offset()])[0]
    if shape == x.type.shape and offset == own[1] and all(n == 1 or a == b for n, a, b in zip(shape, stride, own[0])):
        return x
    ints = list(shape) + list(stride) + list(own[0]) + list(x.type.shape) + [offset, own[1]]
    if not all(isinstance(d, int) for d in ints):
        raise cx.error("as_strided with symbolic sizes is supported only as a restride of its input to its own layout")
    position = own[1] + _storage_positions(x.type.shape, own[0])  # x's elements in its storage
    element = np.full(int(position.max(initial=-1)) + 1, -1, np.int64)
    element[position.ravel()] = np.arange(position.size)
    want = offset + _storage_positions(shape, stride)
    if want.size and (want.max() >= element.size or (element[want] < 0).any()):
        raise cx.error(f"as_strided{tuple(shape)}, strides {tuple(stride)} reads storage outside its input's elements")
    flat = cx.b.reshape(x, shape=(position.size,))
    return cx.b.gather(flat, cx.b.constant(element[want], "as_strided_index"), axis=0)


def _storage_positions(shape, strides) -> np.ndarray:
    """The storage offset of each element of a strided view with these sizes and strides."""
    grids = np.meshgrid(*[np.arange(n, dtype=np.int64) * s for n, s in zip(shape, strides)], indexing="ij")
    return sum(grids, np.zeros(tuple(shape), np.int64))


# -- gathers ---------------------------------------------------------------------------------------------
# torch refuses a negative index in these three (eager raises IndexError), unlike x[i]
@aten("embedding")
def embedding(cx, weight, indices, *rest):
    return cx.b.gather(weight, _index(cx, indices), axis=0, negative=False)


@aten("index_select")
def index_select(cx, x, dim, index):
    if x.type.rank == 0:  # a 0-d tensor is indexed as a 1-element vector (its only index is 0)
        picked = cx.b.gather(cx.b.reshape(x, shape=(1,)), _index(cx, index), axis=0, negative=False)
        return cx.b.reshape(picked, shape=cx.out_shape())
    return cx.b.gather(x, _index(cx, index), axis=dim, negative=False)


@aten("gather")
def gather(cx, x, dim, index, sparse_grad=False):
    return cx.b.gather_elements(x, _index(cx, index), axis=dim, negative=False)


def _index(cx, idx):
    if idx.type.dtype is DType.bool:
        raise cx.error("a boolean mask together with other indices is not supported; index with the mask alone")
    return idx if idx.type.dtype in (DType.i32, DType.i64) else cx.b.cast(idx, dtype=DType.i64)


def _masked(cx, x, axis: int, mask):
    """x[..., mask, ...] with the mask over axes axis.. of x: those axes flattened into one, gathered at the mask's
    nonzero positions (a size computed at run time)."""
    k, shape = mask.type.rank, x.type.shape
    if tuple(mask.type.shape) != tuple(shape[axis:axis + k]):
        raise cx.error(f"a boolean mask of shape {mask.type} does not match axes {axis}.. of {x.type}")
    n = mask.type.numel
    rows = cx.b.reshape(x, shape=shape[:axis] + (n,) + shape[axis + k:])
    where = cx.b.nonzero(cx.b.reshape(mask, shape=(n,)))
    return cx.b.gather(rows, cx.b.reshape(where, shape=(where.type.shape[1],)), axis=axis)


@aten("nonzero", "argwhere")
def nonzero(cx, x):
    if not x.type.rank:  # a 0-d tensor: one (empty) position when it is nonzero, [count, 0] as PyTorch gives
        flat = cx.b.transpose(cx.b.nonzero(cx.b.reshape(x, shape=(1,))), perm=(1, 0))
        return cx.b.slice(flat, starts=(0,), ends=(0,), axes=(1,))
    return cx.b.transpose(cx.b.nonzero(x), perm=(1, 0))


@aten("masked_select")
def masked_select(cx, x, mask):
    shape = broadcast_shapes(x.type.shape, mask.type.shape)
    flat = cx.b.reshape(cx.broadcast(x, shape), shape=(math.prod(shape, start=1),))
    return _masked(cx, flat, 0, cx.b.reshape(cx.broadcast(mask, shape), shape=flat.type.shape))


@aten("index")
def index(cx, x, indices):
    """Advanced indexing: the index tensors broadcast to one shape B; the indexed axes are flattened into one
    and gathered with the combined flat index. B replaces them in place when they are adjacent, else leads.
    A boolean mask alone selects through a run-time nonzero."""
    axes = [i for i, v in enumerate(indices) if v is not None]
    if len(axes) == 1 and indices[axes[0]].type.dtype is DType.bool:
        return _masked(cx, x, axes[0], indices[axes[0]])
    if len(axes) == 1:
        return cx.b.gather(x, _index(cx, indices[axes[0]]), axis=axes[0])
    merged, flat, lead = _flattened(cx, x, indices)
    out = cx.b.gather(merged, flat, axis=0)
    return cx.b.transpose(out, perm=_b_in_place(flat.type.rank, lead, out.type.rank)) if lead else out


@aten("index_put")
def index_put(cx, x, indices, values, accumulate=False):
    """x[indices] = values (or += with accumulate): the indexing of `index` run backwards with a
    `scatter_elements` on the merged axis."""
    merged, flat, lead = _flattened(cx, x, indices)
    b_rank, rest = flat.type.rank, merged.type.shape[1:]
    shape = rest[:lead] + flat.type.shape + rest[lead:]  # the shape x[indices] has
    values = cx.tensor(values, x.type.dtype, shape)
    if lead:
        values = cx.b.transpose(values, perm=_inverse(_b_in_place(b_rank, lead, len(shape))))
    n = math.prod(flat.type.shape, start=1)
    values = cx.b.reshape(values, shape=(n,) + rest)
    idx = cx.broadcast(cx.b.reshape(flat, shape=(n,) + (1,) * len(rest)), (n,) + rest)
    out = cx.b.scatter_elements(merged, idx, values, axis=0, reduction="add" if accumulate else "none")
    axes = [i for i, v in enumerate(indices) if v is not None]
    others = [i for i in range(x.type.rank) if i not in axes]
    out = cx.b.reshape(out, shape=tuple(x.type.shape[a] for a in axes) + rest)
    return cx.b.transpose(out, perm=_inverse(axes + others))


@aten("slice_scatter", "select_scatter")
def slice_scatter(cx, x, src, dim=0, start=None, end=None, step=1):
    """x with x[start:end:step] along `dim` replaced by src (select_scatter: one index, src without the axis).
    A unit step joins the pieces; other steps scatter src's rows to their positions."""
    axis, size = norm_axis(dim, x.type.rank, cx.op_name), x.type.shape[norm_axis(dim, x.type.rank, cx.op_name)]
    start = 0 if start is None else start
    start = start + size if isinstance(start, int) and start < 0 else start
    if cx.op_name == "select_scatter":
        src = cx.b.reshape(src, shape=src.type.shape[:axis] + (1,) + src.type.shape[axis:])
    src = cx.tensor(src, x.type.dtype)
    n = src.type.shape[axis]
    if step != 1:
        idx = cx.b.iota(shape=src.type.shape, axis=axis, dtype=DType.i64)
        idx = cx.b.add(cx.b.mul(idx, cx.tensor(step, DType.i64, idx.type.shape)),
                       cx.tensor(start, DType.i64, idx.type.shape))
        return cx.b.scatter_elements(x, idx, src, axis=axis, reduction="none")
    stop = start + n
    parts = [] if isinstance(start, int) and start == 0 else [cx.b.slice(x, starts=[0], ends=[start], axes=[axis])]
    parts.append(src)
    if not (isinstance(stop, int) and stop == size):
        parts.append(cx.b.slice(x, starts=[stop], ends=[_BIG], axes=[axis]))
    return parts[0] if len(parts) == 1 else cx.b.concat(*parts, axis=axis)


@aten("copy", "copy_")
def copy(cx, x, src, non_blocking=False):
    """x's type and shape with src's values (what `x[...] = src` leaves after functionalisation)."""
    return cx.tensor(src, x.type.dtype, x.type.shape)


def _flattened(cx, x, indices):
    """(x with the indexed axes moved first and merged, the combined flat index, lead): lead is where B goes
    in x[indices] when the indexed axes are adjacent (0 when B leads)."""
    axes = [i for i, v in enumerate(indices) if v is not None]
    idx = cx.operands([_index(cx, indices[a]) for a in axes], DType.i64)
    rest = [i for i in range(x.type.rank) if i not in axes]
    moved = cx.b.transpose(x, perm=axes + rest) if axes != list(range(len(axes))) else x
    sizes = [x.type.shape[a] for a in axes]
    merged = cx.b.reshape(moved, shape=(math.prod(sizes),) + tuple(x.type.shape[i] for i in rest))
    combined = None
    for k, (v, size) in enumerate(zip(idx, sizes)):
        v = _wrap(cx, v, size)
        stride = math.prod(sizes[k + 1:])
        v = v if stride == 1 else cx.b.mul(v, cx.tensor(stride, DType.i64, v.type.shape))
        combined = v if combined is None else cx.b.add(combined, v)
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    return merged, combined, axes[0] if adjacent else 0


def _b_in_place(b_rank: int, lead: int, rank: int) -> list:
    """The permutation taking [B, rest] to [rest[:lead], B, rest[lead:]]."""
    return list(range(b_rank, b_rank + lead)) + list(range(b_rank)) + list(range(b_rank + lead, rank))


def _inverse(perm) -> list:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return out


_SCATTER_REDUCE = {None: "none", "add": "add", "sum": "add", "multiply": "mul", "prod": "mul", "amax": "max",
                   "amin": "min"}


@aten("scatter", "scatter_add", "scatter_reduce")
def scatter(cx, x, dim, idx, src, reduce=None, include_self=True):
    """ONNX ScatterElements semantics, which PyTorch's scatter family shares; src beyond the index's extent
    is unused, so it is sliced to the index's shape. Without include_self the scattered-to places first hold the
    sum's or product's identity (for max and min: one of the values scattered there); a mean divides by the number
    of values each place received (itself included)."""
    reduce = "add" if cx.op_name == "scatter_add" else reduce
    if reduce not in _SCATTER_REDUCE and reduce != "mean":
        raise cx.error(f"scatter reduction {reduce!r} is not supported")
    shape, dt = idx.type.shape, x.type.dtype
    if hasattr(src, "type") and src.type.shape != shape:
        src = cx.b.slice(src, starts=[0] * len(shape), ends=list(shape), axes=list(range(len(shape))))
    src, index = cx.tensor(src, dt, shape), _index(cx, idx)
    reduction = "add" if reduce == "mean" else _SCATTER_REDUCE[reduce]
    if not include_self and reduction != "none":
        first = cx.tensor(int(reduction == "mul"), dt, shape) if reduction in ("add", "mul") else src
        x = cx.b.scatter_elements(x, index, first, axis=dim, reduction="none")
    out = cx.b.scatter_elements(x, index, src, axis=dim, reduction=reduction)
    if reduce != "mean":
        return out
    count = cx.b.scatter_elements(cx.tensor(int(include_self), dt, x.type.shape), index, cx.tensor(1, dt, shape),
                                  axis=dim, reduction="add")
    count = cx.b.max(count, cx.tensor(1, dt, x.type.shape))  # a place nothing reached keeps its value
    return cx.b.div(out, count) if dt.is_float else cx.b.floordiv(out, count)


@aten("index_reduce")
def index_reduce(cx, x, dim, index, src, reduce, include_self=True):
    """scatter_reduce with the 1-D index spread along `dim` over the source, which is how PyTorch defines it."""
    if x.type.rank == 0:  # a 0-d tensor reduces with its 1-element source as a 1-d one
        one = [cx.b.reshape(v, shape=(1,)) for v in (x, index, src)]
        return cx.b.reshape(index_reduce(cx, one[0], 0, one[1], one[2], reduce, include_self), shape=())
    axis = norm_axis(dim, x.type.rank, "index_reduce")
    along = [1] * x.type.rank
    along[axis] = index.type.shape[0]
    spread = cx.b.broadcast_to(cx.b.reshape(index, shape=along), shape=list(src.type.shape))
    return scatter(cx, x, axis, spread, src, reduce, include_self)


@aten("sort", "argsort")
def sort(cx, x, *args):
    """A stable full `topk`: ascending takes the smallest first."""
    overload = cx.node.target._overloadname
    if overload == "stable":
        dim, descending = args[1], args[2]
    else:
        dim, descending = (args + (-1, False))[:2]
    axis = norm_axis(dim, x.type.rank, "sort")
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise cx.error("sorting along a symbolic axis is not supported")
    values, idx = cx.b.topk(x, k=n, axis=axis, largest=bool(descending))
    return idx if cx.op_name == "argsort" else (values, idx)


def _wrap(cx, v, size):
    """Negative indices count from the end (per axis, before they are combined)."""
    zero = cx.tensor(0, DType.i64, v.type.shape)
    return cx.b.where(cx.b.lt(v, zero), cx.b.add(v, cx.tensor(size, DType.i64, v.type.shape)), v)


# -- padding, repeats, masks -----------------------------------------------------------------------------
@aten("constant_pad_nd", "pad")
def constant_pad(cx, x, pad, value=0.0, *rest):
    """PyTorch lists (begin, end) pairs from the last axis backwards; the IR wants all begins, then all ends."""
    if rest and rest[0] not in (None, "constant"):
        raise cx.error(f"padding mode {rest[0]!r} is not supported")
    rank, n = x.type.rank, len(pad) // 2
    begins, ends = [0] * rank, [0] * rank
    for k in range(n):
        begins[rank - 1 - k], ends[rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    return cx.b.pad(x, pads=begins + ends, value=0.0 if value is None else float(value))


@aten("repeat")
def repeat(cx, x, repeats):
    """`tile`; symbolic counts (DeBERTa's relative positions repeated per batch) as [1, n] -> [r, n] -> [r * n]."""
    lead = len(repeats) - x.type.rank
    x = cx.b.reshape(x, shape=(1,) * lead + x.type.shape) if lead else x
    if all(isinstance(r, int) for r in repeats):
        return cx.b.tile(x, repeats=list(repeats))
    pairs = list(zip(repeats, x.type.shape))
    spread = cx.b.reshape(x, shape=tuple(d for _, n in pairs for d in (1, n)))
    wide = cx.b.broadcast_to(spread, shape=tuple(d for pair in pairs for d in pair))
    return cx.b.reshape(wide, shape=cx.out_shape())


@aten("tril", "triu")
def tril(cx, x, diagonal=0):
    """Keep col - row <= diagonal (tril) or >= diagonal (triu), from two iotas over the last two axes."""
    shape = x.type.shape
    rows = cx.b.iota(shape=shape, axis=x.type.rank - 2)
    cols = cx.b.iota(shape=shape, axis=x.type.rank - 1)
    offset = cx.b.sub(cols, rows)
    diag = cx.tensor(diagonal, DType.i64, shape)
    keep = cx.b.le(offset, diag) if cx.op_name == "tril" else cx.b.ge(offset, diag)
    return cx.b.where(keep, x, cx.tensor(0, x.type.dtype, shape))


@aten("flip")
def flip(cx, x, dims):
    axes = sorted(norm_axis(d, x.type.rank, "flip") for d in dims)
    return cx.b.slice(x, starts=[-1] * len(axes), ends=[-_BIG] * len(axes), axes=axes, steps=[-1] * len(axes))


# -- creation --------------------------------------------------------------------------------------------
@aten("arange")
def arange(cx, *args):
    """start + step * iota; the bounds may be symbolic sizes (a position offset in a decoder)."""
    overload = cx.node.target._overloadname
    start = args[0] if overload in ("start", "start_step", "start_out") else 0
    step = args[2] if overload == "start_step" else 1
    shape, dtype = cx.out_shape(), cx.out_dtype()
    v = cx.b.iota(shape=shape, dtype=dtype)
    if step != 1:
        v = cx.b.mul(v, cx.tensor(step, dtype, shape))
    return v if isinstance(start, int) and start == 0 else cx.b.add(v, cx.tensor(start, dtype, shape))


@aten("full", "full_like", "new_full")
def full(cx, *args):
    value = args[2] if cx.op_name == "new_full" else args[1]
    return cx.tensor(value, cx.out_dtype(), cx.out_shape())


@aten("zeros", "zeros_like", "new_zeros", "empty", "empty_like", "new_empty", "empty_strided", "empty_permuted")
def zeros(cx, *args):
    return cx.b.full(0.0, cx.out_shape(), cx.out_dtype())


@aten("ones", "ones_like", "new_ones")
def ones(cx, *args):
    return cx.b.full(1.0, cx.out_shape(), cx.out_dtype())


@aten("fill")
def fill(cx, x, value):
    return cx.tensor(value, x.type.dtype, x.type.shape)
