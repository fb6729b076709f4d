"""Data-dependent sizes: symbols that an op defines (NonZero's count) rather than an input's shape.

Each such op's `sizes` rule gives an upper bound per symbol over the sizes it reads; `data_sizes` resolves them,
in program order, to bounds over the input sizes alone, which is what a memory plan allocates for. The run-time
value is bound when the op runs (the interpreter) or written by its kernel (compiled code).
"""
from __future__ import annotations

from ..ops import registry
from .core import Function, Op
from .symbolic import Dim, substitute


def defined_sizes(op: Op) -> dict:
    """{symbol: upper bound over the operands' sizes} of the sizes `op` defines (empty for most ops)."""
    opdef = registry.get_op(op.name) if registry.has_op(op.name) else None
    if opdef is None or opdef.sizes is None:
        return {}
    return opdef.sizes([v.type for v in op.operands], op.attrs)


def data_sizes(fn: Function) -> dict:
    """{symbol: upper bound over the input sizes} of every data-dependent size in `fn`, in definition order."""
    bounds: dict = {}
    for op in fn.walk():
        for name, bound in defined_sizes(op).items():
            bounds[name] = substitute(bound, bounds)
    return bounds


def bounded(d: Dim, bounds: dict) -> Dim:
    """`d` at the upper bounds of the data-dependent sizes it reads."""
    return substitute(d, bounds) if bounds else d


def fresh_size(fn: Function, prefix: str = "u") -> str:
    """A size symbol name that nothing in `fn` uses yet (`u0`, `u1`, ...)."""
    used = set().union(*(a.type.free_symbols for a in fn.args), *(
        r.type.free_symbols for op in fn.walk() for r in op.results))
    k = 0
    while f"{prefix}{k}" in used:
        k += 1
    return f"{prefix}{k}"
