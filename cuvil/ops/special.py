"""Special functions: `lgamma`, `digamma`, `erfinv`, `ndtr`, `ndtri`, `log_ndtr`, `erfcx`, Bessel `i0` `i0e` `i1` `i1e`,
`zeta`, `sinc`, `entr`, `logit`, `xlogy`, `xlog1py`.

`lgamma` is a primitive (libm's, on every C backend). The others are composites, each written once over a small
arithmetic namespace and run twice: by NumPy in float64 as its reference, and by the builder in the operand's
type as its decomposition into primitives, so that every backend computes them from ops it already has. The
algorithms are Cephes' (see torch's ATen/native/Math.h, which derives from the same): Chebyshev series for the
Bessel functions, digamma's recurrence and asymptotic series, ndtri's rational approximations; a branch becomes
`where` over both arms.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import DType
from .elementwise import ELEMENTWISE, _binary_shape, _unary_shape, is_float
from .registry import Attr, register_op

_erf64 = np.frompyfunc(math.erf, 1, 1)
_erfc64 = np.frompyfunc(math.erfc, 1, 1)


class _NumPy:
    """The arithmetic of the references: float64 NumPy (poles give inf, points outside the domain NaN)."""

    f64 = True

    @staticmethod
    def c(v):
        return np.float64(v)

    add, sub, mul, div, neg, abs = np.add, np.subtract, np.multiply, np.divide, np.negative, np.abs
    where, lt, le, eq, ne = np.where, np.less, np.less_equal, np.equal, np.not_equal
    gt, ge = np.greater, np.greater_equal
    pow = np.power
    log, log1p, exp, sqrt, tan, sin, cos, floor = np.log, np.log1p, np.exp, np.sqrt, np.tan, np.sin, np.cos, np.floor
    copysign, isnan, min, max = np.copysign, np.isnan, np.minimum, np.maximum
    logical_or, logical_and = np.logical_or, np.logical_and

    @staticmethod
    def erf(x):
        return _erf64(x).astype(np.float64)

    @staticmethod
    def erfc(x):
        return _erfc64(x).astype(np.float64)


class _IR:
    """The same arithmetic as IR ops in the type of `like` (numbers become constants of its shape)."""

    _NAMES = {"logical_or": "or", "logical_and": "and"}

    def __init__(self, b, like):
        self.b, self.type = b, like.type
        self.f64 = like.type.dtype is DType.f64

    def c(self, v):
        return self.b.full(float(v), self.type.shape, self.type.dtype)

    def __getattr__(self, name):
        return getattr(self.b, self._NAMES.get(name, name))


def _poly(m, x, coefs):
    """Horner's rule, highest coefficient first."""
    p = m.c(coefs[0])
    for a in coefs[1:]:
        p = m.add(m.mul(p, x), m.c(a))
    return p


def _chbevl(m, x, coefs):
    """Cephes' Chebyshev series at x (coefficients highest order first)."""
    b0, b1, b2 = m.c(coefs[0]), m.c(0), m.c(0)
    for a in coefs[1:]:
        b2, b1 = b1, b0
        b0 = m.add(m.sub(m.mul(x, b1), b2), m.c(a))
    return m.mul(m.sub(b0, b2), m.c(0.5))


def _recip(m, x):
    return m.div(m.c(1), x)


# -- digamma ------------------------------------------------------------------------------------------------
# psi(z) - log z + 1/2z as z^-2 * P(z^-2), Cephes' coefficients, highest order first
_PSI_SERIES = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
               -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
               8.33333333333333333333E-2)
_PSI_SHIFT = 10  # psi(x) = psi(x + 10) - sum_k 1/(x + k); from 10 on the series is exact to double precision


def _digamma_positive(m, x):
    acc = m.c(0)
    for k in range(_PSI_SHIFT):
        acc = m.add(acc, _recip(m, m.add(x, m.c(k))))
    z = m.add(x, m.c(_PSI_SHIFT))
    zz = _recip(m, m.mul(z, z))
    tail = m.mul(zz, _poly(m, zz, _PSI_SERIES))
    return m.sub(m.sub(m.sub(m.log(z), m.div(m.c(0.5), z)), tail), acc)


