"""The @cuvil.jit hot path on the CPU target: repeated calls skip binding (defaulted parameters included), and any
argument that no longer fits the compiled signature still reaches the general path (a new compilation, a
conversion or an error), never a wrong result."""
import numpy as np
import pytest
import torch

import cuvil
from cuvil.backends.cpu import fastcall

from .helpers import f32, t32

pytestmark = pytest.mark.skipif(fastcall.extension() is None, reason="no C call path on this machine")


def gate(x, threshold: float = 0.5):
    if x.mean() > threshold:
        return torch.relu(x) if isinstance(x, torch.Tensor) else np.maximum(x, 0)
    return x * threshold


def test_a_defaulted_parameter_takes_the_hot_path():
    f = cuvil.jit(gate)
    x = t32(8, 4, low=0.6, high=1.0)
    first = f(x)
    assert list(f._hot) == [(torch.Tensor,)]
    assert isinstance(first, torch.Tensor) and torch.equal(f(x), torch.relu(x))
    assert f.compile_count == 1


def test_arguments_that_no_longer_fit_compile_or_convert():
    f = cuvil.jit(gate)
    x = f32(8, 4)
    np.testing.assert_allclose(f(x), gate(x), rtol=1e-6)
    for other in (f32(3, 4), x.astype(np.float64), x[:, ::2].copy(), np.asfortranarray(x)):
        np.testing.assert_allclose(f(other), gate(other), rtol=1e-6)
    assert f.compile_count == 4  # the new size, dtype and shape; the Fortran-ordered copy reuses the first
    np.testing.assert_allclose(f(x, 0.1), gate(x, 0.1), rtol=1e-6)  # another scalar value: another signature
    np.testing.assert_allclose(f(x, 0.5), gate(x, 0.5), rtol=1e-6)
    assert f.compile_count == 5


def test_tensors_torch_cannot_view_as_numpy_take_the_general_path():
    f = cuvil.jit(gate)
    x = t32(4, 4, low=0.6, high=1.0)
    f(x)
    y = x.clone().requires_grad_(True)
    assert torch.equal(f(y), torch.relu(x))
    assert torch.equal(f(x.conj()), torch.relu(x))


def test_a_result_held_by_the_caller_is_never_overwritten():
    f = cuvil.jit(gate)
    x = t32(16, 4, low=0.6, high=1.0)
    held = [f(x + k) for k in range(3)]
    for k, out in enumerate(held):
        assert torch.equal(out, torch.relu(x + k))
    assert len({t.data_ptr() for t in held}) == 3


def test_runtime_scalars_are_passed_each_call():
    f = cuvil.jit(gate, runtime_args=("threshold",))
    x = f32(6, low=0.0, high=1.0)
    for t in (0.1, 0.9, 0.1):
        np.testing.assert_allclose(f(x, t), gate(x, t), rtol=1e-6)
    assert f.compile_count == 1 and not f._hot


def test_a_profiler_sees_hot_calls():
    f = cuvil.jit(gate)
    x = f32(8, 4)
    f(x)
    report = cuvil.profile(f, x, repeat=3)
    assert len(report.calls) == 3
