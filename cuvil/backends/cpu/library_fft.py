"""Library emitters for the FFTs (cuvil/ops/fft.py): fft, rfft and irfft over any axes, of any length.

The whole tensor is copied into a double-precision complex scratch buffer and transformed one axis at a time in
place: each line along the axis is gathered, transformed (iterative radix-2 for powers of two, Bluestein's chirp-z
through a power-of-two convolution for every other length) and scattered back, scaled for its `norm`. rfft
transforms its full-length real input and keeps the non-negative frequencies of its last axis; irfft runs the
inverse over its other axes first, then extends each last-axis line to its Hermitian spectrum and keeps the real
part, as NumPy's pocketfft does. Lines run one after another on one thread.
"""
from __future__ import annotations

from .c_exprs import load, store_value
from .library_util import axis_split, c_dim, open_block, prod, scratch_parts

FFT_C = """typedef double _Complex cuvil_cd;

static inline cuvil_cd cuvil_cmul(cuvil_cd a, cuvil_cd b)
{
    return __builtin_complex(__real__ a * __real__ b - __imag__ a * __imag__ b,
                             __real__ a * __imag__ b + __imag__ a * __real__ b);
}

static inline cuvil_cd cuvil_cexpi(double angle) { return __builtin_complex(cos(angle), sin(angle)); }

/* In-place iterative radix-2 DFT of a power-of-two length n, exponent sign `sign` (-1 forward), unscaled. */
static void cuvil_fft_pow2(cuvil_cd *a, int64_t n, double sign)
{
    for (int64_t i = 1, j = 0; i < n; i++) {
        int64_t bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) { cuvil_cd t = a[i]; a[i] = a[j]; a[j] = t; }
    }
    for (int64_t len = 2; len <= n; len <<= 1)
        for (int64_t k = 0; k < len / 2; k++) {
            cuvil_cd w = cuvil_cexpi(sign * 6.283185307179586476925 * (double)k / (double)len);
            for (int64_t i = k; i < n; i += len) {
                cuvil_cd u = a[i], v = cuvil_cmul(a[i + len / 2], w);
                a[i] = u + v;
                a[i + len / 2] = u - v;
            }
        }
}

/* In-place unscaled DFT of any length n: Bluestein's chirp-z, a convolution of length m (a power of two >= 2n - 1)
 * in `work` (2 m + n elements; m < 4 n). */
static void cuvil_fft_any(cuvil_cd *x, int64_t n, double sign, cuvil_cd *work)
{
    if ((n & (n - 1)) == 0) {
        cuvil_fft_pow2(x, n, sign);
        return;
    }
    int64_t m = 1;
    while (m < 2 * n - 1) m <<= 1;
    cuvil_cd *a = work, *b = work + m, *w = work + 2 * m;
    for (int64_t k = 0; k < n; k++)  /* w_k = e^{sign i pi k^2 / n}, k^2 reduced mod 2n to keep the angle exact */
        w[k] = cuvil_cexpi(sign * 3.14159265358979323846 * (double)((k * k) % (2 * n)) / (double)n);
    for (int64_t k = 0; k < m; k++) a[k] = b[k] = 0;
    for (int64_t k = 0; k < n; k++) {
        a[k] = cuvil_cmul(x[k], w[k]);
        b[k] = ~w[k];
        if (k) b[m - k] = ~w[k];
    }
    cuvil_fft_pow2(a, m, -1.0);
    cuvil_fft_pow2(b, m, -1.0);
    for (int64_t k = 0; k < m; k++) a[k] = cuvil_cmul(a[k], b[k]);
    cuvil_fft_pow2(a, m, 1.0);
    for (int64_t k = 0; k < n; k++) x[k] = cuvil_cmul(a[k], w[k]) / (double)m;
}

/* The DFT of every line along the middle axis of an [outer, n, inner] tensor, in place, each scaled by `scale`;
 * `work` holds 10 n elements. */
static void cuvil_fft_lines(cuvil_cd *data, int64_t outer, int64_t n, int64_t inner, double sign, double scale,
                            cuvil_cd *work)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            cuvil_cd *line = data + o * n * inner + j;
            for (int64_t k = 0; k < n; k++) work[k] = line[k * inner];
            cuvil_fft_any(work, n, sign, work + n);
            for (int64_t k = 0; k < n; k++) line[k * inner] = work[k] * scale;
        }
}
"""

_WORK_PER_LENGTH = 10  # complex elements of `work` per unit of line length (see cuvil_fft_lines)


def _scale(norm: str, n: str, inverse: bool) -> str:
    if norm == "ortho":
        return f"(1.0 / sqrt((double){n}))"
    return f"(1.0 / (double){n})" if (norm == "backward") == inverse else "1.0"


