"""The user-facing entry points. Each picks a frontend (imported lazily) and hands over.

    @cuvil.jit                                   # a Python function: read from its source
    def f(x): ...

    cuvil.compile(torch_module, example_inputs)  # a torch.nn.Module: through torch.export
    cuvil.load_onnx("model.onnx")                # an ONNX model
    cuvil.compile(jax_fn, example_inputs)        # a JAX function (JAX arrays): through its jaxpr
    cuvil.compile_to_ir(jax_fn, *specs)          # its IR only, for symbolic specs
"""
from __future__ import annotations

from typing import Any, Callable, Optional


def jit(fn: Optional[Callable] = None, **options) -> Any:
    """Compile a Python function from its source on first call (types from the arguments).

    Usable bare (`@cuvil.jit`) or with options (`@cuvil.jit(target="cpu", dynamic=True)`); see
    `cuvil.frontends.python.jit` for the options. JAX functions called with JAX arrays go through their jaxpr.

    >>> import numpy as np, cuvil
    >>> @cuvil.jit
    ... def scale(x, k=2.0):
    ...     return x * k
    >>> scale(np.ones(3, np.float32)).tolist()
    [2.0, 2.0, 2.0]
    """
    from .frontends.python import jit as python_jit

    return python_jit(fn, **options)


def compile(obj: Any = None, example_inputs=None, **options) -> Any:  # noqa: A001 (the seed's public name)
    """`cuvil.compile(module, example_inputs)` for PyTorch modules and functions, and for JAX functions when the
    example inputs are JAX arrays (compiled through the jaxpr at once); `@cuvil.compile` on a plain Python
    function is `@cuvil.jit`."""
    if obj is None:
        return lambda f: compile(f, example_inputs, **options)
    if example_inputs is not None and _has_jax_arrays(example_inputs):
        from .frontends.jax import jit as jax_jit

        inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        return jax_jit(obj, **options).compile_for(*inputs)
    if _is_torch_module(obj) or example_inputs is not None:
        from .frontends.torch import compile_module

        return compile_module(obj, example_inputs, **options)
    return jit(obj, **options)


def load_onnx(model, **options) -> Any:
    """Read an ONNX model (a path, bytes or a ModelProto); see `cuvil.frontends.onnx.load_onnx`. Paths and bytes
    go through the artifact cache (`cuvil.cache`): `.optimize()` of a model compiled before loads its code.
    `mmap=True` maps a model file's weights instead of reading them (about half the compile's peak memory; the file
    must not be rewritten in place while the model lives)."""
    from .frontends.onnx_cache import load_onnx as _load

    return _load(model, **options)


def compile_to_ir(fn: Callable, *specs, **options) -> Any:
    """The IR module of a JAX function for the given `jax.ShapeDtypeStruct`s."""
    from .frontends.jax import compile_to_ir as _to_ir

    return _to_ir(fn, *specs, **options)


def _has_jax_arrays(example_inputs) -> bool:
    leaves = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    return any(type(x).__module__.startswith("jax") and hasattr(x, "shape") for x in leaves)  # jax not imported


def _is_torch_module(obj) -> bool:
    import sys

    torch = sys.modules.get("torch")  # if torch was never imported, obj cannot be a torch module
    return torch is not None and isinstance(obj, torch.nn.Module)