def _digamma(m, x):
    """psi(x); below 0 by reflection psi(x) = psi(1 - x) - pi / tan(pi frac(x)); -inf at +0, NaN at -1, -2, ..."""
    negative = m.lt(x, m.c(0))
    frac = m.sub(x, m.floor(x))
    psi = _digamma_positive(m, m.where(negative, m.sub(m.c(1), x), x))
    reflection = m.div(m.c(math.pi), m.tan(m.mul(frac, m.c(math.pi))))
    out = m.where(negative, m.sub(psi, reflection), psi)
    out = m.where(m.eq(x, m.c(0)), m.copysign(m.c(math.inf), m.neg(x)), out)
    return m.where(m.logical_and(negative, m.eq(frac, m.c(0))), m.c(math.nan), out)


# -- Hurwitz zeta: sum over k >= 0 of (q + k)^-x --------------------------------------------------------
_ZETA_SHIFT = 32  # terms summed before the Euler-Maclaurin tail; exact for q > 9 - 32, NaN below (see `_zeta`)
_ZETA_EM = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
            -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
            1.8152105401943546773e17, -7.1661652561756670113e18)  # Cephes' (2k)! / B_2k


def _zeta(m, x, q):
    """Cephes' zeta(x, q) with a fixed number of direct terms: the Euler-Maclaurin tail needs q + 32 > 9, so below
    q = -23 the result is NaN, not a wrong number. inf at x = 1 and at the poles q = 0, -1, ...; NaN for x < 1."""
    total = m.c(0)
    for k in range(_ZETA_SHIFT + 1):
        term = m.pow(m.add(q, m.c(k)), m.neg(x))
        total = m.add(total, term)
    w = m.add(q, m.c(_ZETA_SHIFT))
    total = m.sub(m.add(total, m.div(m.mul(term, w), m.sub(x, m.c(1)))), m.mul(term, m.c(0.5)))
    a, b, k, done = m.c(1), term, 0, m.lt(x, m.c(-math.inf))
    for coef in _ZETA_EM:  # each correction added until one falls below the working precision
        a, b = m.mul(a, m.add(x, m.c(k))), m.div(b, w)
        t = m.div(m.mul(a, b), m.c(coef))
        total, done = m.where(done, total, m.add(total, t)), m.logical_or(done, m.lt(m.abs(t), m.mul(
            m.abs(total), m.c(1.11e-16 if m.f64 else 6e-8))))
        a, b, k = m.mul(a, m.add(x, m.c(k + 1))), m.div(b, w), k + 2
    pole = m.logical_and(m.le(q, m.c(0)), m.eq(q, m.floor(q)))
    total = m.where(m.logical_or(pole, m.eq(x, m.c(1))), m.c(math.inf), total)
    outside = m.logical_or(m.lt(x, m.c(1)), m.logical_and(m.le(q, m.c(0)), m.ne(x, m.floor(x))))
    return m.where(m.logical_or(outside, m.le(q, m.c(9 - _ZETA_SHIFT))), m.c(math.nan), total)


# -- the normal distribution and erfinv -----------------------------------------------------------------
def _erfinv(m, y):
    """Pavlis' rational approximation, then two Newton steps on erf (as torch's calc_erfinv)."""
    a = (-0.140543331, 0.914624893, -1.645349621, 0.886226899)
    b = (0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0)
    c = (1.641345311, 3.429567803, -1.624906493, -1.970840454)
    d = (1.637067800, 3.543889200, 1.0)
    y_abs = m.abs(y)
    z = m.mul(y, y)
    central = m.div(m.mul(y, _poly(m, z, a)), _poly(m, z, b))
    w = m.sqrt(m.neg(m.log(m.div(m.sub(m.c(1), y_abs), m.c(2)))))
    tail = m.div(m.copysign(_poly(m, w, c), y), _poly(m, w, d))
    x = m.where(m.le(y_abs, m.c(0.7)), central, tail)
    for _ in range(2):
        slope = m.mul(m.c(2 / math.sqrt(math.pi)), m.exp(m.neg(m.mul(x, x))))
        x = m.sub(x, m.div(m.sub(m.erf(x), y), slope))
    x = m.where(m.eq(y_abs, m.c(1)), m.copysign(m.c(math.inf), y), x)
    return m.where(m.gt(y_abs, m.c(1)), m.c(math.nan), x)


def _ndtr(m, x):
    return m.mul(m.erfc(m.mul(x, m.c(-1 / math.sqrt(2)))), m.c(0.5))