def _transform(gen, d: int, buffer: str, shape, axes, inverse: bool, norm: str) -> None:
    """Transform `buffer` (of `shape`) along each of `axes`, in place."""
    for axis in axes:
        outer, n, inner = axis_split(shape, axis)
        gen.line(d, f"cuvil_fft_lines({buffer}, {outer}, {n}, {inner}, {'1.0' if inverse else '-1.0'}, "
                    f"{_scale(norm, n, inverse)}, work);")


def _open(gen, depth: int, op, buffers: list, spectrum_shape) -> int:
    """The op's block, its operand x and result y, and scratch: the named [(C name, shape)] buffers and `work` for
    lines as long as the transformed axes of `spectrum_shape` (the full-length complex tensor)."""
    gen.helpers["cuvil_fft"] = FFT_C
    d = open_block(gen, depth, op, {"x": op.operands[0], "y": op.results[0]})
    lengths = " + ".join(c_dim(spectrum_shape[a]) for a in op.attrs["axes"])
    parts = [(name, "cuvil_cd", c_dim(prod(shape))) for name, shape in buffers]
    scratch_parts(gen, d, parts + [("work", "cuvil_cd", f"{_WORK_PER_LENGTH} * ({lengths}) + 1")])
    return d


def _fill(gen, d: int, buffer: str, x) -> None:
    gen.line(d, f"for (int64_t e = 0; e < {c_dim(x.type.numel)}; e++) {buffer}[e] = {load(x.type.dtype, 'x', 'e')};")


def _fft(gen, op, depth: int) -> None:
    x, y = op.operands[0], op.results[0]
    d = _open(gen, depth, op, [("a", x.type.shape)], x.type.shape)
    _fill(gen, d, "a", x)
    _transform(gen, d, "a", x.type.shape, op.attrs["axes"], op.attrs["inverse"], op.attrs["norm"])
    gen.line(d, f"for (int64_t e = 0; e < {c_dim(y.type.numel)}; e++) y[e] = {store_value(y.type.dtype, 'a[e]')};")
    gen.line(depth, "}")


def _rfft(gen, op, depth: int) -> None:
    """The full complex transform of the real input; the last axis keeps its first n // 2 + 1 entries."""
    x, y = op.operands[0], op.results[0]
    d = _open(gen, depth, op, [("a", x.type.shape)], x.type.shape)
    _fill(gen, d, "a", x)
    _transform(gen, d, "a", x.type.shape, op.attrs["axes"], False, op.attrs["norm"])
    outer, n, inner = axis_split(x.type.shape, op.attrs["axes"][-1])
    half = c_dim(y.type.shape[op.attrs["axes"][-1]])
    gen.line(d, f"for (int64_t o = 0; o < {outer}; o++)")
    gen.line(d + 1, f"for (int64_t k = 0; k < {half}; k++)")
    gen.line(d + 2, f"for (int64_t j = 0; j < {inner}; j++)")  # an empty axis (n = 0) has one zero frequency
    gen.line(d + 3, f"y[(o * {half} + k) * {inner} + j] = k < {n} ? "
                    f"{store_value(y.type.dtype, f'a[(o * {n} + k) * {inner} + j]')} : 0;")
    gen.line(depth, "}")


def _irfft(gen, op, depth: int) -> None:
    """The inverse over the other axes (in `h`), each last-axis line extended to its Hermitian spectrum (in `a`), the
    inverse along it, and the real part."""
    x, y = op.operands[0], op.results[0]
    axes, norm, n = op.attrs["axes"], op.attrs["norm"], op.attrs["n"]
    d = _open(gen, depth, op, [("h", x.type.shape), ("a", y.type.shape)], y.type.shape)
    _fill(gen, d, "h", x)
    _transform(gen, d, "h", x.type.shape, axes[:-1], True, norm)
    outer, half, inner = axis_split(x.type.shape, axes[-1])
    gen.line(d, f"for (int64_t o = 0; o < {outer}; o++)")
    gen.line(d + 1, f"for (int64_t k = 0; k < {n}; k++)")
    gen.line(d + 2, f"for (int64_t j = 0; j < {inner}; j++)")
    gen.line(d + 3, f"a[(o * {n} + k) * {inner} + j] = k < {half} ? h[(o * {half} + k) * {inner} + j] : "
                    f"~h[(o * {half} + {n} - k) * {inner} + j];")
    _transform(gen, d, "a", y.type.shape, axes[-1:], True, norm)
    gen.line(d, f"for (int64_t e = 0; e < {c_dim(y.type.numel)}; e++) y[e] = "
                f"{store_value(y.type.dtype, '__real__ a[e]')};")
    gen.line(depth, "}")


EMITTERS = {"fft": _fft, "rfft": _rfft, "irfft": _irfft}
