"""The FFT kernels (backends/cpu/library_fft.py) and complex elementwise loops, compiled, against the interpreter at
odd and even lengths: 1, primes (Bluestein's chirp-z), composites and powers of two (radix 2)."""
import numpy as np
import pytest

from cuvil.compiler import compile_module
from cuvil.errors import UnsupportedError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym

LENGTHS = (1, 7, 12, 97, 128)


def _random_complex(rng, shape, dtype=np.complex64):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _close(got, want, tol):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        scale = max(1.0, float(np.abs(w).max(initial=0)))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("n", LENGTHS)
def test_transforms_of_every_length_match_the_interpreter(n):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (3, n)), TensorType("c64", (n, 5))])
    x, z = b.args
    b.ret(b.rfft(x, axes=[1]), b.fft(z, axes=[0]), b.fft(z, axes=[0, 1], inverse=True, norm="ortho"),
          b.irfft(b.rfft(x, axes=[0, 1]), axes=[0, 1], n=n, norm="forward"),
          b.fft(b.complex(x, b.neg(x)), axes=[1], norm="forward"))
    rng = np.random.default_rng(n)
    inputs = [rng.standard_normal((3, n)).astype(np.float32), _random_complex(rng, (n, 5))]
    _close(compile_module(m)(*inputs), interpret(m, inputs), 2e-5)


@pytest.mark.parametrize("n", (5, 16, 33))
def test_double_precision_transforms_are_accurate_to_double_rounding(n):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("c128", (2, n))])
    b.ret(b.fft(b.args[0], axes=[1]), b.irfft(b.args[0], axes=[1], n=2 * n - 2 if n > 1 else 1))
    x = _random_complex(np.random.default_rng(0), (2, n), np.complex128)
    _close(compile_module(m)(x), interpret(m, [x]), 1e-12)


def test_symbolic_lengths_are_bound_at_run_time():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("c64", (sym("b"), sym("n")))])
    b.ret(b.fft(b.mul(b.args[0], b.args[0]), axes=[1], inverse=True))
    exe = compile_module(m)
    for shape in ((1, 1), (2, 7), (3, 64), (1, 97)):
        x = _random_complex(np.random.default_rng(sum(shape)), shape)
        _close(exe(x), interpret(m, [x]), 2e-5)


def test_complex_elementwise_ops_fuse_and_match():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4, 6)), TensorType("c64", (4, 6))])
    x, z = b.args
    c = b.div(b.mul(b.complex(x, b.neg(x)), z), b.add(z, b.full(0.5, (4, 6), "c64")))
    b.ret(c, b.real(c), b.imag(b.conj(c)), b.transpose(c, perm=[1, 0]), b.cast(c, dtype="f32"), b.cast(x, dtype="c64"))
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((4, 6)).astype(np.float32), _random_complex(rng, (4, 6))]
    _close(compile_module(m)(*inputs), interpret(m, inputs), 1e-5)


def test_ops_without_complex_support_refuse_complex_operands():
    b = Builder.new_function(Module(), "main", [TensorType("c64", (3,))])
    with pytest.raises(UnsupportedError, match="'exp' does not accept complex operands"):
        b.exp(b.args[0])
    with pytest.raises(UnsupportedError, match="'reduce_sum' does not accept complex"):
        b.reduce_sum(b.args[0], axes=[0])


def test_movement_ops_and_comparisons_carry_complex_values():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("c64", (4, 6)), TensorType("i64", (3,))])
    z, idx = b.args
    padded = b.pad(z, pads=[1, 0, 0, 2], value=1.5)
    b.ret(padded, b.pad(z, pads=[0, 2, 0, 2], mode="reflect"), b.concat(z, b.conj(z), axis=0),
          b.gather(z, idx, axis=1), b.slice(z, starts=[1], ends=[6], axes=[1], steps=[2]),
          b.eq(z, b.conj(z)), b.where(b.ne(z, z), z, b.neg(z)),
          b.broadcast_to(b.reshape(z, shape=(24,)), shape=(2, 24)))
    rng = np.random.default_rng(2)
    x = _random_complex(rng, (4, 6))
    x[0, 0] = x[0, 0].real  # one element equal to its conjugate
    inputs = [x, np.array([0, 5, 2])]
    _close(compile_module(m)(*inputs), interpret(m, inputs), 1e-6)
