"""Element types the IR lacks, carried in wider IR types: unsigned 16/32/64-bit integers in i32/i64 (u64 by
its bits), 4- and 2-bit integers in i8/u8, 8- and 4-bit floats in f32.

Arrays cross the model boundary converted (exactly: every value of the narrow type is a value of its
carrier). Inside, ops that can leave the narrow type's range wrap integers back into it, and casts round
floats to the narrow format's grid, so results equal what the narrow type would give.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto as T

from ...ir.dtypes import DType


@dataclass(frozen=True)
class Carrier:
    ir: DType
    numpy_name: str  # the boundary dtype: a NumPy name or an ml_dtypes type name
    bits: int = 0  # narrow integers: values wrap modulo 2**bits (0: the carrier's own wrap is right)
    signed: bool = False
    float_format: tuple = ()  # narrow floats: (mantissa bits, min normal exponent, max value, has inf, has -0)

    @property
    def numpy(self) -> np.dtype:
        if hasattr(np, self.numpy_name):
            return np.dtype(self.numpy_name)
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, self.numpy_name))


CARRIERS = {
    T.UINT16: Carrier(DType.i32, "uint16", 16), T.UINT32: Carrier(DType.i64, "uint32", 32),
    T.UINT64: Carrier(DType.i64, "uint64"),
    T.INT4: Carrier(DType.i8, "int4", 4, True), T.UINT4: Carrier(DType.u8, "uint4", 4),
    T.INT2: Carrier(DType.i8, "int2", 2, True), T.UINT2: Carrier(DType.u8, "uint2", 2),
    T.FLOAT8E4M3FN: Carrier(DType.f32, "float8_e4m3fn", float_format=(3, -6, 448.0, False, True)),
    T.FLOAT8E4M3FNUZ: Carrier(DType.f32, "float8_e4m3fnuz", float_format=(3, -7, 240.0, False, False)),
    T.FLOAT8E5M2: Carrier(DType.f32, "float8_e5m2", float_format=(2, -14, 57344.0, True, True)),
    T.FLOAT8E5M2FNUZ: Carrier(DType.f32, "float8_e5m2fnuz", float_format=(2, -15, 57344.0, False, False)),
    T.FLOAT4E2M1: Carrier(DType.f32, "float4_e2m1fn", float_format=(1, 0, 6.0, False, True)),
    T.FLOAT8E8M0: Carrier(DType.f32, "float8_e8m0fnu", float_format=(0, -127, 2.0 ** 127, False, False)),
}


def to_carrier(arr: np.ndarray, elem: int) -> np.ndarray:
    c = CARRIERS[elem]
    return arr.view(np.int64) if elem == T.UINT64 else arr.astype(c.ir.numpy)


def from_carrier(arr: np.ndarray, elem: int) -> np.ndarray:
    c = CARRIERS.get(elem)
    return arr if c is None else arr.astype(c.numpy)


# -- keeping values in range ---------------------------------------------------------------------------------
def wrap(ctx, v, elem: int):
    """Integers of a narrow type wrapped back into its range (two's complement for signed ones)."""
    c = CARRIERS.get(elem)
    if c is None or not c.bits:
        return v
    b, modulus = ctx.b, 2 ** c.bits
    if not c.signed:
        return b.mod(v, ctx.scalar_like(modulus, v))
    half = ctx.scalar_like(modulus // 2, v)
    return b.sub(b.mod(b.add(v, half), ctx.scalar_like(modulus, v)), half)


def unsigned_order(ctx, v, elem: int):
    """u64 values (carried by their bits in i64) shifted so that signed order is unsigned order."""
    if elem != T.UINT64:
        return v
    return ctx.b.add(v, ctx.scalar_like(np.iinfo(np.int64).min, v))


def quantize(ctx, v, elem: int, saturate: bool):
    """Round float values (f32 or wider) to a narrow float format's grid, nearest even, as f32.

    |x| = m * 2^e with e = max(floor(log2 |x|), emin); the grid step there is 2^(e - mantissa bits).
    Overflow saturates to the largest value or, without saturation, becomes inf (if the format has it) or NaN.
    """
    mant, emin, top, has_inf, neg_zero = CARRIERS[elem].float_format
    b = ctx.b
    x = ctx.cast(v, DType.f64)
    a = b.abs(x)
    e = _floor_log2(ctx, a)
    e = b.max(e, ctx.scalar_like(emin, e))
    step = b.pow(ctx.scalar_like(2.0, e), b.sub(e, ctx.scalar_like(mant, e)))
    r = b.where(b.isinf(a), a, b.mul(b.round(b.div(a, step)), step))
    over = b.gt(r, ctx.scalar_like(top, r))
    if saturate:
        r = b.where(over, ctx.scalar_like(top, r), r)
    else:
        r = b.where(over, ctx.scalar_like(math.inf if has_inf else math.nan, r), r)
        if not has_inf:
            r = b.where(b.isinf(a), ctx.scalar_like(math.nan, r), r)
    if elem == T.FLOAT4E2M1:  # no NaN in the format: NaN becomes -0, as ml_dtypes converts it
        r = b.where(b.isnan(a), ctx.scalar_like(-0.0, r), r)
    signed = b.where(b.lt(x, ctx.scalar_like(0, x)), b.neg(r), r)
    if not neg_zero:
        signed = b.where(b.eq(signed, ctx.scalar_like(0, signed)), ctx.scalar_like(0.0, signed), signed)
    return b.cast(signed, dtype=DType.f32)


def quantize_e8m0(ctx, v, saturate: bool, round_mode: str):
    """A power of two 2^e, e in [-127, 127], from |x| (the format has no sign): e = floor(log2 |x|), plus one
    when rounding up a value that is not a power of two ("up"), or one at or past 1.5 * 2^e ("nearest").
    NaN, inf and (without saturation) overflow give NaN."""
    b = ctx.b
    a = b.abs(ctx.cast(v, DType.f64))
    e = _floor_log2(ctx, a)
    e = b.max(e, ctx.scalar_like(-127, e))
    power = b.pow(ctx.scalar_like(2.0, e), e)
    if round_mode != "down":
        cut = power if round_mode == "up" else b.mul(power, ctx.scalar_like(1.5, power))
        past = b.gt(a, cut) if round_mode == "up" else b.ge(a, cut)
        e = b.where(past, b.add(e, ctx.scalar_like(1, e)), e)
    over = b.gt(e, ctx.scalar_like(127, e))
    e = b.where(over, ctx.scalar_like(127 if saturate else math.nan, e), e)
    bad = b.emit("or", b.isnan(a), b.isinf(a))
    out = b.where(bad, ctx.scalar_like(math.nan, e), b.pow(ctx.scalar_like(2.0, e), e))
    return b.cast(out, dtype=DType.f32)


def _floor_log2(ctx, a):
    """floor(log2 a) for a > 0 (inf and NaN pass through), corrected where log's rounding lands next to an
    exact power of two; zero gives -inf."""
    b = ctx.b
    with_inf = b.floor(b.div(b.log(a), ctx.scalar_like(math.log(2.0), a)))
    finite = b.where(b.isinf(with_inf), ctx.scalar_like(0.0, a), with_inf)
    power = b.pow(ctx.scalar_like(2.0, a), finite)
    finite = b.where(b.gt(power, a), b.sub(finite, ctx.scalar_like(1.0, a)), finite)
    finite = b.where(b.le(b.mul(power, ctx.scalar_like(2.0, a)), a), b.add(finite, ctx.scalar_like(1.0, a)), finite)
    return b.where(b.isinf(with_inf), with_inf, finite)
