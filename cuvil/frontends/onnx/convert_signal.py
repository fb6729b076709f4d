"""Spectral ops: DFT (forward, inverse, one-sided, inverse one-sided) and STFT, on the IR's FFT ops in float64 (so
the transform is as exact as the data allows); MelWeightMatrix's filters, a constant made at conversion time from
its (known) sizes."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from .registry import converter
from .tensors import ir_dtype


def _last(ctx, v, axis: int):
    """v with `axis` moved last (and the permutation that moves it back)."""
    rank = v.type.rank
    perm = tuple(i for i in range(rank) if i != axis) + (axis,)
    back = tuple(int(i) for i in np.argsort(perm))
    return ctx.b.transpose(v, perm=perm), back


def _fit(ctx, v, length: int):
    """v cut or zero-padded along its last axis to `length`."""
    n = v.type.shape[-1]
    if n > length:
        return ctx.b.slice(v, starts=(0,), ends=(length,), axes=(v.type.rank - 1,))
    if n < length:
        return ctx.b.pad(v, pads=(0,) * (2 * v.type.rank - 1) + (length - n,))
    return v


def spectrum(ctx, re, im, n: int, inverse: bool, onesided: bool) -> tuple:
    """The DFT of re + i*im along the last axis (length n after cutting or padding): (real, imag), or
    (real, None) for the inverse of a one-sided spectrum (a real signal), by the IR's FFT ops."""
    last = re.type.rank - 1
    if inverse and onesided:
        bins = n // 2 + 1
        z = _fit(ctx, ctx.b.complex(re, im if im is not None else _zeros(ctx, re)), bins)
        return ctx.b.irfft(z, axes=[last], n=n), None
    if im is None and not inverse and onesided:
        z = ctx.b.rfft(_fit(ctx, re, n), axes=[last])
    else:
        z = ctx.b.complex(re, im if im is not None else _zeros(ctx, re))
        z = ctx.b.fft(_fit(ctx, z, n), axes=[last], inverse=inverse)
        if onesided:
            z = ctx.b.slice(z, starts=(0,), ends=(n // 2 + 1,), axes=(last,))
    return ctx.b.real(z), ctx.b.imag(z)


def _zeros(ctx, v):
    return ctx.b.full(0.0, v.type.shape, v.type.dtype)


def _parts(ctx, x) -> tuple:
    """The real and (if present) imaginary parts of a [..., 1 or 2] signal, in float64, last dim dropped."""
    rank, pair = x.type.rank, x.type.shape[-1]
    x64 = ctx.cast(x, DType.f64)

    def part(i):
        return ctx.b.reshape(ctx.b.slice(x64, starts=(i,), ends=(i + 1,), axes=(rank - 1,)), shape=x.type.shape[:-1])
    return part(0), part(1) if pair == 2 else None


def _join(ctx, parts, back, dtype):
    moved = [ctx.b.transpose(p, perm=back) for p in parts if p is not None]
    stacked = ctx.b.concat(*[ctx.b.reshape(p, shape=p.type.shape + (1,)) for p in moved], axis=len(back))
    return ctx.cast(stacked, dtype)


@converter("DFT")
def dft(ctx):
    x = ctx.x(0)
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    axis = ctx.attr("axis", 1) if ctx.opset < 20 else ctx.known_scalar(2, "axis", -2)
    axis = axis + x.type.rank if axis < 0 else axis
    length = x.type.shape[axis]
    n = ctx.known_scalar(1, "dft_length", 2 * (length - 1) if inverse and onesided else length)
    if not isinstance(n, int):
        raise ctx.unsupported("the transform length must be static")
    re, im = _parts(ctx, x)
    re, back = _last(ctx, re, axis)
    im = _last(ctx, im, axis)[0] if im is not None else None
    return [_join(ctx, spectrum(ctx, re, im, n, inverse, onesided), back, x.type.dtype)]


@converter("STFT")
def stft(ctx):
    """Frames [batch, frames, length] gathered by a table of positions, windowed, then a DFT of each frame."""
    x = ctx.x(0)
    step = ctx.known_scalar(1, "frame_step")
    window = ctx.x(2) if ctx.has(2) else None
    size = ctx.known_scalar(3, "frame_length", window.type.shape[0] if window is not None else None)
    signal = x.type.shape[1]
    if not all(isinstance(v, int) for v in (size, signal)):
        raise ctx.unsupported("STFT needs a static signal length and frame length")
    frames = 1 + (signal - size) // step
    table = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    re, im = _parts(ctx, x)
    re, im = (ctx.b.gather(p, ctx.const(table), axis=1) if p is not None else None for p in (re, im))
    if window is not None:
        w = ctx.expand(ctx.b.reshape(ctx.cast(window, DType.f64), shape=(1, 1, size)), re.type.shape)
        re, im = ctx.b.mul(re, w), ctx.b.mul(im, w) if im is not None else None
    parts = spectrum(ctx, re, im, size, False, bool(ctx.attr("onesided", 1)))
    return [_join(ctx, parts, (0, 1, 2), x.type.dtype)]


def mel_filters(bins: int, length: int, rate: float, low_hz: float, high_hz: float) -> np.ndarray:
    """[length // 2 + 1, bins] triangular filters on the mel scale, as ONNX's reference places them: bins + 2
    edges spaced evenly in mel from low_hz, each at spectrum bin floor((length + 1) hz / rate)."""
    low, high = (2595 * np.log10(1 + f / 700) for f in (low_hz, high_hz))
    mel = np.arange(bins + 2) * ((high - low) / (bins + 2)) + low
    edge = ((length + 1) * (700 * (10 ** (mel / 2595) - 1)) // rate).astype(np.int64)
    out = np.zeros((length // 2 + 1, bins))
    if edge.min() < 0 or edge[:-1].max() >= out.shape[0] or edge[-1] > out.shape[0]:  # the last edge is exclusive
        raise ValueError(f"the filters' edges {edge.min()}..{edge.max()} fall outside the {out.shape[0]} "
                         "spectrum bins")
    for i, (left, center, right) in enumerate(zip(edge, edge[1:], edge[2:])):
        j = np.arange(left, center + 1)
        out[j, i] = (j - left) / (center - left) if center > left else 1.0
        j = np.arange(center, right)
        out[j, i] = (right - j) / (right - center)
    return out


@converter("MelWeightMatrix")
def mel_weight_matrix(ctx):
    """The filters as a constant: the inputs are sizes and frequencies, known when the model loads."""
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    bins, length, rate, low, high = (ctx.known_scalar(i, n) for i, n in enumerate(names))
    if not (isinstance(bins, int) and isinstance(length, int)) or bins < 1 or length < 1 or rate <= 0:
        raise ctx.error(f"needs num_mel_bins and dft_length of at least 1 and a positive sample_rate, got {bins}, "
                        f"{length} and {rate}")
    try:
        filters = mel_filters(bins, length, rate, low, high)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    return [ctx.const(filters.astype(ir_dtype(ctx.attr("output_datatype", 1)).numpy))]
