"""`lower-float-precision`: the bf16 / fp16 policy of docs/precision.md, as rewrite rules.

A GEMM's constant weight is converted once, here, to the 16-bit type and read back through a `cast` to f32;
the CPU backend's GEMM takes the cast's 16-bit operand itself (packed once at load, fp32 accumulation), so the
f32 weight never exists at run time:

    %w = constant @fc_w : f32[784,1024]            %w = constant @fc_w_bf16 : bf16[784,1024]
    %y = matmul %x, %w : f32[1,1024]       ->      %f = cast %w {dtype = f32} : f32[784,1024]
                                                   %y = matmul %x, %f : f32[1,1024]

Every other op, softmax, the normalisations and the reductions among them, keeps computing in fp32 on fp32
activations: no rule names them, so nothing changes there (`KEPT_FP32` lists them for the docs and tests).
"""
from __future__ import annotations

import numpy as np

from ..ir.core import Module, Op, Value
from ..ir.dtypes import DType
from .manager import Pass
from .rewrite import Pat, Rule, apply_rules
from .simplify import DCE

# Ops whose accuracy a 16-bit type would cost most; they are never rewritten (docs/precision.md).
KEPT_FP32 = ("softmax", "log_softmax", "logsumexp", "layer_norm", "batch_norm", "instance_norm", "group_norm",
             "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "cumsum", "exp", "log", "div",
             "sqrt", "rsqrt", "pow", "erf", "tanh")
F16_MAX = 65504.0


def _weight(bind: str) -> Pat:
    """A 2-D f32 module constant."""
    def check(v: Value, module: Module) -> bool:
        return v.type.dtype is DType.f32 and v.type.rank == 2
    return Pat("constant", bind=bind, where=check)


def _swaps_last_two(v: Value, module: Module) -> bool:
    perm = tuple(v.owner.attrs["perm"])
    return perm == (1, 0)


def _plain_activation(v: Value, module: Module) -> bool:
    """The GEMM's left operand: f32, and not a transposed batch (the GEMM reads a transposed left operand through
    strides only when it is 2-D or the weight is)."""
    owner = v.owner
    return v.type.dtype is DType.f32 and not (isinstance(owner, Op) and owner.name == "transpose" and v.type.rank > 2)


def _lowered(dtype: DType, transposed: bool):
    """The rewrite: matmul(x, w) -> matmul(x, cast(w in `dtype`)), the weight in K x N order."""
    def rewrite(b, m):
        w = b.module.constants[m.w.owner.attrs["name"]]
        w = w.T if transposed else w
        if dtype is DType.f16 and w.size and float(np.abs(w).max()) > F16_MAX:
            return None  # fp16 would turn it into infinities: this weight stays fp32
        low = b.constant(np.ascontiguousarray(w.astype(dtype.numpy)), f"{m.w.owner.attrs['name']}_{dtype}")
        return b.matmul(m.x, b.cast(low, dtype=DType.f32))
    return rewrite


def precision_rules(dtype: DType) -> list:
    """The rules for weights stored in `dtype` (bf16 or f16)."""
    x = Pat.any("x", where=_plain_activation)
    return [Rule(Pat("matmul", x, _weight("w")), _lowered(dtype, False), f"matmul-weight-{dtype}"),
            Rule(Pat("matmul", x, Pat("transpose", _weight("w"), where=_swaps_last_two)), _lowered(dtype, True),
                 f"matmul-transposed-weight-{dtype}")]


class LowerFloatPrecision(Pass):
    """GEMM weights stored in bf16 or f16 (converted here, once), read through a cast the GEMM absorbs."""

    name = "lower-float-precision"
    scope = "module"
    anchor = ("after", "cleanup-lowered")  # after constant folding (which would fold the cast back to f32)

    def __init__(self, dtype: str = "bf16"):
        self.dtype = DType(dtype)
        if self.dtype not in (DType.bf16, DType.f16):
            raise ValueError(f"lower-float-precision stores weights in bf16 or f16, not {dtype}")
        self.rules = precision_rules(self.dtype)

    def run_on_operation(self, module: Module) -> bool:
        changed = False
        for fn in module.functions.values():
            changed |= apply_rules(fn, self.rules)
        if changed:
            DCE().run_on_operation(module)  # the f32 weights nobody reads any more
        return changed


# -- convolutions (conv_bf16, kernels/conv_lowp.c) ---------------------------------------------------------
MIN_BF16_CONV_CHANNELS = 16  # narrower inputs stay fp32 (the kernel pads channels to 32) unless they unfold:
UNFOLDED_WINDOW = 256  # C * KH * KW up to this, KH * KW > 1, run as a 1x1 conv over the unfolded window (qc_unfolds)


def _bf16_conv(v: Value, module: Module) -> bool:
    """A 2-D, one-group f32 conv with a constant weight (and bias) and at least MIN_BF16_CONV_CHANNELS inputs, or
    a window the kernel unfolds (an RGB stem)."""
    op = v.owner
    x, w = op.operands[:2]
    constant = all(isinstance(u.owner, Op) and u.owner.name == "constant" for u in op.operands[1:])
    if not (constant and op.attrs["groups"] == 1 and x.type.rank == 4 and v.type.dtype is DType.f32
            and all(isinstance(d, int) for d in w.type.shape[1:])):
        return False
    c, kh, kw = w.type.shape[1:]
    return c >= MIN_BF16_CONV_CHANNELS or (1 < kh * kw and c * kh * kw <= UNFOLDED_WINDOW)


def _only_use(v: Value, module: Module) -> bool:
    uses = sum(u is v for fn in module.functions.values() for op in fn.walk() for u in op.operands)
    return uses == 1 and v.owner.attrs["act"] == "none"


def _to_conv_bf16(b, m):
    conv = m.conv.owner
    name = conv.operands[1].owner.attrs["name"]
    w = b.constant(b.module.constants[name].astype(DType.bf16.numpy), f"{name}_bf16")
    attrs = {k: conv.attrs[k] for k in ("strides", "dilations", "pads")}
    return b.conv_bf16(conv.operands[0], w, *conv.operands[2:], **attrs)


def _with_relu(b, m):
    conv = m.conv.owner
    return b.conv_bf16(*conv.operands, **{**conv.attrs, "act": "relu"})


CONV_RULES = [Rule(Pat("conv", bind="conv", where=_bf16_conv), _to_conv_bf16, "conv-bf16"),
              Rule(Pat("relu", Pat("conv_bf16", bind="conv", where=_only_use)), _with_relu, "conv-bf16-relu")]


class LowerConvPrecision(Pass):
    """2-D convolutions on bf16 weights (conv_bf16), before the blocked layout takes the fp32 ones; their relu
    becomes the kernel's epilogue. The compiler adds it where the CPU has a bf16 dot product (AMX or AVX512_BF16):
    elsewhere the fp32 kernels are faster and convolutions stay fp32."""

    name = "lower-conv-precision"
    scope = "module"
    anchor = ("after", "fold-batch-norm")  # the batch norms already folded into the weights and biases

    def run_on_operation(self, module: Module) -> bool:
        changed = False
        for fn in module.functions.values():
            changed |= apply_rules(fn, CONV_RULES)
        if changed:
            DCE().run_on_operation(module)  # the f32 weights nobody reads any more
        return changed
