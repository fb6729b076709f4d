"""Library emitter for `einsum`: a batched GEMM when the equation is one, else a loop nest.

Labels are expanded first: "..." becomes digit labels, right-aligned across operands (an operand axis of
static size 1 under a "..." broadcasts, so it is never indexed). An f32 equation of two operands whose
labels split into batch (both operands and the output), M, N and K groups, each laid out so that it
flattens to one stride, runs on `cuvil_sgemm_batched` (attention's `bqd,bkd->bqk`, `ij,jk->ik`, ...).
Everything else (repeated labels, more operands, other dtypes) loops over the output labels, then the
summed ones, accumulating in double (floats) or wrapping uint64 (integers), as the reference does.
"""
from __future__ import annotations

from ...ir.dtypes import DType
from ...ops.nn_einsum import parse_equation
from .c_exprs import load, store_value
from .library_util import c_dim, close_loops, flat, open_block, open_loops, prod, storage, wide


def expand(equation: str, types) -> tuple:
    """(labels per operand, output labels) with "..." spelled as digit labels."""
    terms, out = parse_equation(equation, len(types))
    dots = [t.rank - len(term) + 3 for term, t in zip(terms, types) if "..." in term]
    m = max(dots, default=0)

    def labels(term: str, rank: int) -> list:
        head, has_dots, tail = term.partition("...")
        n = rank - len(head) - len(tail) if has_dots else 0
        return list(head) + [str(m - n + j) for j in range(n)] + list(tail)
    ins = [labels(term, t.rank) for term, t in zip(terms, types)]
    return ins, labels(out, len(out) - 3 + m if "..." in out else len(out))


def _strides(shape) -> list:
    return [prod(shape[k + 1:]) for k in range(len(shape))]


def _offset(labels: list, shape) -> str:
    """C offset of an operand element at the label loop variables (size-1 axes broadcast: never indexed)."""
    terms = [f"l_{lab} * {c_dim(s)}" if s != 1 else f"l_{lab}"
             for lab, d, s in zip(labels, shape, _strides(shape)) if d != 1]
    return " + ".join(terms) or "0"


def _sizes(ins: list, types, out: list, out_shape) -> dict:
    sizes = dict(zip(out, out_shape))
    for labels, t in zip(ins, types):
        for lab, d in zip(labels, t.shape):
            sizes.setdefault(lab, d)
    return sizes


def _loops(gen, op, depth: int) -> None:
    ys, y = op.operands, op.results[0]
    dt = y.type.dtype
    ins, out = expand(op.attrs["equation"], [v.type for v in ys])
    sizes = _sizes(ins, [v.type for v in ys], out, y.type.shape)
    summed = [lab for lab in dict.fromkeys(lab for labels in ins for lab in labels) if lab not in out]
    d = open_block(gen, depth, op, {**{f"x{k}": v for k, v in enumerate(ys)}, "y": y},
                   f" {op.attrs['equation']}")
    work = c_dim(prod(sizes.values()))
    inner = open_loops(gen, d, [f"l_{lab}" for lab in out], [sizes[lab] for lab in out], work)
    w = wide(dt)
    gen.line(inner, f"{w} acc = 0;")
    deep = open_loops(gen, inner, [f"l_{lab}" for lab in summed], [sizes[lab] for lab in summed])
    factors = [f"({w}){load(dt, f'x{k}', _offset(labels, v.type.shape))}" for k, (labels, v) in
               enumerate(zip(ins, ys))]
    gen.line(deep, f"acc += {' * '.join(factors)};")
    close_loops(gen, deep, len(summed))
    value = store_value(dt, "acc") if dt.is_float else f"({storage(dt)})acc"
    gen.line(inner, f"y[{flat([f'l_{lab}' for lab in out], y.type.shape)}] = {value};")
    close_loops(gen, inner, len(out))
    gen.line(depth, "}")


# -- the GEMM form -------------------------------------------------------------------------------------------
def _group_stride(group: list, labels: list, shape, sizes: dict):
    """The one stride of `group`'s labels in an operand if they flatten (row-major, in this order), else None;
    an empty group has stride 0."""
    if not group:
        return 0
    strides = dict(zip(labels, _strides(shape)))
    for a, b in zip(group, group[1:]):
        if strides[a] != strides[b] * sizes[b]:
            return None
    return strides[group[-1]]


def _gemm_plan(ins: list, out: list, types, sizes: dict):
    """(a, b, strides) for C[batch, M, N] = A[batch, M, K] @ B[batch, K, N], or None if not of that form."""
    la, lb = ins
    if len(set(la)) != len(la) or len(set(lb)) != len(lb) or set(la) | set(lb) != set(out) | (set(la) & set(lb)):
        return None
    if any(d == 1 and sizes[lab] != 1 for labels, t in zip(ins, types) for lab, d in zip(labels, t.shape)):
        return None  # a broadcast axis
    batch = [lab for lab in out if lab in la and lab in lb]
    m = [lab for lab in out if lab in la and lab not in lb]
    n = [lab for lab in out if lab in lb and lab not in la]
    k = [lab for lab in la if lab in lb and lab not in out]
    if out != batch + m + n:
        return None
    plan = {"sa": _group_stride(batch, la, types[0].shape, sizes), "rsa": _group_stride(m, la, types[0].shape, sizes),
            "csa": _group_stride(k, la, types[0].shape, sizes), "sb": _group_stride(batch, lb, types[1].shape, sizes),
            "rsb": _group_stride(k, lb, types[1].shape, sizes), "csb": _group_stride(n, lb, types[1].shape, sizes)}
    if any(v is None for v in plan.values()):
        return None
    return {**plan, **{g: prod(sizes[lab] for lab in labels) for g, labels in
                       (("batch", batch), ("M", m), ("N", n), ("K", k))}}


def _gemm(gen, op, depth: int) -> bool:
    """Emit the batched GEMM if the equation is one (trying both operand orders); False otherwise."""
    y = op.results[0]
    if y.type.dtype is not DType.f32 or len(op.operands) != 2:
        return False
    types = [v.type for v in op.operands]
    ins, out = expand(op.attrs["equation"], types)
    sizes = _sizes(ins, types, out, y.type.shape)
    for order in ((0, 1), (1, 0)):
        plan = _gemm_plan([ins[i] for i in order], out, [types[i] for i in order], sizes)
        if plan is not None:
            a, b = (op.operands[i] for i in order)
            pa, pb, pc = gen.args_of([a, b, y])
            p = {key: c_dim(v) for key, v in plan.items()}
            gen.line(depth, f"/* einsum {op.attrs['equation']} as a batched GEMM */")
            gen.line(depth, f"cuvil_sgemm_batched({p['batch']}, {p['M']}, {p['N']}, {p['K']}, 1.0f, {pa}, {p['rsa']}, "
                            f"{p['csa']}, {p['sa']}, {pb}, {p['rsb']}, {p['csb']}, {p['sb']}, 0.0f, {pc}, {p['N']}, "
                            f"{c_dim(plan['M'] * plan['N'])}, NULL, 0);")
            return True
    return False


def _einsum(gen, op, depth: int) -> None:
    if not _gemm(gen, op, depth):
        _loops(gen, op, depth)


EMITTERS = {"einsum": _einsum}