_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
             -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
             1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
             -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
             2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
             2.89247864745380683936E-6, 6.79019408009981274425E-9)
_EXP_M2 = 0.13533528323661269189  # exp(-2)


def _ndtri(m, p):
    """The inverse of ndtr: Cephes' rational approximations around 1/2 and in each tail."""
    upper = m.gt(p, m.c(1 - _EXP_M2))
    y = m.where(upper, m.sub(m.c(1), p), p)
    h = m.sub(y, m.c(0.5))
    h2 = m.mul(h, h)
    central = m.mul(m.add(h, m.mul(h, m.div(m.mul(h2, _poly(m, h2, _NDTRI_P0)), _poly(m, h2, _NDTRI_Q0)))),
                    m.c(math.sqrt(2 * math.pi)))
    t = m.sqrt(m.mul(m.log(y), m.c(-2)))
    z = _recip(m, t)
    near = m.div(m.mul(z, _poly(m, z, _NDTRI_P1)), _poly(m, z, _NDTRI_Q1))
    far = m.div(m.mul(z, _poly(m, z, _NDTRI_P2)), _poly(m, z, _NDTRI_Q2))
    tail = m.sub(m.sub(t, m.div(m.log(t), t)), m.where(m.lt(t, m.c(8)), near, far))
    out = m.where(m.gt(y, m.c(_EXP_M2)), central, m.where(upper, tail, m.neg(tail)))
    out = m.where(m.eq(p, m.c(0)), m.c(-math.inf), m.where(m.eq(p, m.c(1)), m.c(math.inf), out))
    return m.where(m.logical_or(m.lt(p, m.c(0)), m.gt(p, m.c(1))), m.c(math.nan), out)


def _erfcx(m, x):
    """exp(x^2) erfc(x); above 5 (float) or 26 (double), where erfc underflows or exp(x^2) loses digits, the
    asymptotic series 1 / (x sqrt(pi)) sum (-1)^k (2k-1)!! / (2x^2)^k."""
    r = _recip(m, m.mul(m.mul(x, x), m.c(2)))
    terms = [(-1) ** k * math.prod(range(1, 2 * k, 2)) for k in range(10, -1, -1)]
    series = m.div(_poly(m, r, terms), m.mul(x, m.c(math.sqrt(math.pi))))
    direct = m.mul(m.exp(m.mul(x, x)), m.erfc(x))
    return m.where(m.gt(x, m.c(26 if m.f64 else 5)), series, direct)


def _log_ndtr(m, x):
    """log ndtr(x): log1p(-ndtr(-x)) above -1, log ndtr(x) below, and far below (where erfc underflows) the
    asymptotic series -x^2/2 - log(-x sqrt(2 pi)) + log(1 - 1/x^2 + 3/x^4 - ...)."""
    upper = m.log1p(m.neg(_ndtr(m, m.neg(x))))
    lower = m.log(_ndtr(m, x))
    r = _recip(m, m.mul(x, x))
    series = _poly(m, r, (10395, -945, 105, -15, 3, -1, 1))  # sum (-1)^k (2k-1)!! x^-2k, highest first
    gauss = m.add(m.mul(m.mul(x, x), m.c(-0.5)), m.log(series))
    far = m.sub(gauss, m.log(m.mul(m.neg(x), m.c(math.sqrt(2 * math.pi)))))
    out = m.where(m.lt(x, m.c(-1)), lower, upper)
    return m.where(m.lt(x, m.c(-25 if m.f64 else -10)), far, out)


# -- modified Bessel functions of the first kind -----------------------------------------------------------
_I0_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
         1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
         -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
         9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
         -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
         1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
         -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
         1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
         -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
         1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
         3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
         1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
         -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
         7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
         -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
         3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
         2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
         8.04490411014108831608E-1)
_I1_A = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
         -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
         3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
         -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
         9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
         -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
         4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
         -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
         2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
         -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1_B = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
         -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
         -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
         4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
         -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
         3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
         -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
         -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
         7.78576235018280120474E-1)


def _bessel_scaled(m, x, a, b, order: int):
    """exp(-|x|) I_order(x): one Chebyshev series on [0, 8], another in 32/|x| beyond."""
    ax = m.abs(x)
    near = _chbevl(m, m.sub(m.div(ax, m.c(2)), m.c(2)), a)
    if order == 1:
        near = m.mul(near, ax)
    far = m.div(_chbevl(m, m.sub(m.div(m.c(32), ax), m.c(2)), b), m.sqrt(ax))
    out = m.where(m.le(ax, m.c(8)), near, far)
    return m.where(m.lt(x, m.c(0)), m.neg(out), out) if order == 1 else out


