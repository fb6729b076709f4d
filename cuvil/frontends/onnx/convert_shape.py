"""Shape ops and shape arithmetic: Shape, Size, Constant, ConstantOfShape, Range, Reshape, Flatten, Squeeze,
Unsqueeze, Concat, Gather, Slice, Expand. Each has a converter and, where exported models compute shapes
with it, a folder that evaluates known values (symbolic sizes included) at conversion time."""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from ...ir.dtypes import DType
from .context import broadcast_dims
from .fold import FOLD_LIMIT, dims_tensor, has_symbols, tidy
from .registry import converter, folder
from .tensors import Tensor


def _known_object(ctx, i: int):
    """Input i's known contents as an object array when it holds symbols, else None (concrete values are
    folded by running the converter)."""
    k = ctx.known(i)
    return k if has_symbols(k) else None


# -- sources of known values -----------------------------------------------------------------------------
@folder("Shape")
def shape(ctx):
    dims = ctx.type(0).shape
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return [dims_tensor(dims[slice(start, end)])]


@folder("Size")
def size(ctx):
    return [tidy(np.array(ctx.type(0).numel, dtype=object), TensorProto.INT64)]


_CONSTANT_ATTRS = {"value_float": (np.float32, TensorProto.FLOAT), "value_floats": (np.float32, TensorProto.FLOAT),
                   "value_int": (np.int64, TensorProto.INT64), "value_ints": (np.int64, TensorProto.INT64)}


@converter("Constant")
def constant(ctx):
    if ctx.has_attr("value"):
        elem = next(a.t.data_type for a in ctx.node.attribute if a.name == "value")
        return [Tensor.of_array(ctx.attr("value"), elem, name=ctx.node.output[0])]
    for name, (dtype, elem) in _CONSTANT_ATTRS.items():
        if ctx.has_attr(name):
            return [Tensor(known=np.asarray(ctx.attr(name), dtype), elem=elem)]
    raise ctx.unsupported("only tensor, float(s) and int(s) constants are supported (no strings, no sparse)")


def _fill(ctx, value: np.ndarray, shape):
    """A tensor of `shape` filled with a scalar array: `full` when the float attribute holds it exactly."""
    dtype = DType.from_numpy(value.dtype)
    v = value.reshape(-1)[0].item()
    if float(v) == v or (isinstance(v, float) and math.isnan(v)):
        return ctx.b.full(float(v), shape, dtype)
    return ctx.b.broadcast_to(ctx.const(value.reshape(())), shape=tuple(shape))


@converter("ConstantOfShape")
def constant_of_shape(ctx):
    value = ctx.attr("value")
    value = np.zeros(1, np.float32) if value is None else value
    return [_fill(ctx, np.asarray(value), ctx.dims(0, "the shape"))]


@converter("Range")
def range_(ctx):
    start, limit, delta = (ctx.known_scalar(i, name) for i, name in enumerate(("start", "limit", "delta")))
    dtype = ctx.type(0).dtype
    if dtype.is_float:
        n = max(math.ceil((limit - start) / delta), 0)
    elif isinstance(start, int) and isinstance(delta, int):
        span = limit - start
        n = (span + delta - 1) // delta if delta > 0 else (-span - delta - 1) // -delta
        n = max(n, 0) if isinstance(n, int) else n
    else:
        raise ctx.unsupported("start and delta must be known integers when limit is symbolic")
    ramp = ctx.b.iota(shape=(n,), dtype=dtype)
    return [ctx.b.add(ctx.b.mul(ramp, ctx.scalar_like(delta, ramp)), ctx.scalar_like(start, ramp))]


# -- reshaping ---------------------------------------------------------------------------------------------
def reshape_target(ctx, in_shape: tuple, shape: tuple) -> tuple:
    """ONNX Reshape's shape with its 0s resolved ("copy the input's dim") unless allowzero."""
    if ctx.attr("allowzero", 0):
        return shape
    return tuple(in_shape[i] if isinstance(d, int) and d == 0 else d for i, d in enumerate(shape))


@converter("Reshape")
def reshape(ctx):
    return [ctx.b.reshape(ctx.x(0), shape=reshape_target(ctx, ctx.type(0).shape, ctx.dims(1, "the shape")))]


@folder("Reshape")
def fold_reshape(ctx):
    k = _known_object(ctx, 0)
    if k is None or ctx.known(1) is None or has_symbols(ctx.known(1)):
        return None
    return [Tensor(known=k.reshape(reshape_target(ctx, k.shape, ctx.dims(1, "shape"))), elem=ctx.tensor(0).elem)]


def flatten_shape(ctx, shape: tuple) -> tuple:
    axis = ctx.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    return (math.prod(shape[:axis], start=1), math.prod(shape[axis:], start=1))


@converter("Flatten")
def flatten(ctx):
    return [ctx.b.reshape(ctx.x(0), shape=flatten_shape(ctx, ctx.type(0).shape))]


def _axes(ctx, rank: int, input_index: int = 1):
    """Squeeze/Unsqueeze/Reduce axes: an attribute before opset 13, an optional input from then on."""
    if ctx.has_attr("axes"):
        axes = ctx.attr("axes")
    elif ctx.has(input_index):
        axes = list(ctx.dims(input_index, "axes"))
    else:
        return None
    return sorted(a + rank if a < 0 else a for a in axes)


