"""ONNX's random ops (RandomUniform/Normal and their Like forms, Bernoulli, Multinomial) and Dropout in training
mode, over the IR's counter-based `random_uniform` (cuvil/ops/random.py).

Each element's draw is a pure function of the node's seed and the element's position, so the interpreter and
compiled code give the same values, and every call of a loaded model draws the same values again. A node
without a seed takes one derived from its first output's name. The values differ from ONNX Runtime's
generator (docs/onnx.md).
"""
from __future__ import annotations

import hashlib
import math
import struct

from ...ir.dtypes import DType
from ...ops.random import SEED_LIMIT
from .registry import converter
from .tensors import ir_dtype


def node_seed(ctx) -> int:
    """The seed attribute's bits (a float in ONNX), or a seed from the node's output name."""
    if ctx.has_attr("seed"):
        raw = struct.unpack("<q", struct.pack("<d", float(ctx.attr("seed"))))[0]
    else:
        raw = int.from_bytes(hashlib.sha256(ctx.node.output[0].encode()).digest()[:8], "little")
    return raw % SEED_LIMIT


def uniform(ctx, shape: tuple, stream: int = 0, dtype: DType = DType.f64):
    """Draws in [0, 1) of `shape`: `random_uniform` of each element's flat position."""
    count = math.prod(shape) if shape else 1
    flat = ctx.b.iota(shape=(count,), axis=0, dtype=DType.i64)
    return ctx.b.random_uniform(ctx.reshape(flat, tuple(shape)), seed=node_seed(ctx), stream=stream, dtype=dtype)


def _target(ctx, default: DType) -> DType:
    return ir_dtype(ctx.attr("dtype"), f"{ctx.where}: dtype") if ctx.has_attr("dtype") else default


def _shape_and_dtype(ctx) -> tuple:
    """(shape, dtype) from the attributes, or from input 0 for the Like forms."""
    if ctx.op_type.endswith("Like"):
        return tuple(ctx.type(0).shape), _target(ctx, ctx.type(0).dtype)
    return tuple(ctx.attr("shape")), _target(ctx, DType.f32)


def _float_target(ctx, dtype: DType) -> None:
    if not dtype.is_float:
        raise ctx.unsupported(f"draws floats, not {dtype}")


@converter("RandomUniform", "RandomUniformLike")
def random_uniform(ctx):
    """low + (high - low) u, in f64, then rounded to the type asked for."""
    shape, dtype = _shape_and_dtype(ctx)
    _float_target(ctx, dtype)
    low, high = ctx.attr("low", 0.0), ctx.attr("high", 1.0)
    u = uniform(ctx, shape)
    b = ctx.b
    return [ctx.cast(b.add(b.mul(u, ctx.scalar_like(high - low, u)), ctx.scalar_like(low, u)), dtype)]


@converter("RandomNormal", "RandomNormalLike")
def random_normal(ctx):
    """mean + scale z, z by Box-Muller from two draws: sqrt(-2 ln(1 - u1)) cos(2 pi u2), in f64."""
    shape, dtype = _shape_and_dtype(ctx)
    _float_target(ctx, dtype)
    b, u1, u2 = ctx.b, uniform(ctx, shape, 0), uniform(ctx, shape, 1)
    radius = b.sqrt(b.mul(ctx.scalar_like(-2.0, u1), b.log(b.sub(ctx.scalar_like(1.0, u1), u1))))
    z = b.mul(radius, b.cos(b.mul(u2, ctx.scalar_like(2 * math.pi, u2))))
    mean, scale = ctx.attr("mean", 0.0), ctx.attr("scale", 1.0)
    return [ctx.cast(b.add(b.mul(z, ctx.scalar_like(scale, z)), ctx.scalar_like(mean, z)), dtype)]


@converter("Bernoulli")
def bernoulli(ctx):
    """1 where a draw falls below the element's probability."""
    p = ctx.x(0)
    u = uniform(ctx, tuple(p.type.shape))
    return [ctx.cast(ctx.b.lt(u, ctx.cast(p, DType.f64)), _target(ctx, p.type.dtype))]


@converter("Multinomial")
def multinomial(ctx):
    """Per batch row, sample_size class indices: the number of cumulative probabilities (of softmax(x), x being
    log-probabilities) at or below a draw scaled by their total, capped at the last class."""
    x = ctx.cast(ctx.x(0), DType.f64)
    if x.type.rank != 2:
        raise ctx.error(f"needs [batch, classes] log-probabilities, got {x.type}")
    batch, classes = x.type.shape
    samples, b = ctx.attr("sample_size", 1), ctx.b
    dtype = _target(ctx, DType.i32)
    if dtype not in (DType.i32, DType.i64):
        raise ctx.unsupported(f"dtype must be int32 or int64, got {dtype}")
    weights = b.exp(b.sub(x, ctx.expand(b.reduce_max(x, axes=(1,), keepdims=True), x.type.shape)))
    cdf = b.cumsum(weights, axis=1)
    total = b.slice(cdf, starts=(classes - 1,), ends=(classes,), axes=(1,))
    u = uniform(ctx, (batch, samples))
    target = b.mul(u, ctx.expand(total, (batch, samples)))
    grid = (batch, samples, classes)
    below = b.le(ctx.expand(ctx.reshape(cdf, (batch, 1, classes)), grid),
                 ctx.expand(ctx.reshape(target, (batch, samples, 1)), grid))
    count = b.reduce_sum(ctx.cast(below, DType.i64), axes=(2,), keepdims=False)
    return [ctx.cast(b.min(count, ctx.scalar_like(classes - 1, count)), dtype)]


def dropout_training(ctx, x, ratio: float) -> list:
    """Dropout in training mode: x / (1 - ratio) where a draw is at or above the ratio, else 0; and that mask."""
    u = uniform(ctx, tuple(x.type.shape))
    keep = ctx.b.ge(u, ctx.scalar_like(ratio, u))
    scale = 0.0 if ratio >= 1 else 1.0 / (1.0 - ratio)
    kept = ctx.b.mul(x, ctx.scalar_like(scale, x))
    return [ctx.b.where(keep, kept, ctx.scalar_like(0, x)), keep]
