"""`random_uniform`: counter-based random numbers, a pure function of (counter, seed, stream).

Each element's value is drawn from Philox4x32-10 (Salmon et al., SC'11) of the counter (its operand, an i64,
as two 32-bit words), the stream number and a zero word, under the 64-bit seed as the key. Nothing is stateful,
so the op fuses, reorders and runs on threads like any elementwise op, and compiled code (cuvil_scalar.inc) gives
the reference's bits exactly. Frontends build normal, Bernoulli, multinomial and dropout draws from it.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from .registry import Attr, register_op

_M0, _M1, _W0, _W1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57), np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LOW, _HIGH = np.uint64(0xFFFFFFFF), np.uint64(32)
SEED_LIMIT = 2 ** 63  # seeds are attributes: ints the text form and the artifact format carry


def philox4x32(c0, c1, c2, c3, k0: int, k1: int) -> tuple:
    """Philox4x32-10 of the counter words (uint64 arrays holding 32-bit values) under the key (k0, k1)."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in (c0, c1, c2, c3))
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0, p1 = _M0 * c0, _M1 * c2
        c0, c1, c2, c3 = (p1 >> _HIGH) ^ c1 ^ k0, p1 & _LOW, (p0 >> _HIGH) ^ c3 ^ k1, p0 & _LOW
        k0, k1 = (k0 + _W0) & _LOW, (k1 + _W1) & _LOW
    return c0, c1, c2, c3


def _ref_random_uniform(xs, a):
    bits = np.asarray(xs[0], np.int64).view(np.uint64)
    seed = np.uint64(a["seed"])
    w0, w1, _, _ = philox4x32(bits & _LOW, bits >> _HIGH, np.uint64(a["stream"]), 0, seed & _LOW, seed >> _HIGH)
    if a["dtype"] is DType.f32:
        return ((w0 >> np.uint64(8)).astype(np.float64) * 2.0 ** -24).astype(np.float32)
    return (((w0 << _HIGH) | w1) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def _random_uniform_shape(ctx, types, a):
    if types[0].dtype is not DType.i64:
        raise ctx.error(f"'random_uniform' needs an i64 counter, got {types[0]}")
    if a["dtype"] not in (DType.f32, DType.f64):
        raise ctx.error(f"'random_uniform' draws f32 or f64, not {a['dtype']}")
    if not 0 <= a["seed"] < SEED_LIMIT or not 0 <= a["stream"] < 2 ** 32:
        raise ctx.error(f"'random_uniform' needs a seed in [0, 2^63) and a stream in [0, 2^32), got seed "
                        f"{a['seed']} and stream {a['stream']}")
    return [types[0].with_dtype(a["dtype"])]


register_op("random_uniform", shape=_random_uniform_shape, reference=_ref_random_uniform, traits={"elementwise"},
            attrs={"seed": Attr("int"), "stream": Attr("int", 0), "dtype": Attr("dtype", DType.f32)},
            doc="a value in [0, 1) per element, Philox4x32-10 of (counter, stream) keyed by seed")