def squeeze_shape(ctx, shape: tuple) -> tuple:
    axes = _axes(ctx, len(shape))
    if axes is None:
        return tuple(d for d in shape if d != 1)
    for a in axes:
        if isinstance(shape[a], int) and shape[a] != 1:
            raise ctx.error(f"cannot squeeze dim {a} of size {shape[a]}")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def unsqueeze_shape(ctx, shape: tuple) -> tuple:
    rank = len(shape) + len(_axes(ctx, 0) or ())
    axes = _axes(ctx, rank) or []
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        raise ctx.error(f"axes {axes} must be distinct and within the result's rank {rank}")
    rest = iter(shape)
    return tuple(1 if i in axes else next(rest) for i in range(rank))


for _op, _rule in (("Squeeze", squeeze_shape), ("Unsqueeze", unsqueeze_shape)):
    def _convert(ctx, rule=_rule):
        return [ctx.b.reshape(ctx.x(0), shape=rule(ctx, ctx.type(0).shape))]

    def _fold(ctx, rule=_rule):
        k = _known_object(ctx, 0)
        return None if k is None else [Tensor(known=k.reshape(rule(ctx, k.shape)), elem=ctx.tensor(0).elem)]
    converter(_op)(_convert)
    folder(_op)(_fold)


@folder("Flatten")
def fold_flatten(ctx):
    k = _known_object(ctx, 0)
    return None if k is None else [Tensor(known=k.reshape(flatten_shape(ctx, k.shape)), elem=ctx.tensor(0).elem)]


# -- joining, picking, slicing -------------------------------------------------------------------------------
@converter("Concat")
def concat(ctx):
    values = [ctx.x(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    return [ctx.b.concat(*values, axis=ctx.attr("axis"))]


@folder("Concat")
def fold_concat(ctx):
    ks = [ctx.known(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    if any(k is None for k in ks) or not any(has_symbols(k) for k in ks):
        return None
    return [tidy(np.concatenate([k.astype(object) for k in ks], axis=ctx.attr("axis")), ctx.tensor(0).elem)]


@converter("Gather")
def gather(ctx):
    return [ctx.b.gather(ctx.x(0), ctx.x(1), axis=ctx.attr("axis", 0))]


@folder("Gather")
def fold_gather(ctx):
    data, idx = _known_object(ctx, 0), ctx.known(1)
    if data is None or idx is None or has_symbols(idx):
        return None
    axis = ctx.attr("axis", 0)
    axis = axis + data.ndim if axis < 0 else axis
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [tidy(np.take(data, idx, axis=axis), ctx.tensor(0).elem)]


def slice_params(ctx, rank: int) -> tuple:
    """(starts, ends, axes, steps): attributes before opset 10, inputs from then on."""
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes", list(range(len(starts)))), [1] * len(starts)
    else:
        starts, ends = ctx.dims(1, "starts"), ctx.dims(2, "ends")
        axes = ctx.dims(3, "axes") if ctx.has(3) else tuple(range(len(starts)))
        steps = ctx.dims(4, "steps") if ctx.has(4) else (1,) * len(starts)
    return tuple(starts), tuple(ends), tuple(a + rank if a < 0 else a for a in axes), tuple(steps)


@converter("Slice")
def slice_(ctx):
    x = ctx.x(0)
    if ctx.opset >= 10 and (ctx.known(1) is None or ctx.known(2) is None):
        computed = _computed_slice(ctx, x)
        if computed is not None:
            return [computed]
    starts, ends, axes, steps = slice_params(ctx, x.type.rank)
    if not starts:
        return [x]
    return [ctx.b.slice(x, starts=starts, ends=ends, axes=axes, steps=steps)]


def _computed_slice(ctx, x):
    """One axis, unit step, bounds known only at run time: a `dynamic_slice` (its length is a data-dependent size);
    None for any other slice (refused as before, naming the input that must be known)."""
    if ctx.type(1).numel != 1 or ctx.type(2).numel != 1 or (ctx.has(4) and ctx.known(4) is None):
        return None
    axes = ctx.dims(3, "axes") if ctx.has(3) else (0,)
    if len(axes) != 1 or (ctx.has(4) and tuple(ctx.dims(4, "steps")) != (1,)):
        return None
    start, end = (ctx.b.reshape(ctx.cast(ctx.x(i), DType.i64), shape=(1,)) for i in (1, 2))
    return ctx.b.dynamic_slice(start, end, x, axis=axes[0] % max(x.type.rank, 1))


@folder("Slice")
def fold_slice(ctx):
    k = _known_object(ctx, 0)
    if k is None or any(ctx.has(i) and (ctx.known(i) is None or has_symbols(ctx.known(i))) for i in range(1, 5)):
        return None
    index = [slice(None)] * k.ndim
    for s, e, a, st in zip(*slice_params(ctx, k.ndim)):
        index[a] = slice(s, e, st)
    return [tidy(k[tuple(index)], ctx.tensor(0).elem)]


@converter("Expand")
def expand(ctx):
    x = ctx.x(0)
    return [ctx.expand(x, broadcast_dims(x.type.shape, ctx.dims(1, "the shape"), ctx))]


@folder("Expand")
def fold_expand(ctx):
    k = _known_object(ctx, 0)
    if k is None or ctx.known(1) is None or has_symbols(ctx.known(1)):
        return None
    shape = broadcast_dims(k.shape, ctx.dims(1, "the shape"), ctx)
    if math.prod(shape) > FOLD_LIMIT:
        return None
    return [Tensor(known=np.broadcast_to(k, shape).copy(), elem=ctx.tensor(0).elem)]


@folder("Identity")
def fold_identity(ctx):
    return [ctx.tensor(0)] if ctx.known(0) is not None else None
