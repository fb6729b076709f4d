"""Bessel functions of `torch.special` beyond i0/i1: J0, J1, Y0, Y1, K0, K1 (and exp(x)-scaled K0, K1), the
spherical j0 and the Airy function Ai.

Composites in the manner of special.py (one function over the arithmetic `m`, NumPy's float64 reference and the
IR decomposition in the operand's type), with Cephes' algorithms and coefficients (Moshier, "Methods and Programs
for Mathematical Functions", 1989; j0.c, j1.c, k0.c, k1.c, airy.c): rational approximations below 5 (J, Y) and
the Hankel asymptotic forms beyond; Chebyshev series for K; for Ai, its power series on [-2.09, 2.09] and
asymptotic expansions outside. Cephes' p1evl (a polynomial with an implied leading 1) is written out as such.
Accuracy in float32: about 1e-6 absolute for J and Y (their roots make relative error unbounded), a few ulp
relative for K and Ai.
"""
from __future__ import annotations

import math

from .special import _chbevl, _i0, _i1, _poly, _recip, special

_SQ2OPI = math.sqrt(2 / math.pi)
_TWOOPI = 2 / math.pi


def _p1evl(m, x, coefs):
    """A polynomial whose leading coefficient is 1 (left out of `coefs`), highest order first."""
    return _poly(m, x, (1.0, *coefs))


# -- J0, Y0 ---------------------------------------------------------------------------------------------------
_J0_PP = (7.96936729297347051624E-4, 8.28352392107440799803E-2, 1.23953371646414299388E0, 5.44725003058768775090E0,
          8.74716500199817011941E0, 5.30324038235394892183E0, 9.99999999999999997821E-1)
_J0_PQ = (9.24408810558863637013E-4, 8.56288474354474431428E-2, 1.25352743901058953537E0, 5.47097740330417105182E0,
          8.76190883237069594232E0, 5.30605288235394617618E0, 1.00000000000000000218E0)
_J0_QP = (-1.13663838898469149931E-2, -1.28252718670509318512E0, -1.95539544257735972385E1,
          -9.32060152123768231369E1, -1.77681167980488050595E2, -1.47077505154951170175E2,
          -5.14105326766599330220E1, -6.05014350600728481186E0)
_J0_QQ = (6.43178256118178023184E1, 8.56430025976980587198E2, 3.88240183605401609683E3, 7.24046774195652478189E3,
          5.93072701187316984827E3, 2.06209331660327847417E3, 2.42005740240291393179E2)  # p1evl
_J0_RP = (-4.79443220978201773821E9, 1.95617491946556577543E12, -2.49248344360967716204E14,
          9.70862251047306323952E15)
_J0_RQ = (4.99563147152651017219E2, 1.73785401676374683123E5, 4.84409658339962045305E7, 1.11855537045356834862E10,
          2.11277520115489217587E12, 3.10518229857422583814E14, 3.18121955943204943306E16,
          1.71086294081043136091E18)  # p1evl
_J0_ZEROS_SQ = (5.78318596294678452118E0, 3.04712623436620863991E1)  # the squares of J0's first two roots
_Y0_YP = (1.55924367855235737965E4, -1.46639295903971606143E7, 5.43526477051876500413E9, -9.82136065717911466409E11,
          8.75906394395366999549E13, -3.46628303384729719441E15, 4.42733268572569800351E16,
          -1.84950800436986690637E16)
_Y0_YQ = (1.04128353664259848412E3, 6.26107330137134956842E5, 2.68919633393814121987E8, 8.64002487103935000337E10,
          2.02979612750105546709E13, 3.17157752842975028269E15, 2.50596256172653059228E17)  # p1evl

# -- J1, Y1 ---------------------------------------------------------------------------------------------------
_J1_PP = (7.62125616208173112003E-4, 7.31397056940917570436E-2, 1.12719608129684925192E0, 5.11207951146807644818E0,
          8.42404590141772420927E0, 5.21451598682361504063E0, 1.00000000000000000254E0)
