"""Complex tensors and torch.fft through the torch frontend: complex inputs and outputs of a compiled module, every
FFT family at odd and even lengths, and an STFT front end, compiled for the CPU and compared with eager PyTorch."""
import pytest
import torch

from cuvil.errors import UnsupportedError

from .helpers import assert_close, check, compile_torch, run_both


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


FFTS = {
    "fft": lambda x: torch.fft.fft(x), "ifft-ortho": lambda x: torch.fft.ifft(x, norm="ortho"),
    "fft-padded": lambda x: torch.fft.fft(x, n=11, norm="forward"), "rfft": lambda x: torch.fft.rfft(x),
    "irfft": lambda x: torch.fft.irfft(x), "irfft-n": lambda x: torch.fft.irfft(x, n=9, norm="forward"),
    "hfft": lambda x: torch.fft.hfft(x), "ihfft": lambda x: torch.fft.ihfft(x), "fft2": lambda x: torch.fft.fft2(x),
    "rfftn": lambda x: torch.fft.rfftn(x, norm="ortho"), "irfft2": lambda x: torch.fft.irfft2(x),
    "ihfft2": lambda x: torch.fft.ihfft2(x), "hfftn": lambda x: torch.fft.hfftn(x, dim=(0, 1)),
}


# every family at an odd and an even length; length 1 (where torch defines it: not for the c2r ones) and a prime
CASES = [(name, n) for name in sorted(FFTS) for n in (7, 12)] + [("fft", 1), ("rfft", 1), ("fft", 97), ("irfft", 97)]


@pytest.mark.parametrize("name, n", CASES)
def test_fft_families_match_torch(name, n):
    x = torch.randn(3, n)
    check(Fn(FFTS[name]), x, tol=dict(rtol=1e-4, atol=2e-5 * max(1, n)))


def test_complex_inputs_and_outputs_cross_the_compiled_boundary():
    fn = Fn(lambda z, w: (z * w + 1j, (z / w).conj(), z.abs(), torch.angle(w), torch.view_as_real(z - w)))
    z, w = torch.randn(4, 6, dtype=torch.complex64), torch.randn(4, 6, dtype=torch.complex64) + 2
    compiled = compile_torch(fn, (z, w), target="cpu")
    assert_close(*run_both(fn, compiled, (z, w)))


def test_view_as_complex_polar_and_complex_on_the_cpu():
    fn = Fn(lambda x, r: (torch.view_as_complex(x), torch.polar(r, r * 3), torch.complex(r, -r).real * 2))
    x, r = torch.randn(5, 3, 2), torch.rand(5, 3)
    compiled = compile_torch(fn, (x, r), target="cpu")
    assert_close(*run_both(fn, compiled, (x, r)))


def test_an_stft_magnitude_front_end_matches_torch():
    window = torch.hann_window(16)
    fn = Fn(lambda audio: torch.stft(audio, 16, hop_length=4, window=window, return_complex=True).abs() ** 2)
    audio = torch.randn(2, 97)
    compiled = compile_torch(fn, (audio,), target="cpu")
    assert_close(*run_both(fn, compiled, (audio,)), tol=dict(rtol=1e-4, atol=1e-4))


def test_complex_math_without_support_is_refused_by_name():
    fn = Fn(lambda z: torch.exp(z))
    with pytest.raises(UnsupportedError, match="'exp' does not accept complex operands"):
        compile_torch(fn, (torch.randn(3, dtype=torch.complex64),))


class Rotary(torch.nn.Module):
    """LLaMA's rotary embedding: pairs as complex numbers times a complex64 buffer (a module constant)."""

    def __init__(self, positions=6, dim=8):
        super().__init__()
        freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(positions).float(), freqs)
        self.register_buffer("cis", torch.polar(torch.ones_like(angles), angles))

    def forward(self, x):
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * self.cis).flatten(2)


def test_rotary_embedding_with_a_complex_buffer_matches_torch():
    x = torch.randn(2, 6, 8)
    compiled = compile_torch(Rotary(), (x,), target="cpu")
    assert_close(*run_both(Rotary(), compiled, (x,)))
