"""Complex and FFT cases (cuvil/ops/fft.py), each against an explicit DFT (a float64 matrix product) as the oracle."""
import numpy as np

from .cases import Case, rand

X = rand(3, 7)
Z = (rand(3, 12, seed=1) + 1j * rand(3, 12, seed=2)).astype(np.complex64)
Z128 = (rand(2, 5, 6, dtype="float64") + 1j * rand(2, 5, 6, dtype="float64", seed=3)).astype(np.complex128)


def dft(x, axis: int, inverse: bool = False, norm: str = "backward"):
    """The DFT along one axis as a matrix product in complex128."""
    n = x.shape[axis]
    k = np.arange(n)
    w = np.exp((2j if inverse else -2j) * np.pi * np.outer(k, k) / n)
    scaled = {"ortho": 1 / np.sqrt(n), "backward": 1 / n if inverse else 1.0, "forward": 1.0 if inverse else 1 / n}
    return np.moveaxis(np.tensordot(w, np.moveaxis(x.astype(np.complex128), axis, 0), axes=1), 0, axis) * scaled[norm]


def dftn(x, axes, inverse=False, norm="backward"):
    for a in axes:
        x = dft(x, a, inverse, norm)
    return x


def hermitian(x, axis: int, n: int):
    """The full spectrum of length n whose first n // 2 + 1 entries along `axis` are x's."""
    x = np.moveaxis(x.astype(np.complex128), axis, 0)
    full = np.concatenate([x, np.conj(x[1:n - n // 2][::-1])])
    full[0] = full[0].real
    if n % 2 == 0:
        full[n // 2] = full[n // 2].real
    return np.moveaxis(full, 0, axis)


CASES = [
    Case("complex", [X, -X], expected=lambda xs: [xs[0] + 1j * xs[1]]),
    Case("complex", [np.array([np.inf, 1, np.nan], np.float32), np.array([0, -np.inf, 2], np.float32)],
         expected=lambda xs: [np.array([complex(np.inf, 0), complex(1, -np.inf), complex(np.nan, 2)])], id="inf"),
    Case("real", [Z], expected=lambda xs: [xs[0].real]),
    Case("imag", [Z128], expected=lambda xs: [xs[0].imag]),
    Case("conj", [Z], expected=lambda xs: [np.conj(xs[0])]),
    Case("mul", [Z, Z[::-1].copy()], expected=lambda xs: [xs[0].astype(np.complex128) * xs[1]], id="complex"),
    Case("div", [Z, Z[::-1].copy()], expected=lambda xs: [xs[0].astype(np.complex128) / xs[1]], id="complex"),
    Case("fft", [Z], {"axes": [1]}, expected=lambda xs: [dft(xs[0], 1)], atol=2e-5),
    Case("fft", [Z], {"axes": [-1], "inverse": True, "norm": "ortho"},
         expected=lambda xs: [dft(xs[0], 1, True, "ortho")], atol=2e-5, id="inverse-ortho"),
    Case("fft", [Z128], {"axes": [0, 2], "norm": "forward"},
         expected=lambda xs: [dftn(xs[0], [0, 2], False, "forward")], id="2d-c128"),
    Case("fft", [Z], {"axes": [0, 1]}, expected=lambda xs: [dftn(xs[0], [0, 1])], atol=1e-4, dims={0: {1: "n"}},
         id="symbolic"),
    Case("rfft", [X], {"axes": [1]}, expected=lambda xs: [dft(xs[0], 1)[:, :4]], atol=2e-5),
    Case("rfft", [X], {"axes": [1, 0], "norm": "ortho"},
         expected=lambda xs: [dftn(xs[0], [1, 0], norm="ortho")[:2]], atol=2e-5, id="halves-the-last-axis"),
    Case("irfft", [Z[:, :7].copy()], {"axes": [1], "n": 12},
         expected=lambda xs: [dft(hermitian(xs[0], 1, 12), 1, True).real], atol=2e-5),
    Case("irfft", [Z128[:, :, :3].copy()], {"axes": [0, 2], "n": 5, "norm": "forward"},
         expected=lambda xs: [dft(hermitian(dft(xs[0], 0, True, "forward"), 2, 5), 2, True, "forward").real],
         id="odd-2d"),
]
