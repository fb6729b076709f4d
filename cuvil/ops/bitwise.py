"""Bitwise ops on integers: and, or, xor, not and shifts, with NumPy's (and torch's) semantics; and `bitcast`,
the bits of any element read as another type of the same width.

Shifts by a count outside [0, bits) give 0 (left) or the sign fill (right), as NumPy and torch define them, so
the C never shifts by an undefined amount; left shifts wrap. Operands of a binary op have one integer dtype and
equal shapes (frontends cast and broadcast). Each op carries the C for one element, which the CPU backend's
loop kernels fuse like the built-in elementwise ops.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from .common import require_dtype, unify_dtypes, unify_shapes
from .registry import Attr, register_op

_BITS = "(8 * (long long)sizeof({0}))"
_OUT_OF_RANGE = f"(({{1}}) < 0 || ({{1}}) >= {_BITS})"


def _integer(d: DType) -> bool:
    return d.is_int


def _binary_shape(name):
    def shape(ctx, types, attrs):
        dtype = unify_dtypes(ctx, types, name)
        require_dtype(ctx, types[0], _integer, name)
        return [types[0].with_shape(unify_shapes(ctx, types, name)).with_dtype(dtype)]
    return shape


def _not_shape(ctx, types, attrs):
    require_dtype(ctx, types[0], _integer, "bitwise_not")
    return [types[0]]


def _binary(name, fn, c_expr, doc):
    register_op(name, operands=2, shape=_binary_shape(name), reference=lambda xs, a: fn(*xs).astype(xs[0].dtype),
                traits={"elementwise"}, c_expr=c_expr, doc=doc)


_binary("bitwise_and", np.bitwise_and, "{0} & {1}", "bits set in both operands")
_binary("bitwise_or", np.bitwise_or, "{0} | {1}", "bits set in either operand")
_binary("bitwise_xor", np.bitwise_xor, "{0} ^ {1}", "bits set in exactly one operand")
_binary("shift_left", np.left_shift,
        f"{_OUT_OF_RANGE} ? (__typeof__({{0}}))0 : (__typeof__({{0}}))((unsigned long long)({{0}}) << ({{1}}))",
        "x << n, wrapping; 0 for n outside [0, bits)")
_binary("shift_right", np.right_shift,
        f"{_OUT_OF_RANGE} ? (__typeof__({{0}}))(({{0}}) < 0 ? -1 : 0) : (__typeof__({{0}}))(({{0}}) >> ({{1}}))",
        "x >> n, arithmetic for signed types; the sign fill for n outside [0, bits)")
register_op("bitwise_not", shape=_not_shape, reference=lambda xs, a: np.invert(xs[0]), traits={"elementwise"},
            c_expr="(__typeof__({0}))(~({0}))", doc="every bit flipped (-x - 1 for signed integers)")


_NO_BITCAST = (DType.f16, DType.bf16, DType.i4, DType.u4)  # 16-bit floats are computed in float in C: bits not kept


def _bitcast_shape(ctx, types, attrs):
    x, dtype = types[0], attrs["dtype"]
    if x.dtype in _NO_BITCAST or dtype in _NO_BITCAST or dtype is DType.bool:
        raise ctx.error(f"'bitcast' from {x.dtype} to {dtype} is not supported (f16, bf16 and packed types have no "
                        "bits in compiled code; bool takes only the bytes 0 and 1)")
    if x.dtype.itemsize != dtype.itemsize:
        raise ctx.error(f"'bitcast' needs types of one width, got {x.dtype} ({8 * x.dtype.itemsize} bits) to "
                        f"{dtype} ({8 * dtype.itemsize} bits)")
    return [x.with_dtype(dtype)]


register_op("bitcast", shape=_bitcast_shape, attrs={"dtype": Attr("dtype")}, traits={"elementwise"},
            reference=lambda xs, a: np.asarray(xs[0]).copy().view(a["dtype"].numpy),
            doc="the bits of each element read as `dtype`, a type of the same width (no value conversion)")
