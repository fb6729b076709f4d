"""Sequences and optionals, resolved at conversion time: a sequence is a tuple of Tensors (its length known when
the model is converted), an optional is present or absent. Positions, splits and presence must be known then
(constants, shape arithmetic, or small graph inputs the model is specialized on); what remains in the IR is
ordinary tensor code, so it compiles like any other."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ...errors import IndexRangeError
from ...ir.dtypes import DType
from .registry import converter
from .tensors import Growing, OptionalValue, Sequence, Stacked, Tensor, type_name

MAX_LENGTH = 4096  # a longer sequence would unroll into more IR than any real model holds


def sequence(ctx, i: int) -> Sequence:
    """Input i, which must be a sequence."""
    v = ctx.value(i)
    if not isinstance(v, Sequence):
        raise ctx.error(f"input {i} must be a sequence, got {describe(v)}")
    return v


def describe(v) -> str:
    return "a tensor" if isinstance(v, Tensor) else v.describe()


def make_sequence(ctx, items, elem: int) -> Sequence:
    """A sequence of these Tensors, all of element type `elem`, no longer than MAX_LENGTH."""
    for j, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise ctx.error(f"a sequence holds tensors; element {j} is {describe(t)}")
        if t.elem != elem:
            raise ctx.error(f"sequence elements must share one element type: element {j} is {type_name(t.elem)}, "
                            f"the sequence holds {type_name(elem)}")
    if len(items) > MAX_LENGTH:
        raise ctx.unsupported(f"a sequence of {len(items)} elements is longer than Cuvil unrolls ({MAX_LENGTH})")
    return Sequence(items, elem)


def position(ctx, i: int, length: int, default: int, inserting: bool = False) -> int:
    """A known position input (negative counts from the end), checked against the sequence's length."""
    pos = ctx.known_scalar(i, "position", default)
    if not isinstance(pos, int):
        raise ctx.needs_value(i, "position")
    top = length if inserting else length - 1
    at = pos + length if pos < 0 else pos
    if not 0 <= at <= top:
        raise IndexRangeError(f"{ctx.where}: position {pos} is out of range for a sequence of {length} elements "
                              f"(allowed {-length} to {top})", ctx.b.loc)
    return at


@converter("SequenceConstruct")
def sequence_construct(ctx):
    items = [ctx.tensor(i) for i in range(len(ctx.inputs))]
    return [make_sequence(ctx, items, items[0].elem)]


@converter("SequenceEmpty")
def sequence_empty(ctx):
    return [Sequence((), ctx.attr("dtype", TensorProto.FLOAT))]


@converter("SequenceLength")
def sequence_length(ctx):
    if isinstance(ctx.value(0), Stacked):
        return [Tensor(value=ctx.scalar(ctx.value(0).tensor.type.shape[0], DType.i64))]
    return [Tensor.of_array(np.array(len(sequence(ctx, 0).items), np.int64))]


@converter("SequenceAt")
def sequence_at(ctx):
    if isinstance(ctx.value(0), Stacked):  # a row of the stack; gather checks the position at run time
        rows = ctx.value(0).tensor
        at = ctx.b.reshape(ctx.cast(ctx.x(1), DType.i64), shape=())
        return [Tensor(value=ctx.b.gather(ctx.graph.materialize(rows, ctx.b.loc), at, axis=0), elem=rows.elem)]
    seq = sequence(ctx, 0)
    return [seq.items[position(ctx, 1, len(seq.items), None)]]


@converter("SequenceInsert")
def sequence_insert(ctx):
    if isinstance(ctx.value(0), Growing):
        grown = ctx.value(0)
        if ctx.has(2) or grown.row is not None:
            raise ctx.unsupported("a sequence grown by a Loop of run-time trip count takes one element per "
                                  "iteration, at its end")
        return [Growing(grown.elem, grown, ctx.tensor(1))]
    seq, items = sequence(ctx, 0), list(sequence(ctx, 0).items)
    items.insert(position(ctx, 2, len(items), len(items), inserting=True), ctx.tensor(1))
    return [make_sequence(ctx, items, seq.elem)]


@converter("SequenceErase")
def sequence_erase(ctx):
    seq, items = sequence(ctx, 0), list(sequence(ctx, 0).items)
    del items[position(ctx, 1, len(items), -1)]
    return [Sequence(items, seq.elem)]


@converter("SplitToSequence")
def split_to_sequence(ctx):
    x = ctx.x(0)
    axis = ctx.attr("axis", 0)
    axis = axis + x.type.rank if axis < 0 else axis
    d = x.type.shape[axis] if 0 <= axis < x.type.rank else None
    if d is None:
        raise ctx.error(f"axis {ctx.attr('axis', 0)} is out of range for rank {x.type.rank}")
    if not ctx.has(1):
        parts = _split(ctx, x, axis, d, 1)
        if ctx.attr("keepdims", 1):
            return [make_sequence(ctx, parts, ctx.tensor(0).elem)]
        shape = x.type.shape[:axis] + x.type.shape[axis + 1:]
        return [make_sequence(ctx, [Tensor(value=ctx.b.reshape(p.value, shape=shape), elem=p.elem) for p in parts],
                              ctx.tensor(0).elem)]
    sizes = ctx.dims(1, "split")
    if ctx.tensor(1).type.rank == 0:
        return [make_sequence(ctx, _split(ctx, x, axis, d, sizes[0]), ctx.tensor(0).elem)]
    return [make_sequence(ctx, _parts(ctx, x, axis, sizes), ctx.tensor(0).elem)]