_J1_PQ = (5.71323128072548699714E-4, 6.88455908754495404082E-2, 1.10514232634061696926E0, 5.07386386128601488557E0,
          8.39985554327604159757E0, 5.20982848682361821619E0, 9.99999999999999997461E-1)
_J1_QP = (5.10862594750176621635E-2, 4.98213872951233449420E0, 7.58238284132545283818E1, 3.66779609360150777800E2,
          7.10856304998926107277E2, 5.97489612400613639965E2, 2.11688757100572135698E2, 2.52070205858023719784E1)
_J1_QQ = (7.42373277035675149943E1, 1.05644886038262816351E3, 4.98641058337653607651E3, 9.56231892404756170795E3,
          7.99704160447350683650E3, 2.82619278517639096600E3, 3.36093607810698293419E2)  # p1evl
_J1_RP = (-8.99971225705559398224E8, 4.52228297998194034323E11, -7.27494245221818276015E13,
          3.68295732863852883286E15)
_J1_RQ = (6.20836478118054335476E2, 2.56987256757748830383E5, 8.35146791431949253037E7, 2.21511595479792499675E10,
          4.74914122079991414898E12, 7.84369607876235854894E14, 8.95222336184627338078E16,
          5.32278620332680085395E18)  # p1evl
_J1_ZEROS_SQ = (1.46819706421238932572E1, 4.92184563216946036703E1)
_Y1_YP = (1.26320474790178026440E9, -6.47355876379160291031E11, 1.14509511541823727583E14,
          -8.12770255501325109621E15, 2.02439475713594898196E17, -7.78877196265950026825E17)
_Y1_YQ = (5.94301592346128195359E2, 2.35564092943068577943E5, 7.34811944459721705660E7, 1.87601316108706159478E10,
          3.88231277496238566008E12, 6.20557727146953693363E14, 6.87141087355300489866E16,
          3.97270608116560655612E18)  # p1evl


def _hankel(m, ax, pp, pq, qp, qq, phase, y: bool):
    """J (y False) or Y (y True) beyond 5 from the Hankel asymptotic form: P cos(x - phase) - Q sin(x - phase)
    for J, P sin + Q cos for Y, times sqrt(2 / (pi x)); P, Q rational in (5/x)^2."""
    w = m.div(m.c(5), ax)
    z = m.mul(w, w)
    p = m.div(_poly(m, z, pp), _poly(m, z, pq))
    q = m.mul(w, m.div(_poly(m, z, qp), _p1evl(m, z, qq)))
    xn = m.sub(ax, m.c(phase))
    c, s = m.cos(xn), m.sin(xn)
    out = m.add(m.mul(p, s), m.mul(q, c)) if y else m.sub(m.mul(p, c), m.mul(q, s))
    return m.mul(out, m.div(m.c(_SQ2OPI), m.sqrt(ax)))


def _vanish_at_inf(m, x, out):
    """J and Y tend to 0 at +-inf, where the asymptotic form would give inf * 0 = NaN."""
    return m.where(m.eq(m.abs(x), m.c(math.inf)), m.c(0), out)


def _j0(m, x):
    ax = m.abs(x)
    z = m.mul(x, x)
    near = m.mul(m.mul(m.sub(z, m.c(_J0_ZEROS_SQ[0])), m.sub(z, m.c(_J0_ZEROS_SQ[1]))),
                 m.div(_poly(m, z, _J0_RP), _p1evl(m, z, _J0_RQ)))
    near = m.where(m.lt(ax, m.c(1e-5)), m.sub(m.c(1), m.div(z, m.c(4))), near)
    far = _hankel(m, ax, _J0_PP, _J0_PQ, _J0_QP, _J0_QQ, math.pi / 4, y=False)
    return _vanish_at_inf(m, x, m.where(m.le(ax, m.c(5)), near, far))


