"""The orthogonal polynomials P_n(x) of `torch.special`: Chebyshev T, U, V, W (and their shifted forms on [0, 1]),
Hermite H and He, Laguerre L, Legendre P, each a binary elementwise op of (x, n).

The degree n is a float tensor truncated toward zero, as PyTorch does; P_n is 0 for n <= -1 and NaN for a NaN n. The
work is a three-term recurrence run n - 1 times, a loop whose length is data, so the C body is a call of
`cuvil_orthopoly` (kernels/cuvil_scalar.inc, in double) and the reference is the same algorithm in Python floats,
element by element. Results are exact to double rounding of the recurrence: float32 results are within an ulp or
two of the float64 value, except near a root, where the error is absolute (about 1e-16 times the largest term).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .elementwise import ELEMENTWISE, _binary_shape, is_float
from .registry import register_op

_FAMILIES = ("chebyshev_t", "chebyshev_u", "chebyshev_v", "chebyshev_w", "hermite_h", "hermite_he", "laguerre",
             "legendre")


def _chebyshev_closed(family: int, x: float, m: int) -> float | None:
    """The Chebyshev kinds at x = +-1 (for every degree) and, from degree 9 on, inside (-1, 1)."""
    if x in (1.0, -1.0):
        ends = ((1, 1), (m + 1, m + 1), (1, 2 * m + 1), (2 * m + 1, 1))[family]
        return float(ends[0] if x == 1 else (-1) ** (m & 1) * ends[1])
    if m > 8 and -1 < x < 1:
        t = math.acos(x)
        h = (m + 0.5) * t
        return (math.cos(m * t), math.sin((m + 1) * t) / math.sin(t), math.cos(h) / math.cos(0.5 * t),
                math.sin(h) / math.sin(0.5 * t))[family]
    return None


def _step(family: int, k: int, x: float, p: float, q: float) -> float:
    """P_{k+1} from P_k = q and P_{k-1} = p."""
    if family < 4:
        return (x + x) * q - p
    if family == 4:
        return (x + x) * q - 2 * k * p
    if family == 5:
        return x * q - k * p
    if family == 6:
        return ((2 * k + 1 - x) * q - k * p) / (k + 1)
    return ((2 * k + 1) * x * q - k * p) / (k + 1)


def orthopoly(family: int, x: float, n: float) -> float:
    """P_n(x) of the family numbered as in `_FAMILIES`; what `cuvil_orthopoly` computes in C."""
    if math.isnan(n):
        return n
    if n <= -1:  # a degree that truncates below 0
        return 0.0
    m = int(n)
    if family < 4 and (closed := _chebyshev_closed(family, x, m)) is not None:
        return closed
    if family == 7 and x in (1.0, -1.0):
        return 1.0 if x == 1 else float((-1) ** (m & 1))
    if m == 0:
        return 1.0
    p, q = 1.0, (x, x + x, x + x - 1, x + x + 1, x + x, x, 1 - x, x)[family]
    for k in range(1, m):  # Python floats overflow to inf and give NaN for inf - inf, as C does
        p, q = q, _step(family, k, x, p, q)
    return q


def _reference(family: int, shifted: bool):
    one = np.frompyfunc(functools.partial(orthopoly, family), 2, 1)

    def ref(xs, a):
        x, n = (v.astype(np.float64) for v in xs)
        with np.errstate(all="ignore"):
            return np.asarray(one(2 * x - 1 if shifted else x, n), np.float64).astype(xs[0].dtype)
    return ref


def _declare(family: int, shifted: bool = False):
    name = ("shifted_" if shifted else "") + _FAMILIES[family]
    x = "2.0 * (double)({0}) - 1.0" if shifted else "(double)({0})"
    register_op(name, operands=2, shape=_binary_shape(is_float), reference=_reference(family, shifted),
                traits=ELEMENTWISE, c_expr=f"(__typeof__({{0}}))cuvil_orthopoly({family}, {x}, (double)({{1}}))",
                doc=f"the {_FAMILIES[family]} polynomial of degree n" + (" at 2x - 1" if shifted else ""))


for _family in range(len(_FAMILIES)):
    _declare(_family)
for _family in range(4):
    _declare(_family, shifted=True)
