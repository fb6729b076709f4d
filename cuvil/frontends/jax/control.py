"""Calls and control flow in jaxprs: nested calls are inlined; `cond`, `while` and `scan` become regions.

`scan` is a `while` over (index, carry, stacked outputs): each step reads its slice of the scanned inputs
with a `gather` at the index and writes its outputs into preallocated [length, ...] buffers with a
`scatter_elements` along axis 0, so no op beyond the IR's is needed.
"""
from __future__ import annotations

from ...ir.dtypes import DType
from .context import primitive

# Call-like primitives and the param holding the jaxpr they call; they are inlined.
_CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
          "remat": "jaxpr", "remat2": "jaxpr", "checkpoint": "jaxpr", "custom_lin": "jaxpr"}


def _inline(cx, *operands, **params):
    jaxpr = params[_CALLS[cx.eqn.primitive.name]]
    n = len(jaxpr.jaxpr.invars if hasattr(jaxpr, "jaxpr") else jaxpr.invars)
    return cx.walker.run(jaxpr, cx.b, list(operands)[-n:] if n else [])


primitive(*_CALLS)(_inline)


def _scalar_bool(cx, b, v):
    v = v if v.type.dtype is DType.bool else b.ne(v, cx.tensor(0, v.type.dtype))
    return v if v.type.rank == 0 else b.reshape(v, shape=())


@primitive("cond")
def cond(cx, index, *operands, branches, **params):
    """Two branches: a bool `cond`; more (lax.switch): a chain of them on index == i (JAX clamps index)."""
    operands = list(operands)

    def branch(k):
        return lambda nb: [cx.walker.as_value(nb, v) for v in cx.walker.run(branches[k], nb, operands)]

    def chain(b, k):
        if k == len(branches) - 1:
            return branch(k)(b)
        pick = b.le(index, cx.tensor(k, index.type.dtype)) if index.type.dtype is not DType.bool else \
            b.emit("not", index)
        return list(b.cond(_scalar_bool(cx, b, pick), branch(k), lambda nb: chain(nb, k + 1)))

    return chain(cx.b, 0)


@primitive("while")
def while_(cx, *operands, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts = list(operands[:cond_nconsts])
    body_consts = list(operands[cond_nconsts:cond_nconsts + body_nconsts])
    init = [cx.walker.as_value(cx.b, v) for v in operands[cond_nconsts + body_nconsts:]]
    walker = cx.walker
    return list(cx.b.while_loop(
        init,
        lambda nb, *vals: _scalar_bool(cx, nb, walker.run(cond_jaxpr, nb, cond_consts + list(vals))[0]),
        lambda nb, *vals: [walker.as_value(nb, v) for v in walker.run(body_jaxpr, nb, body_consts + list(vals))]))


@primitive("scan")
def scan(cx, *operands, jaxpr, length, reverse, num_consts, num_carry, **params):
    b, walker = cx.b, cx.walker
    consts = list(operands[:num_consts])
    carry = [walker.as_value(b, v) for v in operands[num_consts:num_consts + num_carry]]
    xs = list(operands[num_consts + num_carry:])
    ys_types = [cx.out_type(i) for i in range(num_carry, len(cx.eqn.outvars))]
    buffers = [b.full(0, t.shape, t.dtype) for t in ys_types]
    counter = b.full(0, (), DType.i64)

    def step_index(nb, i):
        return nb.sub(cx.tensor(length - 1, DType.i64), i) if reverse else i

    def cond_fn(nb, i, *rest):
        return nb.lt(i, nb.full(length, (), DType.i64))

    def body_fn(nb, i, *state):
        at = step_index(nb, i)
        slices = [nb.gather(x, at, axis=0) for x in xs]
        outs = [walker.as_value(nb, v) for v in walker.run(jaxpr, nb, consts + list(state[:num_carry]) + slices)]
        new_carry, ys = outs[:num_carry], outs[num_carry:]
        written = [_write_row(nb, buf, y, at) for buf, y in zip(state[num_carry:], ys)]
        return [nb.add(i, nb.full(1, (), DType.i64))] + new_carry + written

    results = b.while_loop([counter] + carry + buffers, cond_fn, body_fn)
    return list(results[1:])


def _write_row(b, buf, y, at):
    """buf with row `at` replaced by y: scatter_elements along axis 0 with `at` broadcast to y's shape."""
    row = (1,) + y.type.shape
    idx = b.broadcast_to(b.reshape(at, shape=(1,) * len(row)), shape=row)
    return b.scatter_elements(buf, idx, b.reshape(y, shape=row), axis=0)
