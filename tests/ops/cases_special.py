"""Cases for the special functions, with PyTorch's own implementations (in float64) as the oracle."""
import math

import numpy as np

from .cases import Case, rand


def torch_fn(name, **kwargs):
    """The oracle: torch.special.<name> in float64, rounded to the case's dtype."""
    def expected(xs):
        import torch
        out = getattr(torch.special, name)(*(torch.from_numpy(x.astype(np.float64)) for x in xs), **kwargs)
        return [out.numpy().astype(xs[0].dtype)]
    return expected


def _lgamma(xs):
    return [np.vectorize(lambda v: math.inf if v <= 0 and v == int(v) else math.lgamma(v))(xs[0]).astype(xs[0].dtype)]


WIDE = np.concatenate([rand(40, low=-20, high=30), [0.0, -0.0, -1.0, -2.5, 1e-3, 1.4616, 1e8, np.inf, np.nan]])
PROB = np.concatenate([rand(40, low=0, high=1), [0.0, 1.0, 1e-10, 1 - 1e-7, 0.5, -0.1, 1.1, 1e-30]])
UNIT = np.concatenate([rand(40, low=-1, high=1), [0.0, 1.0, -1.0, 1.5, 0.9999, -0.99999]])
BESSEL = np.concatenate([rand(40, low=-30, high=30), [0.0, 8.0, -8.0, 7.99, 100.0, -300.0]])
SPECIAL = {"digamma": WIDE, "ndtri": PROB, "erfinv": UNIT, "ndtr": rand(40, low=-10, high=10),
           "log_ndtr": np.concatenate([rand(40, low=-40, high=10), [-9.9, -10.1, -24.0, -26.0, 0.0, 30.0]]),
           "erfcx": np.concatenate([rand(40, low=-9, high=40), [4.99, 5.01, 25.9, 26.1, 1e5, 0.0, -30.0]]),
           "i0": BESSEL, "i0e": BESSEL * 3, "i1": BESSEL, "i1e": BESSEL * 3,
           "sinc": np.concatenate([rand(40, low=-10, high=10), [0.0]]),
           "entr": np.concatenate([rand(40, low=-1, high=10), [0.0]])}

CASES = [Case("lgamma", [WIDE.astype(np.float32)], expected=_lgamma),
         Case("lgamma", [WIDE], expected=_lgamma, id="f64")]
for _op, _x in SPECIAL.items():
    _oracle = torch_fn({"digamma": "digamma", "erfinv": "erfinv"}.get(_op, _op))
    CASES += [Case(_op, [_x.astype(np.float32)], expected=_oracle, rtol=1e-5, atol=1e-6),
              Case(_op, [_x], expected=_oracle, id="f64")]
_X, _Y = rand(4, 6, low=-1, high=3), rand(4, 6, low=-1, high=3, seed=1)
_X[0, :3], _Y[1, :2] = 0.0, np.nan
CASES += [
    Case("xlogy", [_X, _Y], expected=torch_fn("xlogy")),
    Case("xlog1py", [_X, _Y], expected=torch_fn("xlog1py")),
    Case("logit", [rand(4, 6, low=0, high=1)], expected=torch_fn("logit")),
    Case("logit", [rand(4, 6, low=0, high=1)], {"eps": 0.2}, expected=torch_fn("logit", eps=0.2), id="eps"),
]
_S = np.concatenate([rand(30, low=2, high=7).round(), rand(10, low=1, high=10), [1.0, 0.5, 2.0, 3.5, 4.0]])
_Q = np.concatenate([rand(40, low=-9, high=9, seed=2), [2.0, 2.0, -3.0, -2.5, -30.5]])


def _zeta(xs):
    """torch's zeta, except NaN for q <= -23 (the op's documented range)."""
    return [np.where(xs[1] <= -23, np.nan, torch_fn("zeta")(xs)[0]).astype(xs[0].dtype)]


CASES += [Case("zeta", [_S.astype(np.float32), _Q.astype(np.float32)], expected=_zeta, rtol=1e-4, atol=1e-6),
          Case("zeta", [_S, _Q], expected=_zeta, rtol=1e-10, atol=1e-12, id="f64")]

# Orthogonal polynomials (x, n): x around [-1, 1] and beyond, the ends +-1 exactly; degrees fractional (truncated),
# negative, above 8 (the Chebyshev trigonometric forms) and NaN (NaN here, where torch gives 0).
_PX = np.concatenate([rand(36, low=-2.5, high=2.5, seed=3), [1.0, -1.0, 1.0, -1.0, 0.0, 0.5, 0.999, -0.999, 3.0, 0.25]])
_PN = np.concatenate([rand(36, low=-1.5, high=14, seed=4), [7.0, 7.0, 12.0, 13.0, 5.0, 20.0, 30.0, 25.0, -0.5, np.nan]])
_POLY = {f"{kind}_{letter}": f"{kind}_polynomial_{letter}" for kind, letters in
         (("chebyshev", "tuvw"), ("shifted_chebyshev", "tuvw"), ("hermite", ("h", "he"))) for letter in letters}
