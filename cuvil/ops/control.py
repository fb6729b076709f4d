"""Constants, terminators and region ops (`cond`, `while`)."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.types import TensorType
from .registry import Attr, register_op

TERMINATOR = {"terminator"}


def _constant_shape(ctx, types, attrs):
    arr = ctx.constant(attrs["name"])
    return [TensorType(DType.from_numpy(arr.dtype), arr.shape)]


register_op("constant", operands=0, shape=_constant_shape, attrs={"name": Attr("str")},
            doc="reads module constant @name; the interpreter binds it, so there is no reference")
register_op("full", operands=0, shape=lambda ctx, types, a: [TensorType(a["dtype"], a["shape"])],
            reference=lambda xs, a: np.full(a["shape"], a["value"]).astype(a["dtype"].numpy),
            attrs={"value": Attr("float"), "shape": Attr("dims", ()), "dtype": Attr("dtype", DType.f32)},
            doc="a tensor filled with one value (scalars and splats without storing an array)")
register_op("yield", operands=(0, None), results=0, shape=lambda ctx, types, a: [], traits=TERMINATOR)
register_op("return", operands=(0, None), results=0, shape=lambda ctx, types, a: [], traits=TERMINATOR)


def _yielded(region) -> list:
    term = region.terminator
    return [v.type for v in term.operands] if term is not None and term.name == "yield" else []


def _require_same_types(ctx, got, want, what):
    if len(got) != len(want):
        raise ctx.error(f"{what} yields {len(got)} values, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if g.dtype != w.dtype or g.rank != w.rank:
            raise ctx.error(f"{what} value {i} has type {g}, expected {w}")
        for a, b in zip(g.shape, w.shape):
            ctx.require_equal(a, b, f"{what} value {i}")


def _cond_shape(ctx, types, attrs):
    pred = types[0]
    if pred.dtype is not DType.bool or pred.rank != 0:
        raise ctx.error(f"'cond' predicate must be a bool scalar, got {pred}")
    if len(ctx.regions) != 2 or any(r.args for r in ctx.regions):
        raise ctx.error("'cond' needs a then and an else region without arguments")
    then_types = _yielded(ctx.regions[0])
    _require_same_types(ctx, _yielded(ctx.regions[1]), then_types, "'cond' else region")
    return then_types


def _while_shape(ctx, types, attrs):
    if len(ctx.regions) != 2:
        raise ctx.error("'while' needs a condition and a body region")
    for r in ctx.regions:
        _require_same_types(ctx, [a.type for a in r.args], types, "'while' region arguments")
    pred = _yielded(ctx.regions[0])
    if len(pred) != 1 or pred[0].dtype is not DType.bool or pred[0].rank != 0:
        raise ctx.error("'while' condition region must yield one bool scalar")
    _require_same_types(ctx, _yielded(ctx.regions[1]), types, "'while' body")
    return list(types)


register_op("cond", operands=1, results=-1, shape=_cond_shape, regions=2,
            doc="if pred: then-region else else-region; results are what the taken region yields")
register_op("while", operands=(0, None), results=-1, shape=_while_shape, regions=2,
            doc="carried = operands; while cond(carried): carried = body(carried); results are the final carried")


def _fused_shape(ctx, types, attrs):
    if len(ctx.regions) != 1:
        raise ctx.error("'fused' needs one region")
    region = ctx.regions[0]
    _require_same_types(ctx, [a.type for a in region.args], types, "'fused' region arguments")
    return _yielded(region)


register_op("fused", operands=(0, None), results=-1, shape=_fused_shape, regions=1, traits={"isolated"},
            attrs={"kind": Attr("str", "loop", ("loop", "reduce", "library")), "name": Attr("str", "")},
            doc="ops the fusion pass grouped into one kernel; the region sees only its arguments")
