"""The seed's facade: `build_ir` turns a model into a Cuvil IR module without compiling it.

    >>> import torch
    >>> from cuvil.frontend import build_ir
    >>> module = build_ir(torch.nn.Conv2d(3, 8, 3), input_spec={"x": ("batch", 3, 32, 32)})
    >>> str(module.main.result_types[0])
    'f32[batch,8,30,30]'
"""
from __future__ import annotations

import sys

from .ir.core import Module


def build_ir(model, input_spec: dict, target: str = "cpu", mode: str = "inference", **options) -> Module:
    """The IR module of `model` (a `torch.nn.Module` or function of tensors, or a JAX function).

    `input_spec` maps argument names to shapes (float32), `(shape, dtype)` pairs or example tensors; strings
    in a shape are symbolic sizes. For a JAX function, give `jax.ShapeDtypeStruct`s (in argument order).
    `mode="train"` is not supported: Cuvil compiles inference graphs.
    """
    if _is_jax_spec(input_spec):
        from .frontends.jax import build_ir as jax_build_ir

        return jax_build_ir(model, input_spec, target=target, mode=mode, **options)
    from .frontends.torch import build_ir as torch_build_ir

    return torch_build_ir(model, input_spec, target=target, mode=mode, **options)


def _is_jax_spec(input_spec: dict) -> bool:
    jax = sys.modules.get("jax")  # a JAX spec needs JAX imported already
    return jax is not None and any(isinstance(v, (jax.ShapeDtypeStruct, jax.Array)) for v in input_spec.values())
