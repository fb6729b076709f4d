"""Control flow: If becomes `cond` (or the taken branch alone when the condition is known), Loop and Scan
become `while` with the iteration number and the condition carried. Scan outputs are written row by row into
buffers of the full trip count, so that count must be known (a constant or a symbolic size)."""
from __future__ import annotations

from ...errors import ShapeError
from ...ir.builder import Builder
from ...ir.core import Region
from ...ir.dtypes import DType
from ...ir.types import TensorType
from .fold import has_symbols
from .registry import converter
from .tensors import Tensor


def _values(ctx, tensors: list) -> list:
    return [ctx.graph.materialize(t, ctx.b.loc) for t in tensors]


@converter("If")
def if_(ctx):
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    known = ctx.known(0)
    if known is not None and not has_symbols(known):
        return ctx.graph.run_subgraph(ctx, then_g if bool(known.reshape(-1)[0]) else else_g, ctx.b, [])
    pred = ctx.b.reshape(ctx.x(0), shape=())

    def branch(graph):
        return lambda nb: _values(ctx, ctx.graph.run_subgraph(ctx, graph, nb, []))
    try:
        return list(ctx.b.cond(pred, branch(then_g), branch(else_g)))
    except ShapeError as e:
        if e.message.startswith("ONNX "):
            raise
        raise ctx.unsupported(f"the branches give values of different types or shapes ({e.message}); Cuvil's cond "
                              f"needs one type per output") from None


def _dry_run(ctx, graph, arg_types: list) -> tuple:
    """A body's outputs (as Tensors) and its arguments, found by converting it once into a scratch region."""
    scratch = Region(arg_types)
    nb = Builder(ctx.b.module, ctx.b.function, scratch, ctx.b.loc)
    return ctx.graph.run_subgraph(ctx, graph, nb, [Tensor(value=a) for a in scratch.args]), scratch.args


def _buffer(ctx, count, row: TensorType):
    return ctx.b.full(0.0, (count,) + row.shape, row.dtype)


def _always_true(t: Tensor, arg) -> bool:
    """Whether a Loop condition is passed through unchanged or a known true (so the loop runs its trip count)."""
    return t.value is arg or (t.known is not None and not has_symbols(t.known) and bool(t.known.all()))


def write_row(nb: Builder, buf, row, pos):
    """buf with row `pos` (a scalar i64 value) replaced by `row`."""
    shape = buf.type.shape
    at = nb.eq(nb.iota(shape=shape, axis=0, dtype=DType.i64), nb.broadcast_to(pos, shape=shape))
    return nb.where(at, nb.broadcast_to(nb.reshape(row, shape=(1,) + row.type.shape), shape=shape), buf)


def _loop_carried_error(ctx, e: ShapeError):
    if e.message.startswith("ONNX "):
        return e
    return ctx.unsupported(f"a loop-carried value changes type or shape across iterations ({e.message}); Cuvil's "
                           f"while needs fixed shapes")


