"""Inference-only folding: work that constant weights let the compiler do once instead of every call."""
from __future__ import annotations

import numpy as np

from ..ir.core import Function, Op, Value
from .manager import Pass
from .rewrite import Pat, Rule, apply_rules


def _const(name: str) -> Pat:
    return Pat("constant", bind=name)


def _array(b, v: Value) -> np.ndarray:
    return b.module.constants[v.owner.attrs["name"]]


def _users(fn: Function, v: Value) -> int:
    return sum(1 for op in fn.walk() for x in op.operands if x is v)


def _fold_bn_into_conv(b, m):
    """batch_norm(conv(x, w, c)) = conv(x, w * s, (c - mean) * s + bias) with s = scale / sqrt(var + eps)."""
    conv: Op = m.conv.owner
    if _users(b.function, m.conv) != 1 or not all(isinstance(v.owner, Op) and v.owner.name == "constant"
                                                  for v in conv.operands[1:]):
        return None
    w = _array(b, conv.operands[1]).astype(np.float64)
    c = _array(b, conv.operands[2]).astype(np.float64) if len(conv.operands) > 2 else 0.0
    scale, bias, mean, var = (_array(b, getattr(m, k)).astype(np.float64) for k in ("scale", "bias", "mean", "var"))
    s = scale / np.sqrt(var + m.root.attrs["epsilon"])
    dtype = conv.operands[1].type.dtype.numpy
    new_w = b.constant((w * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(dtype), "bn_folded_w")
    new_c = b.constant(((c - mean) * s + bias).astype(dtype), "bn_folded_b")
    return b.conv(conv.operands[0], new_w, new_c, **conv.attrs)


def _fold_bn_into_matmul(b, m):
    """batch_norm(x @ w) over the columns (a 2-d matmul: channels are axis 1) = x @ (w * s) + (bias - mean * s)."""
    mm: Op = m.mm.owner
    w = mm.operands[1]
    if m.mm.type.rank != 2 or _users(b.function, m.mm) != 1 or not (isinstance(w.owner, Op)
                                                                     and w.owner.name == "constant"):
        return None
    scale, bias, mean, var = (_array(b, getattr(m, k)).astype(np.float64) for k in ("scale", "bias", "mean", "var"))
    s = scale / np.sqrt(var + m.root.attrs["epsilon"])
    dtype = w.type.dtype.numpy
    new_w = b.constant((_array(b, w).astype(np.float64) * s).astype(dtype), "bn_folded_w")
    shift = b.constant((bias - mean * s).astype(dtype), "bn_folded_b")
    y = b.matmul(mm.operands[0], new_w)
    return b.add(y, b.broadcast_to(shift, shape=y.type.shape))


_BN_PARAMS = (_const("scale"), _const("bias"), _const("mean"), _const("var"))
FOLD_BN_RULES = [Rule(Pat("batch_norm", Pat("conv", bind="conv"), *_BN_PARAMS), _fold_bn_into_conv, "bn-into-conv"),
                 Rule(Pat("batch_norm", Pat("matmul", bind="mm"), *_BN_PARAMS), _fold_bn_into_matmul, "bn-into-matmul")]


class FoldBatchNorm(Pass):
    """Inference batch norms after convolutions or 2-d matmuls with constant weights fold into the weights."""

    name = "fold-batch-norm"

    def run_on_operation(self, fn: Function) -> bool:
        return apply_rules(fn, FOLD_BN_RULES)
