"""Compare a compiled function with the original Python on the same arguments."""
from __future__ import annotations

import numpy as np
import torch

import cuvil

RNG = np.random.default_rng(0)
# The translation is what these tests check; the interpreter runs it without a C compiler per signature.
# test_signatures.py runs the seeds and a few programs on the CPU backend too.
TARGET = "interpreter"


def f32(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def i64(*shape, high=5):
    return RNG.integers(0, high, shape).astype(np.int64)


def t32(*shape, low=-2.0, high=2.0):
    return torch.from_numpy(f32(*shape, low=low, high=high))


def check(fn, *args, rtol=1e-5, atol=1e-6, target=TARGET, **kwargs):
    """cuvil.jit(fn) returns what fn returns: the same kind of container, dtype, shape and values."""
    want = fn(*args, **kwargs)
    got = cuvil.jit(fn, target=target)(*args, **kwargs)
    assert_same(got, want, rtol, atol)
    return got


def assert_same(got, want, rtol=1e-5, atol=1e-6):
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (got, want)
        for k in want:
            assert_same(got[k], want[k], rtol, atol)
    elif isinstance(want, (tuple, list)):  # torch.Size comes back as a plain tuple
        assert isinstance(got, tuple if isinstance(want, tuple) else list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol, atol)
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=rtol, atol=atol)
    elif isinstance(want, (np.ndarray, np.generic)):
        assert isinstance(got, np.ndarray), type(got)
        assert got.dtype == want.dtype and got.shape == np.shape(want), (got.dtype, got.shape, want.dtype)
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol)
    else:
        assert got == want, (got, want)


def check_sizes(fn, make_args, sizes, target=TARGET, rtol=1e-5, atol=1e-6):
    """fn compiled statically and with dynamic=True returns what fn returns, for the arguments of every size."""
    for options in ({}, {"dynamic": True}):
        jitted = cuvil.jit(fn, target=target, **options)
        for n in sizes:
            args = make_args(n)
            assert_same(jitted(*args), fn(*args), rtol, atol)
    return jitted