@converter("Loop")
def loop(ctx):
    body = ctx.attr("body")
    init = [ctx.x(i) for i in range(2, len(ctx.inputs))]
    n_scan = len(body.output) - 1 - len(init)
    i64, bool_ = TensorType(DType.i64, ()), TensorType(DType.bool, ())
    outs, args = _dry_run(ctx, body, [i64, bool_] + [v.type for v in init])
    types = [t.type for t in outs]
    if n_scan and ctx.has(0) and ctx.known(0) is None:
        raise ctx.needs_value(0, "the trip count of a Loop with scan outputs")
    if n_scan and not (ctx.has(0) and (not ctx.has(1) or _always_true(ctx.tensor(1), None))
                       and _always_true(outs[0], args[1])):
        raise ctx.unsupported("scan outputs of Loop need a trip count known when the model is loaded and a condition "
                              "that stays true (else they would grow to a data-dependent length)")
    count = ctx.known_scalar(0, "trip count") if n_scan else None
    bufs = [_buffer(ctx, count, t) for t in types[1 + len(init):]]
    limit = ctx.b.reshape(ctx.cast(ctx.x(0), DType.i64), shape=()) if ctx.has(0) else None
    cond0 = ctx.b.reshape(ctx.x(1), shape=()) if ctx.has(1) else ctx.b.full(1.0, (), DType.bool)

    def cond(nb, i, c, *rest):
        return nb.emit("and", c, nb.lt(i, limit)) if limit is not None else c

    def step(nb, i, c, *rest):
        carried, buffers = rest[:len(init)], rest[len(init):]
        outs = _values(ctx, ctx.graph.run_subgraph(ctx, body, nb, [Tensor(value=v) for v in (i, c, *carried)]))
        new_bufs = [write_row(nb, buf, row, i) for buf, row in zip(buffers, outs[1 + len(init):])]
        return [nb.add(i, ctx.const(1, DType.i64)), nb.reshape(outs[0], shape=()), *outs[1:1 + len(init)], *new_bufs]
    try:
        results = ctx.b.while_loop([ctx.const(0, DType.i64), cond0, *init, *bufs], cond, step)
    except ShapeError as e:
        raise _loop_carried_error(ctx, e) from None
    return list(results[2:])


@converter("Scan")
def scan(ctx):
    if ctx.opset < 9:
        raise ctx.unsupported("Scan before opset 9 (with sequence_lens and a batch axis) is not supported")
    body, n_in = ctx.attr("body"), ctx.attr("num_scan_inputs")
    states = [ctx.x(i) for i in range(len(ctx.inputs) - n_in)]
    scanned = [ctx.x(i) for i in range(len(ctx.inputs) - n_in, len(ctx.inputs))]
    in_axes = [a + v.type.rank if a < 0 else a for a, v in zip(ctx.attr("scan_input_axes", [0] * n_in), scanned)]
    in_rev = ctx.attr("scan_input_directions", [0] * n_in)
    count = scanned[0].type.shape[in_axes[0]]
    slices = [TensorType(v.type.dtype, v.type.shape[:a] + v.type.shape[a + 1:]) for v, a in zip(scanned, in_axes)]
    rows = [t.type for t in _dry_run(ctx, body, [s.type for s in states] + slices)[0][len(states):]]
    out_rev = ctx.attr("scan_output_directions", [0] * len(rows))
    total = ctx.scalar(count, DType.i64)

    def cond(nb, i, *rest):
        return nb.lt(i, total)

    def position(nb, i, reverse):
        return nb.sub(nb.sub(total, i), ctx.const(1, DType.i64)) if reverse else i

    def step(nb, i, *rest):
        carried, buffers = rest[:len(states)], rest[len(states):]
        picked = [nb.gather(v, position(nb, i, r), axis=a) for v, a, r in zip(scanned, in_axes, in_rev)]
        outs = _values(ctx, ctx.graph.run_subgraph(ctx, body, nb, [Tensor(value=v) for v in (*carried, *picked)]))
        new_bufs = [write_row(nb, buf, row, position(nb, i, r))
                    for buf, row, r in zip(buffers, outs[len(states):], out_rev)]
        return [nb.add(i, ctx.const(1, DType.i64)), *outs[:len(states)], *new_bufs]
    try:
        results = ctx.b.while_loop([ctx.const(0, DType.i64), *states, *[_buffer(ctx, count, t) for t in rows]],
                                   cond, step)
    except ShapeError as e:
        raise _loop_carried_error(ctx, e) from None
    finals, bufs = list(results[1:1 + len(states)]), results[1 + len(states):]
    out_axes = ctx.attr("scan_output_axes", [0] * len(rows))
    return finals + [_move_axis0(ctx, buf, a) for buf, a in zip(bufs, out_axes)]


def _move_axis0(ctx, v, axis: int):
    rank = v.type.rank
    axis = axis + rank if axis < 0 else axis
    if axis == 0:
        return v
    perm = list(range(1, rank))
    perm.insert(axis, 0)
    return ctx.b.transpose(v, perm=tuple(perm))
