"""Reduced-precision float ops: the bf16 convolution (weights stored in bf16, activations rounded to bf16, fp32
accumulation and epilogue), which `lower-conv-precision` (passes/precision.py) puts in place of an fp32 conv. The
reference computes what the kernel does (conv_lowp.c) in float64: the rounding of both operands to bf16 is the
only loss, so results agree with the kernels to fp32 accumulation error."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.types import TensorType
from .nn import _normalize_window, _pad, _spatial_out, windows
from .registry import Attr, register_op

_ATTRS = {"strides": Attr("ints", ()), "dilations": Attr("ints", ()), "pads": Attr("ints", ()),
          "act": Attr("str", "none", ("none", "relu"))}


def _shape(ctx, types, attrs):
    x, w = types[:2]
    if x.dtype is not DType.f32 or x.rank != 4 or w.dtype is not DType.bf16 or w.rank != 4:
        raise ctx.error(f"'conv_bf16' takes x f32 [N, C, H, W] and w bf16 [O, C, KH, KW], got {x} and {w}")
    if len(types) > 2 and (types[2].dtype is not DType.f32 or types[2].shape != (w.shape[0],)):
        raise ctx.error(f"'conv_bf16' takes an f32 bias [{w.shape[0]}], got {types[2]}")
    ctx.require_equal(x.shape[1], w.shape[1], f"'conv_bf16' input channels of {x} and {w}")
    return [TensorType(DType.f32, (x.shape[0], w.shape[0], *_spatial_out(ctx, "conv_bf16", x, w.shape[2:], attrs)))]


def round_bf16(x: np.ndarray) -> np.ndarray:
    """x (f32) rounded to the nearest bf16 (ties to even), as float64."""
    return np.asarray(x, np.float32).astype(DType.bf16.numpy).astype(np.float64)


def _reference(xs, attrs):
    x, w = round_bf16(xs[0]), np.asarray(xs[1]).astype(np.float64)
    cols = windows(_pad(x, attrs["pads"]), w.shape[2:], attrs["strides"], attrs["dilations"])
    y = np.einsum("nchwij,ocij->nohw", cols, w)
    if len(xs) > 2:
        y = y + np.asarray(xs[2], np.float64).reshape(1, -1, 1, 1)
    return (np.maximum(y, 0) if attrs["act"] == "relu" else y).astype(np.float32)


register_op("conv_bf16", operands=(2, 3), attrs=_ATTRS, shape=_shape, reference=_reference,
            normalize=_normalize_window("conv_bf16"),
            doc="2-D NCHW convolution, groups 1: x f32 (rounded to bf16), w [O, C, KH, KW] bf16, bias [O] f32, "
                "fp32 accumulation, act none or relu")