_POLY.update(laguerre="laguerre_polynomial_l", legendre="legendre_polynomial_p")


def _poly_oracle(name):
    def expected(xs):
        return [np.where(np.isnan(xs[1]), np.nan, torch_fn(name)(xs)[0]).astype(xs[0].dtype)]
    return expected


for _op, _torch_name in _POLY.items():
    _x = _PX / 2 + 0.5 if _op.startswith("shifted") else _PX  # the shifted forms' [0, 1] and its ends
    CASES += [Case(_op, [_x.astype(np.float32), _PN.astype(np.float32)], expected=_poly_oracle(_torch_name),
                   rtol=1e-5, atol=1e-5),
              Case(_op, [_x, _PN], expected=_poly_oracle(_torch_name), rtol=1e-9, atol=1e-9, id="f64"),
              Case(_op, [rand(3, 4, low=-1, high=1), np.tile(np.array([0.0, 3.0, 9.5, 10.0], np.float32), (3, 1))],
                   expected=_poly_oracle(_torch_name), rtol=1e-5, atol=1e-5, id="2d")]


def mpmath_fn(fn):
    """An oracle independent of PyTorch and of Cephes: mpmath at 30 digits, element by element (torch computes
    these in the operand's type and so is no float64 oracle); `fn(mpmath, v)` for finite v, the limits at +-inf."""
    def expected(xs):
        import mpmath
        with mpmath.workdps(30):
            one = [float(fn(mpmath, mpmath.mpf(float(v)))) if np.isfinite(v) else _AT_INF.get((fn, v > 0), 0.0)
                   for v in xs[0].ravel()]
        return [np.array(one, np.float64).reshape(xs[0].shape).astype(xs[0].dtype)]
    return expected


def _positive(f, at0):
    """f on x > 0; `at0` at 0 and NaN below (Y and K)."""
    return lambda mp, v: f(mp, v) if v > 0 else (at0 if v == 0 else math.nan)


_BESSEL = {"bessel_j0": lambda mp, v: mp.besselj(0, v), "bessel_j1": lambda mp, v: mp.besselj(1, v),
           "bessel_y0": _positive(lambda mp, v: mp.bessely(0, v), -math.inf),
           "bessel_y1": _positive(lambda mp, v: mp.bessely(1, v), -math.inf),
           "bessel_k0": _positive(lambda mp, v: mp.besselk(0, v), math.inf),
           "bessel_k1": _positive(lambda mp, v: mp.besselk(1, v), math.inf),
           "bessel_k0e": _positive(lambda mp, v: mp.besselk(0, v) * mp.exp(v), math.inf),
           "bessel_k1e": _positive(lambda mp, v: mp.besselk(1, v) * mp.exp(v), math.inf),
           "spherical_bessel_j0": lambda mp, v: mp.sin(v) / v if v != 0 else 1,
           "airy_ai": lambda mp, v: mp.airyai(v)}
_AT_INF = {(_BESSEL[k], False): math.nan for k in ("bessel_y0", "bessel_y1", "bessel_k0", "bessel_k1", "bessel_k0e",
                                                   "bessel_k1e")}  # -inf: outside the domain
# Every branch and its edges: J/Y's 5, K's 2, Ai's +-2.09 and 103.892, the tiny-x forms, +-inf.
_BX = np.concatenate([rand(48, low=-12, high=12, seed=5), [0.0, 1e-6, -1e-6, 0.4, 2.0, 2.01, 2.09, -2.09, -2.1, 5.0,
                                                          5.01, -5.0, 8.0, 30.0, 50.0, -40.0, 104.0, np.inf, -np.inf]])
# float32 accuracy of the decompositions (the compiled form) against the float64 reference: J, Y and spherical j0
# within 1e-6 absolute (their roots make relative error unbounded), K within 1e-5 relative; Ai within 1e-6 absolute
# above -10, below that its phase 2/3 |x|^1.5 rounded to float32 costs about 1e-8 |x|^1.5 (2e-6 at -40).
for _op, _f in _BESSEL.items():
    CASES += [Case(_op, [_BX.astype(np.float32)], expected=mpmath_fn(_f), rtol=1e-5,
                   atol=3e-6 if _op == "airy_ai" else 1e-6),
              Case(_op, [_BX], expected=mpmath_fn(_f), rtol=1e-12, atol=1e-14, id="f64")]
