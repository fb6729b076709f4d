"""Recurrent layers: RNN, GRU and LSTM (every direction, both layouts, sequence_lens, peepholes, clip, custom
activations). The input projection of all steps is one matmul; the recurrence is a `while` over time that
carries the state and writes each step's output into a buffer, so the sequence length may be symbolic."""
from __future__ import annotations

from ...ir.dtypes import DType
from ...ir.types import TensorType
from .convert_control import write_row
from .registry import converter

# name -> (function of (ctx, x, alpha, beta), default alpha, default beta); alpha/beta None: not used.
ACTIVATIONS = {
    "relu": (lambda c, x, a, b: c.b.relu(x), None, None),
    "tanh": (lambda c, x, a, b: c.b.tanh(x), None, None),
    "sigmoid": (lambda c, x, a, b: c.b.sigmoid(x), None, None),
    "affine": (lambda c, x, a, b: c.b.add(c.b.mul(x, c.scalar_like(a, x)), c.scalar_like(b, x)), 1.0, 0.0),
    "leakyrelu": (lambda c, x, a, b: c.b.leaky_relu(x, alpha=a), 0.01, None),
    "thresholdedrelu": (lambda c, x, a, b: c.b.where(c.b.gt(x, c.scalar_like(a, x)), x, c.scalar_like(0, x)),
                        1.0, None),
    "scaledtanh": (lambda c, x, a, b: c.b.mul(c.b.tanh(c.b.mul(x, c.scalar_like(b, x))), c.scalar_like(a, x)),
                   1.0, 1.0),
    "hardsigmoid": (lambda c, x, a, b: c.b.hardsigmoid(x, alpha=a, beta=b), 0.2, 0.5),
    "elu": (lambda c, x, a, b: c.b.elu(x, alpha=a), 1.0, None),
    "softsign": (lambda c, x, a, b: c.b.div(x, c.b.add(c.b.abs(x), c.scalar_like(1, x))), None, None),
    "softplus": (lambda c, x, a, b: c.b.softplus(x), None, None),
}
# op -> (gate count, default activations per direction)
CELLS = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]), "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}


def _activations(ctx, directions: int) -> list:
    """Per direction, the list of (name, alpha, beta); alphas and betas are consumed in order by the
    functions that take them."""
    gates, defaults = CELLS[ctx.op_type]
    names = ctx.attr("activations") or defaults * directions
    alphas, betas = list(ctx.attr("activation_alpha", [])), list(ctx.attr("activation_beta", []))
    out = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise ctx.unsupported(f"activation {name!r} is not supported")
        _, a, b = ACTIVATIONS[key]
        out.append((key, alphas.pop(0) if a is not None and alphas else a, betas.pop(0) if b is not None and betas
                    else b))
    per = len(names) // directions
    return [out[d * per:(d + 1) * per] for d in range(directions)]


def _act(c, spec, x):
    name, a, b = spec
    return ACTIVATIONS[name][0](c, x, a, b)


def _gate_slices(c, v, hidden: int, count: int) -> list:
    return [c.b.slice(v, starts=(k * hidden,), ends=((k + 1) * hidden,), axes=(1,)) for k in range(count)]


class _Direction:
    """One direction's weights, transposed for `x @ W^T`, and its biases split into input and recurrent parts."""

    def __init__(self, ctx, d: int, hidden: int, gates: int):
        def pick(i, shape):
            v = ctx.b.reshape(ctx.b.slice(ctx.x(i), starts=(d,), ends=(d + 1,), axes=(0,)), shape=shape)
            return v
        x_dtype = ctx.type(0).dtype
        in_size = ctx.type(1).shape[2]
        self.w = ctx.b.transpose(pick(1, (gates * hidden, in_size)), perm=(1, 0))
        self.r = ctx.b.transpose(pick(2, (gates * hidden, hidden)), perm=(1, 0))
        if ctx.has(3):
            both = pick(3, (2 * gates * hidden,))
            self.wb, self.rb = (ctx.b.slice(both, starts=(k * gates * hidden,), ends=((k + 1) * gates * hidden,))
                                for k in (0, 1))
        else:
            self.wb = self.rb = ctx.b.full(0.0, (gates * hidden,), x_dtype)
        self.p = pick(7, (3 * hidden,)) if ctx.op_type == "LSTM" and ctx.has(7) else None


def _step(c, kind: str, xw, h, cell, w: _Direction, acts: list, hidden: int, clip):
    """One time step: (new h, new cell state or None). xw is this step's x @ W^T + Wb, [batch, gates*hidden]."""
    b = c.b
    rec = b.add(b.matmul(h, w.r), c.expand(w.rb, (h.type.shape[0], w.r.type.shape[1])))

    def clipped(v):
        return b.clip(v, min=-clip, max=clip) if clip is not None else v
    if kind == "RNN":
        return _act(c, acts[0], clipped(b.add(xw, rec))), None
    if kind == "GRU":
        xz, xr, xh = _gate_slices(c, xw, hidden, 3)
        hz, hr, hh = _gate_slices(c, rec, hidden, 3)
        z = _act(c, acts[0], clipped(b.add(xz, hz)))
        r = _act(c, acts[0], clipped(b.add(xr, hr)))
        if c.attr("linear_before_reset", 0):
            cand = b.add(xh, b.mul(r, hh))
        else:
            rh = b.mul(r, h)
            rbh = c.expand(b.slice(w.rb, starts=(2 * hidden,), ends=(3 * hidden,)), h.type.shape)
            cand = b.add(xh, b.add(b.matmul(rh, b.slice(w.r, starts=(2 * hidden,), ends=(3 * hidden,), axes=(1,))),
                                   rbh))
        n = _act(c, acts[1], clipped(cand))
        one = c.scalar_like(1, z)
        return b.add(b.mul(b.sub(one, z), n), b.mul(z, h)), None
    return _lstm_step(c, b.add(xw, rec), cell, w, acts, hidden, clipped)