def _j1(m, x):
    """Odd: computed at |x|, the sign restored."""
    ax = m.abs(x)
    z = m.mul(x, x)
    near = m.mul(m.mul(m.div(_poly(m, z, _J1_RP), _p1evl(m, z, _J1_RQ)), ax),
                 m.mul(m.sub(z, m.c(_J1_ZEROS_SQ[0])), m.sub(z, m.c(_J1_ZEROS_SQ[1]))))
    far = _hankel(m, ax, _J1_PP, _J1_PQ, _J1_QP, _J1_QQ, 3 * math.pi / 4, y=False)
    out = m.where(m.le(ax, m.c(5)), near, far)
    return _vanish_at_inf(m, x, m.where(m.lt(x, m.c(0)), m.neg(out), out))


def _y_domain(m, x, out):
    """Y is -inf at 0 and NaN below."""
    out = m.where(m.eq(x, m.c(0)), m.c(-math.inf), out)
    return m.where(m.lt(x, m.c(0)), m.c(math.nan), _vanish_at_inf(m, x, out))


def _y0(m, x):
    z = m.mul(x, x)
    near = m.add(m.div(_poly(m, z, _Y0_YP), _p1evl(m, z, _Y0_YQ)), m.mul(m.mul(m.c(_TWOOPI), m.log(x)), _j0(m, x)))
    far = _hankel(m, x, _J0_PP, _J0_PQ, _J0_QP, _J0_QQ, math.pi / 4, y=True)
    return _y_domain(m, x, m.where(m.le(x, m.c(5)), near, far))


def _y1(m, x):
    z = m.mul(x, x)
    log_term = m.mul(m.c(_TWOOPI), m.sub(m.mul(_j1(m, x), m.log(x)), _recip(m, x)))
    near = m.add(m.mul(x, m.div(_poly(m, z, _Y1_YP), _p1evl(m, z, _Y1_YQ))), log_term)
    far = _hankel(m, x, _J1_PP, _J1_PQ, _J1_QP, _J1_QQ, 3 * math.pi / 4, y=True)
    return _y_domain(m, x, m.where(m.le(x, m.c(5)), near, far))


# -- K0, K1 ----------------------------------------------------------------------------------------------------
_K0_A = (1.37446543561352307156E-16, 4.25981614279661018399E-14, 1.03496952576338420167E-11,
         1.90451637722020886025E-9, 2.53479107902614945675E-7, 2.28621210311945178607E-5, 1.26461541144692592338E-3,
         3.59799365153615016266E-2, 3.44289899924628486886E-1, -5.35327393233902768720E-1)
_K0_B = (5.30043377268626276149E-18, -1.64758043015242134646E-17, 5.21039150503902756861E-17,
         -1.67823109680541210385E-16, 5.51205597852431940784E-16, -1.84859337734377901440E-15,
         6.34007647740507060557E-15, -2.22751332699166985548E-14, 8.03289077536357521100E-14,
         -2.98009692317273043925E-13, 1.14034058820847496303E-12, -4.51459788337394416547E-12,
         1.85594911495471785253E-11, -7.95748924447710747776E-11, 3.57739728140030116597E-10,
         -1.69753450938905987466E-9, 8.57403401741422608519E-9, -4.66048989768794782956E-8,
         2.76681363944501510342E-7, -1.83175552271911948767E-6, 1.39498137188764993662E-5,
         -1.28495495816278026384E-4, 1.56988388573005337491E-3, -3.14481013119645005427E-2,
         2.44030308206595545468E0)
_K1_A = (-7.02386347938628759343E-18, -2.42744985051936593393E-15, -6.66690169419932900609E-13,
         -1.41148839263352776110E-10, -2.21338763073472585583E-8, -2.43340614156596823496E-6,
         -1.73028895751305206302E-4, -6.97572385963986435018E-3, -1.22611180822657148235E-1,
         -3.53155960776544875667E-1, 1.52530022733894777053E0)
