"""ATen's complex and FFT ops: `_fft_r2c`/`_fft_c2c`/`_fft_c2r` (what every `torch.fft` function exports to),
`view_as_real`/`view_as_complex`, `complex`, `polar`, `conj`, and `abs`/`angle` of complex tensors.

ATen's FFT `normalization` is 0 (none), 1 (1/sqrt(n)) or 2 (1/n) for the transform in the direction it runs; the IR
names NumPy's `norm` modes, which say where the 1/n goes.
"""
from __future__ import annotations

from ...ir.core import Value
from ...ir.dtypes import DType
from . import convert_elementwise  # noqa: F401 (registers the real abs and angle that are wrapped here)
from .context import CONVERTERS, aten

_NORM = {(0, False): "backward", (2, False): "forward", (0, True): "forward", (2, True): "backward"}


def _norm(normalization: int, inverse: bool) -> str:
    return "ortho" if normalization == 1 else _NORM[(normalization, inverse)]


@aten("_fft_r2c")
def fft_r2c(cx, x, dim, normalization, onesided):
    if onesided:
        return cx.b.rfft(x, axes=list(dim), norm=_norm(normalization, False))
    z = cx.b.complex(x, cx.tensor(0, x.type.dtype, x.type.shape))
    return cx.b.fft(z, axes=list(dim), norm=_norm(normalization, False))


@aten("_fft_c2c")
def fft_c2c(cx, x, dim, normalization, forward):
    return cx.b.fft(x, axes=list(dim), inverse=not forward, norm=_norm(normalization, not forward))


@aten("_fft_c2r")
def fft_c2r(cx, x, dim, normalization, last_dim_size):
    if not isinstance(last_dim_size, int):
        raise cx.error("an inverse real FFT needs a static output length n")
    return cx.b.irfft(x, axes=list(dim), n=last_dim_size, norm=_norm(normalization, True))


@aten("_conj", "conj", "_conj_physical", "conj_physical", "resolve_conj", "resolve_neg")
def conj(cx, x):
    if cx.op_name in ("resolve_conj", "resolve_neg") or not x.type.dtype.is_complex:
        return x
    return cx.b.conj(x)


@aten("view_as_real")
def view_as_real(cx, x):
    """[..., 2] of (re, im) pairs."""
    shape = x.type.shape + (1,)
    return cx.b.concat(cx.b.reshape(cx.b.real(x), shape=shape), cx.b.reshape(cx.b.imag(x), shape=shape),
                       axis=x.type.rank)


@aten("view_as_complex")
def view_as_complex(cx, x):
    if x.type.dtype not in (DType.f32, DType.f64) or x.type.rank == 0 or x.type.shape[-1] != 2:
        raise cx.error(f"view_as_complex needs an f32 or f64 tensor whose last axis has size 2, got {x.type}")
    axis, shape = x.type.rank - 1, x.type.shape[:-1]
    re, im = (cx.b.reshape(cx.b.slice(x, starts=[i], ends=[i + 1], axes=[axis]), shape=shape) for i in (0, 1))
    return cx.b.complex(re, im)


@aten("complex")
def complex_(cx, re, im):
    real = cx.out_dtype().real
    return cx.b.complex(*cx.operands([re, im], real))


@aten("polar")
def polar(cx, magnitude, angle):
    r, theta = cx.operands([magnitude, angle], cx.out_dtype().real)
    return cx.b.complex(cx.b.mul(r, cx.b.cos(theta)), cx.b.mul(r, cx.b.sin(theta)))


def _of_complex(real_converter, complex_converter):
    """A converter that takes complex operands to `complex_converter` and the others to `real_converter`."""
    def convert(cx, x, *rest):
        if isinstance(x, Value) and x.type.dtype.is_complex:
            return complex_converter(cx, x)
        return real_converter(cx, x, *rest)
    return convert


def _abs(cx, z):
    return cx.b.hypot(cx.b.real(z), cx.b.imag(z))


def _angle(cx, z):
    return cx.b.atan2(cx.b.imag(z), cx.b.real(z))


aten("abs")(_of_complex(CONVERTERS["aten.abs"], _abs))
aten("angle")(_of_complex(CONVERTERS["aten.angle"], _angle))