def _i0e(m, x):
    return _bessel_scaled(m, x, _I0_A, _I0_B, 0)


def _i1e(m, x):
    return _bessel_scaled(m, x, _I1_A, _I1_B, 1)


def _i0(m, x):
    return m.mul(_i0e(m, x), m.exp(m.abs(x)))


def _i1(m, x):
    return m.mul(_i1e(m, x), m.exp(m.abs(x)))


# -- elementary composites --------------------------------------------------------------------------------
def _sinc(m, x):
    """sin(pi x) / (pi x), 1 at 0."""
    px = m.mul(x, m.c(math.pi))
    return m.where(m.eq(x, m.c(0)), m.c(1), m.div(m.sin(px), px))


def _entr(m, x):
    """-x log x; 0 at 0, -inf below."""
    out = m.where(m.eq(x, m.c(0)), m.c(0), m.neg(m.mul(x, m.log(x))))
    return m.where(m.lt(x, m.c(0)), m.c(-math.inf), out)


def _logit(m, x, eps):
    """log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps >= 0 (torch's eps=None is -1 here)."""
    if eps >= 0:
        x = m.min(m.max(x, m.c(eps)), m.c(1 - eps))
    return m.log(m.div(x, m.sub(m.c(1), x)))


def _xlogy(m, x, y):
    """x log y, 0 where x is 0 (unless y is NaN)."""
    out = m.where(m.eq(x, m.c(0)), m.c(0), m.mul(x, m.log(y)))
    return m.where(m.isnan(y), y, out)


def _xlog1py(m, x, y):
    out = m.where(m.eq(x, m.c(0)), m.c(0), m.mul(x, m.log1p(y)))
    return m.where(m.isnan(y), y, out)


# -- declarations ---------------------------------------------------------------------------------------------
def _reference(fn, attr_names=()):
    def ref(xs, a):
        with np.errstate(all="ignore"):
            out = fn(_NumPy, *(x.astype(np.float64) for x in xs), *(a[k] for k in attr_names))
            return np.asarray(out, np.float64).astype(xs[0].dtype)
    return ref


def _decomposition(fn, attr_names=()):
    def decompose(b, ops, a):
        return fn(_IR(b, ops[0]), *ops, *(a[k] for k in attr_names))
    return decompose


def special(name, fn, operands=1, attrs=None, doc=""):
    """Declare a float composite computed by `fn(m, *operands, *attrs)` over the arithmetic `m`."""
    names = tuple(attrs or ())
    shape = _unary_shape(is_float) if operands == 1 else _binary_shape(is_float)
    register_op(name, operands=operands, shape=shape, reference=_reference(fn, names), attrs=attrs,
                decompose=_decomposition(fn, names), traits=ELEMENTWISE, doc=doc)


def _lgamma_ref(xs, a):
    def one(v):
        try:
            return math.lgamma(v)
        except ValueError:  # a pole: 0, -1, -2, ...
            return math.inf
    return np.vectorize(one, otypes=[np.float64])(xs[0].astype(np.float64)).astype(xs[0].dtype)


register_op("lgamma", shape=_unary_shape(is_float), reference=_lgamma_ref, traits=ELEMENTWISE,
            doc="log |gamma(x)|, inf at the poles")
special("digamma", _digamma)
special("erfinv", _erfinv)
special("ndtr", _ndtr, doc="the standard normal distribution function")
special("ndtri", _ndtri)
special("log_ndtr", _log_ndtr)
special("erfcx", _erfcx, doc="the scaled complementary error function exp(x^2) erfc(x)")
special("i0", _i0)
special("i0e", _i0e)
special("i1", _i1)
special("i1e", _i1e)
special("sinc", _sinc)
special("entr", _entr)
special("logit", _logit, attrs={"eps": Attr("float", -1.0)}, doc="eps < 0: no clamping")
special("xlogy", _xlogy, operands=2)
special("xlog1py", _xlog1py, operands=2)
special("zeta", _zeta, operands=2, doc="the Hurwitz zeta function zeta(x, q); NaN for q <= -23")