_K1_B = (-5.75674448366501715755E-18, 1.79405087314755922667E-17, -5.68946255844285935196E-17,
         1.83809354436663880070E-16, -6.05704724837331885336E-16, 2.03870316562433424052E-15,
         -7.01983709041831346144E-15, 2.47715442448130437068E-14, -8.97670518232499435011E-14,
         3.34841966607842919884E-13, -1.28917396095102890680E-12, 5.13963967348173025100E-12,
         -2.12996783842756842877E-11, 9.21831518760500529508E-11, -4.19035475934189648750E-10,
         2.01504975519703286596E-9, -1.03457624656780970260E-8, 5.74108412545004946722E-8,
         -3.50196060308781257119E-7, 2.40648494783721712015E-6, -1.93619797416608296024E-5,
         1.95215518471351631108E-4, -2.85781685962277938680E-3, 1.03923736576817238437E-1,
         2.72062619048444266945E0)


def _k(m, x, order: int, scaled: bool):
    """K_order(x), or exp(x) K_order(x): a Chebyshev series in x^2 - 2 (with I's log term) up to 2, one in
    8/x - 2 times exp(-x) / sqrt(x) beyond; inf at 0, NaN below."""
    log_half = m.log(m.mul(x, m.c(0.5)))
    series = _chbevl(m, m.sub(m.mul(x, x), m.c(2)), _K0_A if order == 0 else _K1_A)
    if order == 0:
        near = m.sub(series, m.mul(log_half, _i0(m, x)))
    else:
        near = m.add(m.mul(log_half, _i1(m, x)), m.div(series, x))
    far = m.div(_chbevl(m, m.sub(m.div(m.c(8), x), m.c(2)), _K0_B if order == 0 else _K1_B), m.sqrt(x))
    if scaled:
        near = m.mul(near, m.exp(x))
    else:
        far = m.mul(far, m.exp(m.neg(x)))
    out = m.where(m.le(x, m.c(2)), near, far)
    out = m.where(m.eq(x, m.c(0)), m.c(math.inf), out)
    return m.where(m.lt(x, m.c(0)), m.c(math.nan), out)


# -- spherical j0 and Airy Ai ----------------------------------------------------------------------------------
def _spherical_j0(m, x):
    """sin(x) / x; below |x| = 0.5 its Taylor series (to x^12), 0 at +-inf."""
    z = m.mul(x, x)
    series = _poly(m, z, [(-1) ** k / math.factorial(2 * k + 1) for k in range(6, -1, -1)])
    out = m.where(m.lt(m.abs(x), m.c(0.5)), series, m.div(m.sin(x), x))
    return _vanish_at_inf(m, x, out)


_AI_AN = (3.46538101525629032477E-1, 1.20075952739645805542E1, 7.62796053615234516538E1, 1.68089224934630576269E2,
          1.59756391350164413639E2, 7.05360906840444183113E1, 1.40264691163389668864E1, 9.99999999999999995305E-1)
_AI_AD = (5.67594532638770212846E-1, 1.47562562584847203173E1, 8.45138970141474626562E1, 1.77318088145400459522E2,
          1.64234692871529701831E2, 7.14778400825575695274E1, 1.40959135607834029598E1, 1.00000000000000000470E0)
_AI_AFN = (-1.31696323418331795333E-1, -6.26456544431912369773E-1, -6.93158036036933542233E-1,
           -2.79779981545119124951E-1, -4.91900132609500318020E-2, -4.06265923594885404393E-3,
           -1.59276496239262096340E-4, -2.77649108155232920844E-6, -1.67787698489114633780E-8)
_AI_AFD = (1.33560420706553243746E1, 3.26825032795224613948E1, 2.67367040941499554804E1, 9.18707402907259625840E0,
           1.47529146771666414581E0, 1.15687173795188044134E-1, 4.40291641615211203805E-3,
           7.54720348287414296618E-5, 4.51850092970580378464E-7)  # p1evl
_AI_AGN = (1.97339932091685679179E-2, 3.91103029615688277255E-1, 1.06579897599595591108E0, 9.39169229816650230044E-1,
           3.51465656105547619242E-1, 6.33888919628925490927E-2, 5.85804113048388458567E-3,
           2.82851600836737019778E-4, 6.98793669997260967291E-6, 8.11789239554389293311E-8,
           3.41551784765923618484E-10)
