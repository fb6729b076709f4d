"""Complex numbers and discrete Fourier transforms: `complex`, `real`, `imag`, `conj` (elementwise) and `fft`,
`rfft`, `irfft` over any set of axes, of any length.

Complex tensors are c64 (two f32) or c128 (two f64), stored as interleaved (re, im) pairs. `norm` follows NumPy:
"backward" scales the inverse by 1/n, "forward" the forward transform, "ortho" both by 1/sqrt(n), n being the product
of the transformed lengths. The references compute in complex128 with NumPy's FFT and round once to the result type;
the C kernels (backends/cpu/library_fft.py) compute in double too.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from .common import COMPLEX, norm_axes, require_dtype
from .registry import Attr, register_op

NORMS = ("backward", "ortho", "forward")
_COMPLEX_OF = {DType.f32: DType.c64, DType.f64: DType.c128}
_ELEMENTWISE_COMPLEX = {"elementwise", "complex"}


def _is_real(d: DType) -> bool:
    return d in _COMPLEX_OF


def _is_complex(d: DType) -> bool:
    return d.is_complex


# -- elementwise ---------------------------------------------------------------------------------------------
def _complex_shape(ctx, types, attrs):
    re, im = types
    require_dtype(ctx, re, _is_real, "complex")
    if re != im:
        raise ctx.error(f"'complex' parts must have one type, got {re} and {im} (insert cast and broadcast_to)")
    return [re.with_dtype(_COMPLEX_OF[re.dtype])]


def _part_shape(name: str, to_real: bool):
    def shape(ctx, types, attrs):
        require_dtype(ctx, types[0], _is_complex, name)
        return [types[0].with_dtype(types[0].dtype.real) if to_real else types[0]]
    return shape


def _ref_complex(xs, a):
    re, im = xs
    out = np.empty(re.shape, _COMPLEX_OF[DType.from_numpy(re.dtype)].numpy)
    out.real, out.imag = re, im  # not re + 1j * im, which turns an infinite part into NaN
    return out


register_op("complex", operands=2, shape=_complex_shape, reference=_ref_complex, traits=_ELEMENTWISE_COMPLEX,
            doc="re + i im, from two real tensors")
register_op("real", shape=_part_shape("real", True), reference=lambda xs, a: np.ascontiguousarray(xs[0].real),
            traits=_ELEMENTWISE_COMPLEX)
register_op("imag", shape=_part_shape("imag", True), reference=lambda xs, a: np.ascontiguousarray(xs[0].imag),
            traits=_ELEMENTWISE_COMPLEX)
register_op("conj", shape=_part_shape("conj", False), reference=lambda xs, a: np.conj(xs[0]),
            traits=_ELEMENTWISE_COMPLEX)


# -- transforms ----------------------------------------------------------------------------------------------
_FFT_ATTRS = {"axes": Attr("ints"), "norm": Attr("str", "backward", NORMS)}


def _normalize(types, attrs):
    axes = norm_axes(attrs["axes"], types[0].rank, "fft")
    if not axes:
        raise ValueError("an FFT needs at least one axis")
    return {**attrs, "axes": axes}


def _last_axis_first(types, attrs):
    """rfft and irfft halve their last listed axis, so their axes keep the given order's last one last."""
    axes = attrs["axes"]
    if not axes:
        raise ValueError("an FFT needs at least one axis")
    rank = types[0].rank
    last = norm_axes(axes[-1:], rank, "fft")
    return {**attrs, "axes": tuple(a for a in norm_axes(axes, rank, "fft") if a not in last) + last}


def _fft_shape(ctx, types, attrs):
    require_dtype(ctx, types[0], _is_complex, "fft")
    return [types[0]]


def _rfft_shape(ctx, types, attrs):
    t = types[0]
    require_dtype(ctx, t, _is_real, "rfft", "operand (f32 or f64)")
    last = attrs["axes"][-1]
    shape = list(t.shape)
    shape[last] = shape[last] // 2 + 1
    return [t.with_shape(tuple(shape)).with_dtype(_COMPLEX_OF[t.dtype])]


def _irfft_shape(ctx, types, attrs):
    t, n = types[0], attrs["n"]
    require_dtype(ctx, t, _is_complex, "irfft")
    if n < 1:
        raise ctx.error(f"'irfft' output length n must be positive, got {n}")
    last = attrs["axes"][-1]
    ctx.require_equal(t.shape[last], n // 2 + 1, f"'irfft' axis {last} length (n // 2 + 1 for n = {n})")
    shape = list(t.shape)
    shape[last] = n
    return [t.with_shape(tuple(shape)).with_dtype(t.dtype.real)]


def _ref_fft(xs, a):
    x = xs[0]
    fn = np.fft.ifftn if a["inverse"] else np.fft.fftn
    return fn(x.astype(np.complex128), axes=a["axes"], norm=a["norm"]).astype(x.dtype)


def _ref_rfft(xs, a):
    x = xs[0]
    out = np.fft.rfftn(x.astype(np.float64), axes=a["axes"], norm=a["norm"])
    return out.astype(_COMPLEX_OF[DType.from_numpy(x.dtype)].numpy)


def _ref_irfft(xs, a):
    x, axes = xs[0], a["axes"]
    lengths = [x.shape[ax] for ax in axes[:-1]] + [a["n"]]
    return np.fft.irfftn(x.astype(np.complex128), s=lengths, axes=axes, norm=a["norm"]).astype(x.real.dtype)


register_op("fft", shape=_fft_shape, reference=_ref_fft, normalize=_normalize, traits=COMPLEX,
            attrs={**_FFT_ATTRS, "inverse": Attr("bool", False)},
            doc="the discrete Fourier transform of a complex tensor over `axes` (inverse: e^{+2 pi i jk/n})")
register_op("rfft", shape=_rfft_shape, reference=_ref_rfft, normalize=_last_axis_first, attrs=_FFT_ATTRS,
            doc="the DFT of a real tensor over `axes`: the last one keeps its n // 2 + 1 non-negative frequencies")
register_op("irfft", shape=_irfft_shape, reference=_ref_irfft, normalize=_last_axis_first, traits=COMPLEX,
            attrs={**_FFT_ATTRS, "n": Attr("int")},
            doc="the inverse of rfft: a Hermitian spectrum over `axes` to a real tensor whose last axis has length n")
