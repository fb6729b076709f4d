"""Compile a module or function with the PyTorch frontend and compare it with PyTorch itself.

Tolerances per dtype: the interpreter computes in float64 and rounds once, PyTorch rounds after every op,
so the gap is a few units in the last place of the result type, times the depth of the computation.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.utils._pytree as pytree

import cuvil

TOLERANCES = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-12),
              torch.float16: dict(rtol=1e-2, atol=1e-3), torch.bfloat16: dict(rtol=3e-2, atol=1e-2),
              torch.complex64: dict(rtol=1e-4, atol=1e-5), torch.complex128: dict(rtol=1e-10, atol=1e-12)}


def compile_torch(obj, example_inputs, **options):
    return cuvil.compile(obj, example_inputs, target=options.pop("target", "interpreter"), **options)


def run_both(obj, compiled, args=(), kwargs=None):
    kwargs = kwargs or {}
    with torch.no_grad():
        expected = obj(*args, **kwargs)
    return compiled(*args, **kwargs), expected


def assert_close(got, expected, tol=None):
    """Same pytree structure, dtypes and shapes, values within the dtype's tolerance (or `tol`)."""
    got_leaves, got_spec = pytree.tree_flatten(got)
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    assert type(got) is type(expected) and len(got_leaves) == len(exp_leaves), (got_spec, exp_spec)
    for g, e in zip(got_leaves, exp_leaves):
        if not isinstance(e, torch.Tensor):
            assert g == e
            continue
        assert isinstance(g, torch.Tensor), type(g)
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        if e.dtype.is_floating_point or e.dtype.is_complex:
            torch.testing.assert_close(g, e, **(tol or TOLERANCES[e.dtype]))
        else:
            np.testing.assert_array_equal(g.numpy(), e.numpy())


def check(obj, *args, kwargs=None, dynamic_shapes=None, tol=None, more=()):
    """Compile for `args`/`kwargs`, compare on them and on every extra (args, kwargs) in `more`."""
    example = kwargs if kwargs else args
    compiled = compile_torch(obj, example, dynamic_shapes=dynamic_shapes)
    for a, k in [(args, kwargs)] + list(more):
        assert_close(*run_both(obj, compiled, a, k), tol=tol)
    return compiled
