"""Control flow: If becomes `cond` (or the taken branch alone when the condition is known), Loop and Scan
become `while` with the iteration number and the condition carried. Scan outputs are written row by row into
buffers of the full trip count, so that count must be known (a constant or a symbolic size).

A Loop that carries sequences or optionals, or whose body needs the iteration number's value (a Slice by the
counter), is unrolled when its trip count and condition are known at conversion (constants, or small graph
inputs the model is then specialized on): each iteration is the body converted once more."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...ir.builder import Builder
from ...ir.core import Region
from ...ir.dtypes import DType
from ...ir.dynamic import defined_sizes
from ...ir.symbolic import free_symbols
from ...ir.types import TensorType
from .context import NeedsValue
from .fold import has_symbols
from .registry import converter
from .tensors import Growing, Sequence, Stacked, Tensor, flatten_value, unflatten_value

MAX_UNROLL = 1024  # iterations of an unrolled Loop; past it the IR would be larger than the loop is worth


def _values(ctx, tensors: list) -> list:
    return [ctx.graph.materialize(t, ctx.b.loc) for t in tensors]


@converter("If")
def if_(ctx):
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    known = ctx.known(0)
    if known is not None and not has_symbols(known):
        return ctx.graph.run_subgraph(ctx, then_g if bool(known.reshape(-1)[0]) else else_g, ctx.b, [])
    pred = ctx.b.reshape(ctx.x(0), shape=())
    layouts: list = []

    def branch(graph):
        def build(nb):
            parts = [flatten_value(v) for v in ctx.graph.run_subgraph(ctx, graph, nb, [])]
            entries = [entry for entry, _ in parts]
            if layouts and entries != layouts[0]:
                raise ctx.needs_value(0, "the condition of an If whose branches give sequences or optionals of "
                                      "different lengths or presence")
            layouts.append(entries)
            return _values(ctx, [t for _, flat in parts for t in flat])
        return build
    try:
        results = iter(Tensor(value=v) for v in ctx.b.cond(pred, branch(then_g), branch(else_g)))
        return [unflatten_value(e, results) for e in layouts[0]]
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
    carried = [ctx.value(i) for i in range(2, len(ctx.inputs))]
    if any(not isinstance(v, Tensor) for v in carried):
        count = ctx.known(0)
        growable = all(isinstance(v, Tensor) or isinstance(v, Sequence) and not v.items for v in carried)
        if not growable or count is None or not (has_symbols(count) or int(count.reshape(-1)[0]) > MAX_UNROLL):
            return unrolled_loop(ctx)
        return while_loop(ctx)  # a run-time trip count: empty sequences grow into stacks of rows
    try:
        return while_loop(ctx)
    except NeedsValue as e:
        if e.inputs or not ctx.has(0):
            raise
        if ctx.known(0) is None:
            raise ctx.needs_value(0, "the trip count of a Loop whose body needs the iteration number's value") from e
        return unrolled_loop(ctx)  # the body needs values known only per iteration (the counter's)


def unrolled_loop(ctx) -> list:
    """The Loop as straight-line code: the body converted once per iteration, with the counter known."""
    body = ctx.attr("body")
    count = ctx.known_scalar(0, "the trip count of a Loop over sequences or optionals", None)
    if count is not None and not isinstance(count, int):
        raise ctx.unsupported(f"the trip count is the symbolic size {count}; a Loop over sequences or optionals is "
                              f"unrolled, so its trip count must be a number when the model is loaded")
    go = _known_condition(ctx, ctx.tensor(1)) if ctx.has(1) else True
    carried = [ctx.value(i) for i in range(2, len(ctx.inputs))]
    rows: list = [[] for _ in range(len(body.output) - 1 - len(carried))]
    i = 0
    while go and (count is None or i < count):
        if i >= MAX_UNROLL:
            raise ctx.unsupported(f"the Loop runs more than {MAX_UNROLL} iterations, more than Cuvil unrolls")
        counter = [Tensor.of_array(np.array(i, np.int64)), Tensor.of_array(np.array(True))]
        outs = ctx.graph.run_subgraph(ctx, body, ctx.b, counter + carried)
        go, carried = _known_condition(ctx, outs[0]), outs[1:1 + len(carried)]
        for r, o in zip(rows, outs[1 + len(carried):]):
            r.append(ctx.graph.materialize(o, ctx.b.loc))
        i += 1
    return carried + [_stacked(ctx, r) for r in rows]


def _known_condition(ctx, t) -> bool:
    if not isinstance(t, Tensor) or t.known is None or has_symbols(t.known):
        deps = t.deps if isinstance(t, Tensor) else frozenset()
        raise NeedsValue(f"{ctx.where}: the Loop condition must be known when the model is loaded to unroll it "
                         f"(it depends on {', '.join(map(repr, sorted(deps))) or 'other data'})", ctx.b.loc, deps)
    return bool(t.known.reshape(-1)[0])


def _stacked(ctx, rows: list):
    """A scan output of an unrolled Loop: its rows stacked on a new first axis."""
    if not rows:
        raise ctx.unsupported("a Loop with scan outputs that runs no iteration gives rows of no known shape")
    if any(r.type != rows[0].type for r in rows):
        raise ctx.error(f"scan output rows differ in type ({rows[0].type}, then "
                        f"{next(r.type for r in rows if r.type != rows[0].type)}); they cannot be stacked")
    parts = [ctx.b.reshape(r, shape=(1,) + tuple(r.type.shape)) for r in rows]
    return ctx.b.concat(*parts, axis=0) if len(parts) > 1 else parts[0]


def while_loop(ctx) -> list:
    """The Loop as one `while`, its carried values tensors of fixed types. A carried sequence that starts empty
    and gains one element per iteration is written row by row into a buffer of the trip count, like a scan output,
    and comes out as a Stacked sequence."""
    body = ctx.attr("body")
    start = [ctx.value(i) for i in range(2, len(ctx.inputs))]
    grown = [v if isinstance(v, Sequence) else None for v in start]
    init = [ctx.graph.materialize(v, ctx.b.loc) for v, g in zip(start, grown) if g is None]
    n_rows = len(body.output) - 1 - len(init)
    i64, bool_ = TensorType(DType.i64, ()), TensorType(DType.bool, ())
    scratch = Region([i64, bool_] + [v.type for v in init])
    outs = _run_body(ctx, body, Builder(ctx.b.module, ctx.b.function, scratch, ctx.b.loc), scratch.args, grown)
    types = [t.type for t in outs]
    local = {name for op in scratch.walk() for name in defined_sizes(op)}
    if any(free_symbols(d) & local for t in types for d in t.shape):
        # a size the body computes from the data (a Slice by the counter) would leave the loop: unroll it instead
        raise NeedsValue(f"{ctx.where}: the Loop body gives values whose size it computes from the data", ctx.b.loc)
    if n_rows and ctx.has(0) and ctx.known(0) is None:
        raise ctx.needs_value(0, "the trip count of a Loop with scan outputs")
    if n_rows and ctx.has(1) and ctx.known(1) is None:  # a small graph input: the model is specialised on it
        raise ctx.needs_value(1, "the initial condition of a Loop with scan outputs")
    if n_rows and not (ctx.has(0) and (not ctx.has(1) or _always_true(ctx.tensor(1), None))
                       and _always_true(outs[0], scratch.args[1])):
        raise ctx.unsupported("scan outputs of Loop (and sequences it grows) need a trip count known when the model "
                              "is loaded and a condition that stays true (else they would grow to a data-dependent "
                              "length)")
    count = ctx.known_scalar(0, "trip count") if n_rows else None
    bufs = [_buffer(ctx, count, t) for t in types[1 + len(init):]]
    limit = ctx.b.reshape(ctx.cast(ctx.x(0), DType.i64), shape=()) if ctx.has(0) else None
    cond0 = ctx.b.reshape(ctx.x(1), shape=()) if ctx.has(1) else ctx.b.full(1.0, (), DType.bool)

    def cond(nb, i, c, *rest):
        return nb.emit("and", c, nb.lt(i, limit)) if limit is not None else c

    def step(nb, i, c, *rest):
        carried, buffers = rest[:len(init)], rest[len(init):]
        outs = _values(ctx, _run_body(ctx, body, nb, [i, c, *carried], grown))
        new_bufs = [write_row(nb, buf, row, i) for buf, row in zip(buffers, outs[1 + len(init):])]
        return [nb.add(i, ctx.const(1, DType.i64)), nb.reshape(outs[0], shape=()), *outs[1:1 + len(init)], *new_bufs]
    try:
        results = ctx.b.while_loop([ctx.const(0, DType.i64), cond0, *init, *bufs], cond, step)
    except ShapeError as e:
        raise _loop_carried_error(ctx, e) from None
    kept, stacks = iter(results[2:2 + len(init)]), iter(results[2 + len(init):])
    final = [Stacked(Tensor(value=next(stacks), elem=g.elem)) if g is not None else next(kept) for g in grown]
    return final + list(stacks)


def _run_body(ctx, body, nb: Builder, values: list, grown: list) -> list:
    """The body's outputs as Tensors: cond, the carried tensors, the element each grown sequence gained, the scan
    rows. `values` are the IR values of the counter, the condition and the carried tensors."""
    rest = iter(values[2:])
    args = [Tensor(value=values[0]), Tensor(value=values[1])] + [
        Growing(g.elem) if g is not None else Tensor(value=next(rest)) for g in grown]
    outs = ctx.graph.run_subgraph(ctx, body, nb, args)
    carried = outs[1:1 + len(grown)]
    kept = [o for o, g in zip(carried, grown) if g is None]
    return [outs[0], *kept, *[_appended(ctx, o, a) for o, a, g in zip(carried, args[2:], grown) if g is not None],
            *outs[1 + len(grown):]]


def _appended(ctx, out, arg) -> Tensor:
    if not isinstance(out, Growing) or out.source is not arg or out.row is None:
        raise ctx.unsupported("a sequence carried by a Loop of run-time trip count must gain one element per "
                              "iteration, by a SequenceInsert at its end")
    return out.row


@converter("Scan")
def scan(ctx):
    if ctx.opset < 9:
        return _batched_scan(ctx)
    body, n_in = ctx.attr("body"), ctx.attr("num_scan_inputs")
    states = [ctx.x(i) for i in range(len(ctx.inputs) - n_in)]
    scanned = [ctx.x(i) for i in range(len(ctx.inputs) - n_in, len(ctx.inputs))]
    in_axes = [a + v.type.rank if a < 0 else a for a, v in zip(ctx.attr("scan_input_axes", [0] * n_in), scanned)]
    return _scan(ctx, body, states, scanned, in_axes, ctx.attr("scan_input_directions", [0] * n_in),
                 ctx.attr("scan_output_directions"), ctx.attr("scan_output_axes"))


def _batched_scan(ctx) -> list:
    """Scan before opset 9: inputs and outputs have a batch axis first (the scan axis second), and
    `sequence_lens` may shorten each batch row's scan. The batch is unrolled, each row an opset-9 scan."""
    body, n_in = ctx.attr("body"), ctx.attr("num_scan_inputs")
    values = [ctx.x(i) for i in range(1, len(ctx.inputs))]
    states, scanned = values[:len(values) - n_in], values[len(values) - n_in:]
    batch, steps = scanned[0].type.shape[0], scanned[0].type.shape[1]
    if not isinstance(batch, int) or batch == 0:
        raise ctx.unsupported(f"Scan before opset 9 needs a nonzero batch size known when the model is loaded, got "
                              f"{batch}")
    if ctx.has(0) and any(n != steps for n in ctx.dims(0, "sequence_lens")):
        raise ctx.unsupported(f"sequence_lens other than the full length {steps} are not supported")
    rows = []
    for b in range(batch):
        at = ctx.const(b, DType.i64)
        rows.append(_scan(ctx, body, [ctx.b.gather(v, at, axis=0) for v in states],
                          [ctx.b.gather(v, at, axis=0) for v in scanned], [0] * n_in,
                          ctx.attr("directions", [0] * n_in), None, None))
    return [ctx.b.concat(*[ctx.b.reshape(r[k], shape=(1,) + tuple(r[k].type.shape)) for r in rows], axis=0)
            for k in range(len(rows[0]))]


def _scan(ctx, body, states: list, scanned: list, in_axes: list, in_rev: list, out_rev, out_axes) -> list:
    """An opset-9 Scan of these values: one `while` over the scan axis, rows written into buffers."""
    count = scanned[0].type.shape[in_axes[0]]
    slices = [TensorType(v.type.dtype, v.type.shape[:a] + v.type.shape[a + 1:]) for v, a in zip(scanned, in_axes)]
    rows = [t.type for t in _dry_run(ctx, body, [s.type for s in states] + slices)[0][len(states):]]
    out_rev = out_rev or [0] * len(rows)
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
    out_axes = out_axes or [0] * len(rows)
    return finals + [_move_axis0(ctx, buf, a) for buf, a in zip(bufs, out_axes)]


def _move_axis0(ctx, v, axis: int):
    rank = v.type.rank
    axis = axis + rank if axis < 0 else axis
    if axis == 0:
        return v
    perm = list(range(1, rank))
    perm.insert(axis, 0)
    return ctx.b.transpose(v, perm=tuple(perm))
