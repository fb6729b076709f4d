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


FOLD_BN_RULES = [Rule(Pat("batch_norm", Pat("conv", bind="conv"), _const("scale"), _const("bias"), _const("mean"),
                          _const("var")), _fold_bn_into_conv, "fold-bn-into-conv")]


class FoldBatchNorm(Pass):
    """Inference batch norms after convolutions with constant weights fold into the convolution."""

    name = "fold-batch-norm"

    def run_on_operation(self, fn: Function) -> bool:
        return apply_rules(fn, FOLD_BN_RULES)