def _lstm_step(c, pre, cell, w: _Direction, acts: list, hidden: int, clipped):
    b = c.b
    pi, po, pf, pc = _gate_slices(c, pre, hidden, 4)
    peep = _gate_slices(c, b.reshape(w.p, shape=(1, 3 * hidden)), hidden, 3) if w.p is not None else None

    def with_peephole(v, k, state):
        return v if peep is None else b.add(v, b.mul(c.expand(peep[k], state.type.shape), state))
    i = _act(c, acts[0], clipped(with_peephole(pi, 0, cell)))
    f = b.sub(c.scalar_like(1, i), i) if c.attr("input_forget", 0) else \
        _act(c, acts[0], clipped(with_peephole(pf, 2, cell)))
    new_cell = b.add(b.mul(f, cell), b.mul(i, _act(c, acts[1], clipped(pc))))
    o = _act(c, acts[0], clipped(with_peephole(po, 1, new_cell)))
    return b.mul(o, _act(c, acts[2], new_cell)), new_cell


def _run_direction(ctx, x, d: int, reverse: bool, acts: list, hidden: int, lens):
    """(Y [T, B, H], last h, last cell) of one direction."""
    kind = ctx.op_type
    gates = CELLS[kind][0]
    w = _Direction(ctx, d, hidden, gates)
    steps, batch = x.type.shape[:2]
    xw = ctx.b.add(ctx.b.matmul(x, w.w), ctx.expand(w.wb, (steps, batch, gates * hidden)))
    state_type = TensorType(x.type.dtype, (batch, hidden))
    h0 = _initial(ctx, 5, d, state_type)
    c0 = _initial(ctx, 6, d, state_type) if kind == "LSTM" else None
    ys = ctx.b.full(0.0, (steps,) + state_type.shape, x.type.dtype)
    total = ctx.scalar(steps, DType.i64)
    clip = ctx.attr("clip")

    def cond(nb, i, *rest):
        return nb.lt(i, total)

    def body(nb, i, h, *rest):
        c = ctx.within(nb)
        cell, y = (rest[0], rest[1]) if kind == "LSTM" else (None, rest[0])
        t = nb.sub(nb.sub(total, i), ctx.const(1, DType.i64)) if reverse else i
        new_h, new_c = _step(c, kind, nb.gather(xw, t, axis=0), h, cell, w, acts, hidden, clip)
        if lens is not None:  # past a sequence's end its state stands still and its output is zero
            live = c.expand(nb.reshape(nb.lt(nb.broadcast_to(t, shape=(batch,)), lens), shape=(batch, 1)),
                            state_type.shape)
            new_h = nb.where(live, new_h, h)
            new_c = nb.where(live, new_c, cell) if cell is not None else None
            out = nb.where(live, new_h, c.scalar_like(0, new_h))
        else:
            out = new_h
        carried = [new_c] if cell is not None else []
        return [nb.add(i, ctx.const(1, DType.i64)), new_h, *carried, write_row(nb, y, out, t)]
    init = [ctx.const(0, DType.i64), h0] + ([c0] if c0 is not None else []) + [ys]
    results = ctx.b.while_loop(init, cond, body)
    return results[-1], results[1], results[2] if kind == "LSTM" else None


def _initial(ctx, i: int, d: int, t: TensorType):
    if not ctx.has(i):
        return ctx.b.full(0.0, t.shape, t.dtype)
    return ctx.b.reshape(ctx.b.slice(ctx.x(i), starts=(d,), ends=(d + 1,), axes=(0,)), shape=t.shape)


def _stack(ctx, values, axis: int):
    return ctx.b.concat(*[ctx.b.reshape(v, shape=v.type.shape[:axis] + (1,) + v.type.shape[axis:]) for v in values],
                        axis=axis)


@converter("RNN", "GRU", "LSTM")
def recurrent(ctx):
    direction = ctx.attr("direction", "forward")
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if dirs is None:
        raise ctx.error(f"unknown direction {direction!r}")
    hidden, layout = ctx.attr("hidden_size"), ctx.attr("layout", 0)
    x = ctx.x(0)
    x = ctx.b.transpose(x, perm=(1, 0, 2)) if layout else x
    lens = ctx.cast(ctx.x(4), DType.i64) if ctx.has(4) else None
    acts = _activations(ctx, len(dirs))
    runs = [_run_direction(ctx, x, d, rev, acts[d], hidden, lens) for d, rev in enumerate(dirs)]
    y = _stack(ctx, [r[0] for r in runs], 1)  # [T, D, B, H]
    y_h = _stack(ctx, [r[1] for r in runs], 0)  # [D, B, H]
    outs = [y, y_h] + ([_stack(ctx, [r[2] for r in runs], 0)] if ctx.op_type == "LSTM" else [])
    if layout:
        outs = [ctx.b.transpose(outs[0], perm=(2, 0, 1, 3))] + [ctx.b.transpose(v, perm=(1, 0, 2)) for v in outs[1:]]
    return outs

