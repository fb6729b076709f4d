"""Calls to plain Python: helpers, methods, callable objects and nn.Module objects are inlined from their source."""
import functools

import numpy as np
import pytest
import torch

import cuvil

from .helpers import TARGET, check_sizes, f32, t32


def scaled_tanh(x, k=2.0):
    return np.tanh(x) * k


def two_levels(x):
    return scaled_tanh(x, 3.0) + scaled_tanh(x)


def doubled(x, times):
    if times == 0:
        return x
    return doubled(x * 2, times - 1)


def uses_helpers(x):
    return two_levels(x) - doubled(x, 3) + HALF(x)


HALF = functools.partial(scaled_tanh, k=0.5)


def test_plain_helpers_inline_recursively():
    check_sizes(uses_helpers, lambda n: (f32(n, 3),), (2, 5, 9))


def endless(x):
    if x.sum() > 0:
        return endless(x - 1)
    return x


def test_recursion_on_tensor_values_names_the_call():
    with pytest.raises(cuvil.UnsupportedError, match="recursion that does not end at compile time") as info:
        cuvil.jit(endless, target=TARGET)(f32(3))
    assert info.value.loc.line == endless.__code__.co_firstlineno + 2


def test_unreadable_source_says_so():
    namespace = {}
    exec("def made(x):\n    return x + 1\n", namespace)  # noqa: S102 (a function without a source file)
    made = namespace["made"]

    def calls_made(x):
        return made(x)
    with pytest.raises(cuvil.UnsupportedError, match="cannot read the source of made"):
        cuvil.jit(calls_made, target=TARGET)(f32(3))


class Scaler:
    def __init__(self, scale):
        self.scale = scale

    @cuvil.jit(target=TARGET)
    def apply(self, x):
        return self.shift(x) * self.scale

    def shift(self, x):
        return x - x.mean()

    def __call__(self, x):
        return self.apply(x) + 1


def test_methods_bind_self():
    a, b = Scaler(2.0), Scaler(-1.0)
    for n in (2, 6):
        x = f32(n, 4)
        np.testing.assert_allclose(a.apply(x), (x - x.mean()) * 2.0, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.apply(x), (x - x.mean()) * -1.0, rtol=1e-5, atol=1e-6)
    assert a.apply is a.apply and a.apply.compile_count == 2


def calls_object(x):
    return SCALER(x) * 2


SCALER = Scaler(3.0)


def test_callable_objects_and_their_methods_inline():
    check_sizes(calls_object, lambda n: (f32(n, 2),), (2, 7))


LINEAR = torch.nn.Linear(4, 3)
MLP = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)).eval()
CONV = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                           torch.nn.Flatten()).eval()


def uses_modules(x):
    return MLP(x) + LINEAR(x).sum(dim=1, keepdim=True)


def uses_conv(x):
    return CONV(x)


@torch.no_grad()
def test_nn_module_objects_trace_through_forward():
    check_sizes(uses_modules, lambda n: (t32(n, 4),), (2, 5), atol=1e-5)
    check_sizes(uses_conv, lambda n: (t32(n, 3, 6, 6),), (2, 3), atol=1e-4)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    @cuvil.jit(target=TARGET)
    def forward(self, x):
        return torch.relu(self.fc(x)) + x


@torch.no_grad()
def test_jit_on_a_module_forward():
    block = Block()
    for n in (2, 5):
        x = t32(n, 4)
        torch.testing.assert_close(block(x), torch.relu(block.fc(x)) + x)


def test_modules_in_training_mode_or_with_hooks_are_refused():
    train = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))

    def run(x):
        return train(x)
    with pytest.raises(cuvil.UnsupportedError, match=r"training mode.*\.eval\(\)"):
        cuvil.jit(run, target=TARGET)(t32(2, 4))
    hooked = torch.nn.Linear(4, 4)
    hooked.register_forward_hook(lambda m, i, o: o * 2)

    def run_hooked(x):
        return hooked(x)
    with pytest.raises(cuvil.UnsupportedError, match="has hooks"):
        cuvil.jit(run_hooked, target=TARGET)(t32(2, 4))