_AI_AGD = (9.30892908077441974853E0, 1.98352928718312140417E1, 1.55646628932864612953E1, 5.47686069422975497931E0,
           9.54293611618961883998E-1, 8.64580826352392193095E-2, 4.12656523824222607191E-3,
           1.01259085116509135510E-4, 1.17166733214413521882E-6, 4.91834570062930015649E-9)  # p1evl
_AI_C1, _AI_C2 = 0.35502805388781723926, 0.258819403792806798405  # Ai(0) and -Ai'(0)
_SQPII = 1 / math.sqrt(math.pi)
_AI_TERMS = 12  # power-series terms: on |x| <= 2.09 the 9th is below double precision already


def _airy_series(m, x):
    """Ai = c1 f - c2 g with f, g the power series sum x^3k / ((2*3)(5*6)...) and x sum x^3k / ((3*4)(6*7)...)."""
    z = m.mul(m.mul(x, x), x)
    f, g, uf, ug = m.c(1), x, m.c(1), x
    for i in range(1, _AI_TERMS + 1):
        uf = m.div(m.mul(uf, z), m.c((3 * i - 1) * 3 * i))
        ug = m.div(m.mul(ug, z), m.c(3 * i * (3 * i + 1)))
        f, g = m.add(f, uf), m.add(g, ug)
    return m.sub(m.mul(f, m.c(_AI_C1)), m.mul(g, m.c(_AI_C2)))


def _airy_ai(m, x):
    """Below -2.09 the oscillating asymptotic form, above 2.09 the decaying one, the power series between; 0 at
    +-inf and above 103.892, where it underflows double."""
    ax = m.abs(x)
    zeta = m.mul(m.mul(ax, m.sqrt(ax)), m.c(2 / 3))
    z = _recip(m, zeta)
    zz = m.mul(z, z)
    uf = m.add(m.c(1), m.mul(zz, m.div(_poly(m, zz, _AI_AFN), _p1evl(m, zz, _AI_AFD))))
    ug = m.mul(z, m.div(_poly(m, zz, _AI_AGN), _p1evl(m, zz, _AI_AGD)))
    theta = m.add(zeta, m.c(math.pi / 4))
    k = m.div(m.c(_SQPII), m.sqrt(m.sqrt(ax)))
    oscillating = m.mul(k, m.sub(m.mul(m.sin(theta), uf), m.mul(m.cos(theta), ug)))
    decaying = m.div(m.mul(m.c(_SQPII), m.div(_poly(m, z, _AI_AN), _poly(m, z, _AI_AD))),
                     m.mul(m.mul(m.sqrt(m.sqrt(ax)), m.c(2)), m.exp(zeta)))
    out = m.where(m.lt(x, m.c(-2.09)), oscillating, m.where(m.ge(x, m.c(2.09)), decaying, _airy_series(m, x)))
    return m.where(m.logical_or(m.gt(x, m.c(103.892)), m.eq(ax, m.c(math.inf))), m.c(0), out)


special("bessel_j0", _j0, doc="the Bessel function of the first kind J0")
special("bessel_j1", _j1, doc="the Bessel function of the first kind J1")
special("bessel_y0", _y0, doc="the Bessel function of the second kind Y0; -inf at 0, NaN below")
special("bessel_y1", _y1, doc="the Bessel function of the second kind Y1; -inf at 0, NaN below")
special("bessel_k0", lambda m, x: _k(m, x, 0, False), doc="the modified Bessel function K0; inf at 0, NaN below")
special("bessel_k1", lambda m, x: _k(m, x, 1, False), doc="the modified Bessel function K1; inf at 0, NaN below")
special("bessel_k0e", lambda m, x: _k(m, x, 0, True), doc="exp(x) K0(x)")
special("bessel_k1e", lambda m, x: _k(m, x, 1, True), doc="exp(x) K1(x)")
special("spherical_bessel_j0", _spherical_j0, doc="sin(x) / x")
special("airy_ai", _airy_ai, doc="the Airy function Ai")
