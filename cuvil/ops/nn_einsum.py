"""`einsum`: ONNX Einsum over any number of operands, with "..." broadcasting and implicit output.

The normal form of the equation has no spaces and an explicit output (`ij,jk->ik`), so an implicit
equation and its spelled-out twin print alike.
"""
from __future__ import annotations

import re

import numpy as np

from ..ir.dtypes import DType
from ..ir.types import TensorType
from .common import unify_dtypes
from .registry import Attr, register_op

_TERM = re.compile(r"[A-Za-z]*(\.\.\.)?[A-Za-z]*")


def parse_equation(equation: str, n_operands: int) -> tuple:
    """(input terms, output term) of an einsum equation; the implicit output is "..." (if any input has it)
    then the labels used once, sorted."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_operands:
        raise ValueError(f"'einsum' equation {equation!r} has {len(terms)} operand terms, got {n_operands} operands")
    if not arrow:
        labels = lhs.replace(".", "").replace(",", "")
        out = ("..." if "..." in lhs else "") + "".join(sorted(c for c in set(labels) if labels.count(c) == 1))
    for term in terms + [out]:
        if not _TERM.fullmatch(term):
            raise ValueError(f"'einsum' term {term!r} of {equation!r} must be letters and at most one '...'")
    unknown = set(out) - set(lhs)
    if unknown or len(out.replace(".", "")) != len(set(out.replace(".", ""))):
        raise ValueError(f"'einsum' output {out!r} of {equation!r} repeats a label or names one no input has")
    return terms, out


def _normalize(types, attrs):
    terms, out = parse_equation(attrs["equation"], len(types))
    return {**attrs, "equation": ",".join(terms) + "->" + out}


def _broadcast(ctx, a: tuple, b: tuple) -> tuple:
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    return tuple(q if p == 1 else p if q == 1 else ctx.require_equal(p, q, "'einsum' '...' dims")
                 for p, q in zip(a, b))


def _einsum_shape(ctx, types, a):
    dtype = unify_dtypes(ctx, types, "einsum")
    if dtype is DType.bool:
        raise ctx.error("'einsum' does not accept bool operands")
    terms, out = parse_equation(a["equation"], len(types))
    sizes, ellipsis = {}, ()
    for t, term in zip(types, terms):
        head, dots, tail = term.partition("...")
        n_dots = t.rank - len(head) - len(tail)
        if n_dots < 0 or (n_dots and not dots):
            raise ctx.error(f"'einsum' term {term!r} does not fit operand {t}")
        for label, d in zip(head + tail, t.shape[:len(head)] + t.shape[len(head) + n_dots:]):
            sizes[label] = ctx.require_equal(sizes[label], d, f"'einsum' label {label!r}") if label in sizes else d
        if dots:
            ellipsis = _broadcast(ctx, ellipsis, t.shape[len(head):len(head) + n_dots])
    head, dots, tail = out.partition("...")
    if ellipsis and not dots:
        raise ctx.error(f"'einsum' output of {a['equation']!r} must keep the '...' dims {list(ellipsis)}")
    return [TensorType(dtype, tuple(sizes[c] for c in head) + (ellipsis if dots else ()) +
                       tuple(sizes[c] for c in tail))]


def _ref_einsum(xs, a):
    if xs[0].dtype.kind in "iu":
        return np.einsum(a["equation"], *xs, optimize=len(xs) > 2)
    return np.einsum(a["equation"], *(x.astype(np.float64) for x in xs), optimize=len(xs) > 2).astype(xs[0].dtype)


register_op("einsum", operands=(1, None), attrs={"equation": Attr("str")}, shape=_einsum_shape,
            reference=_ref_einsum, normalize=_normalize, doc="ONNX Einsum")