def _split(ctx, x, axis: int, d, chunk) -> list:
    """x cut along `axis` into pieces of `chunk` (the last one shorter), so the size there must be known."""
    if not isinstance(d, int) or not isinstance(chunk, int):
        raise ctx.unsupported(f"splitting a dim of symbolic size {d} into a sequence gives a length known only at "
                              f"run time; Cuvil's sequences have a length known when the model is converted")
    if chunk <= 0:
        raise ctx.error(f"split must be positive, got {chunk}")
    sizes = [chunk] * (d // chunk) + ([d % chunk] if d % chunk else [])
    return _parts(ctx, x, axis, sizes)


def _parts(ctx, x, axis: int, sizes) -> list:
    if not sizes:
        return []
    out = ctx.b.split(x, axis=axis, sizes=tuple(sizes))
    return [Tensor(value=v, elem=ctx.tensor(0).elem) for v in (out if isinstance(out, tuple) else (out,))]


@converter("ConcatFromSequence")
def concat_from_sequence(ctx):
    if isinstance(ctx.value(0), Stacked):
        return [_concat_stacked(ctx, ctx.value(0).tensor, ctx.attr("axis"), ctx.attr("new_axis", 0))]
    seq = sequence(ctx, 0)
    if not seq.items:
        raise ctx.error("cannot concatenate an empty sequence (its result has no shape)")
    values = [ctx.graph.materialize(t, ctx.b.loc) for t in seq.items]
    axis = ctx.attr("axis")
    if ctx.attr("new_axis", 0):
        rank = values[0].type.rank + 1
        axis = axis + rank if axis < 0 else axis
        values = [ctx.b.reshape(v, shape=v.type.shape[:axis] + (1,) + v.type.shape[axis:]) for v in values]
    out = ctx.b.concat(*values, axis=axis) if len(values) > 1 else values[0]
    return [Tensor(value=out, elem=seq.elem)]


def _concat_stacked(ctx, rows: Tensor, axis: int, new_axis: int) -> Tensor:
    """The rows of a stack [n, *element] concatenated (or stacked, with new_axis) along `axis` of the elements:
    the stack axis moved next to `axis`, then merged into it."""
    stack = ctx.graph.materialize(rows, ctx.b.loc)
    shape = tuple(stack.type.shape)
    rank = len(shape) - 1 + new_axis
    axis = axis + rank if axis < 0 else axis
    perm = list(range(1, len(shape)))
    perm.insert(axis, 0)
    moved = ctx.b.transpose(stack, perm=tuple(perm)) if perm != sorted(perm) else stack
    if new_axis:
        return Tensor(value=moved, elem=rows.elem)
    dims = list(moved.type.shape)
    merged = dims[:axis] + [dims[axis] * dims[axis + 1]] + dims[axis + 2:]
    return Tensor(value=ctx.b.reshape(moved, shape=tuple(merged)), elem=rows.elem)


@converter("SequenceMap")
def sequence_map(ctx):
    """The body once per position, unrolled: input j is element i of each sequence, or a tensor as it is."""
    body = ctx.attr("body")
    args = [ctx.value(i) for i in range(len(ctx.inputs))]
    lengths = {len(a.items) for a in args if isinstance(a, Sequence)}
    if not isinstance(args[0], Sequence) or len(lengths) != 1:
        raise ctx.error(f"input 0 must be a sequence and all sequence inputs of one length, got "
                        f"{', '.join(describe(a) for a in args)}")
    n = lengths.pop()
    rows = [ctx.graph.run_subgraph(ctx, body, ctx.b, [a.items[i] if isinstance(a, Sequence) else a for a in args])
            for i in range(n)]
    elems = [_elem_of(o) for o in body.output]
    return [make_sequence(ctx, [row[k] for row in rows], rows[0][k].elem if rows else elems[k])
            for k in range(len(body.output))]


def _elem_of(value_info) -> int:
    t = value_info.type
    return t.tensor_type.elem_type if t.WhichOneof("value") == "tensor_type" else TensorProto.FLOAT


@converter("Optional")
def optional(ctx):
    if ctx.has(0):
        return [OptionalValue(ctx.value(0))]
    return [OptionalValue(None, ctx.attr("type"))]


@converter("OptionalHasElement")
def optional_has_element(ctx):
    v = ctx.value(0) if ctx.has(0) else None
    present = v is not None and not (isinstance(v, OptionalValue) and v.item is None)
    return [Tensor.of_array(np.array(present))]


@converter("OptionalGetElement")
def optional_get_element(ctx):
    v = ctx.value(0)
    if not isinstance(v, OptionalValue):
        return [v]
    if v.item is None:
        raise ctx.error("the optional is absent, so it has no element to get")
    return [v.item]
