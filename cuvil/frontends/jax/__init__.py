"""The JAX frontend: `jax.make_jaxpr` -> Cuvil IR, through a table of primitive converters.

    >>> import jax, jax.numpy as jnp, cuvil
    >>> spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("n, 4"), jnp.float32)
    >>> module = cuvil.compile_to_ir(lambda x: jnp.tanh(x) * 2, spec)
    >>> str(module.main.args[0].type)
    'f32[n,4]'

`jit(fn)` compiles on the first call (per input signature) and runs with JAX or NumPy arrays.
"""
from __future__ import annotations

import inspect
import re

import jax
import numpy as np

from ... import compiler, quantize
from ...errors import UnsupportedError
from ...ir.core import Module
from .context import PRIMITIVES, primitive
from .walker import JaxprWalker

__all__ = ["PRIMITIVES", "JaxFunction", "build_ir", "compile_to_ir", "jit", "primitive"]


def compile_to_ir(fn, *specs, name: str = "main") -> Module:
    """The IR module of `fn` for inputs described by `specs` (`jax.ShapeDtypeStruct`s, possibly with symbolic
    shapes from `jax.export.symbolic_shape`, or example arrays; pytrees of them are flattened)."""
    closed = jax.make_jaxpr(fn)(*specs)
    return JaxprWalker().build(closed, _arg_names(fn, specs), name)


def _params(fn) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _arg_names(fn, specs) -> list[str]:
    params = _params(fn)
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path(specs)[0]:
        head = params[path[0].idx] if params and path[0].idx < len(params) else f"arg{path[0].idx}"
        tail = re.sub(r"\W+", "_", jax.tree_util.keystr(path[1:])).strip("_")
        names.append(f"{head}_{tail}" if tail else head)
    return names


def build_ir(fn, input_spec: dict, target: str = "cpu", mode: str = "inference") -> Module:
    """`cuvil.frontend.build_ir` for JAX: `input_spec` maps argument names to specs, in argument order."""
    if mode != "inference":
        raise UnsupportedError(f"mode={mode!r} is not supported: Cuvil compiles inference graphs")
    if target not in compiler.TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {', '.join(compiler.TARGETS)}")
    module = compile_to_ir(fn, *input_spec.values())
    module.metadata["target"] = target
    return module


class JaxFunction:
    """A JAX function compiled by Cuvil on its first call for each input signature (shapes and dtypes).

    JAX arrays in give JAX arrays out; NumPy arrays (and Python scalars) in give NumPy arrays out.
    `dynamic_dims={"x": {0: "batch"}}` keeps those sizes symbolic, so one compilation serves them all.
    """

    def __init__(self, fn, target: str = "cpu", passes=(), level: int = 2, dynamic_dims: dict | None = None,
                 precision: str = "fp32", calibrate_dataset=None, calibration: str = "minmax"):
        self.fn, self.target, self.passes, self.level = fn, target, tuple(passes), level
        self.precision = {"precision": precision, "calibrate_dataset": calibrate_dataset, "calibration": calibration}
        self.dynamic_dims = dynamic_dims or {}
        self.cache: dict = {}
        self.__wrapped__ = fn

    def __call__(self, *args):
        leaves, arrays, (executable, out_tree) = self._compiled(args)
        outs = executable(*arrays)
        if any(isinstance(x, jax.Array) for x in leaves):
            outs = [jax.numpy.asarray(o) for o in outs]
        return jax.tree_util.tree_unflatten(out_tree, outs)

    def compile_for(self, *args) -> "JaxFunction":
        """Compile for these example inputs now (what `cuvil.compile(jax_fn, example_inputs)` does)."""
        self._compiled(args)
        return self

    def _compiled(self, args) -> tuple:
        """(input leaves, them as NumPy, (executable, output tree)) for a call with `args`, compiling once per
        signature."""
        paths, tree = jax.tree_util.tree_flatten_with_path(args)
        leaves = [leaf for _, leaf in paths]
        arrays = [_as_array(x) for x in leaves]
        symbolic = [self._symbolic_axes(path) for path, _ in paths]
        key = (tree, tuple((tuple(dims.get(i, n) for i, n in enumerate(a.shape)), a.dtype.str)
                           for a, dims in zip(arrays, symbolic)))
        if key not in self.cache:
            scope = jax.export.SymbolicScope()
            specs = [jax.ShapeDtypeStruct(_shape(a.shape, dims, scope), a.dtype) for a, dims in zip(arrays, symbolic)]
            self.cache[key] = self._compile(jax.tree_util.tree_unflatten(tree, specs))
        return leaves, arrays, self.cache[key]

    def _symbolic_axes(self, path) -> dict:
        """{axis: name} for a top-level array argument named in `dynamic_dims`."""
        if len(path) != 1 or not self.dynamic_dims:
            return {}
        params = _params(self.fn)
        return self.dynamic_dims.get(params[path[0].idx], {}) if path[0].idx < len(params) else {}

    def _compile(self, specs):
        _, out_shapes = jax.make_jaxpr(self.fn, return_shape=True)(*specs)
        module = compile_to_ir(self.fn, *specs)
        executable = quantize.compile_module(module, target=self.target, passes=self.passes, level=self.level,
                                             **self.precision)
        return executable, jax.tree_util.tree_structure(out_shapes)

    @property
    def module(self) -> Module:
        """The IR of the latest compilation (for `cuvil.inspect_ir`)."""
        if not self.cache:
            raise ValueError("the function has not been called yet, so nothing is compiled")
        return list(self.cache.values())[-1][0].module


def _shape(sizes, dims: dict, scope) -> tuple:
    if not dims:
        return tuple(sizes)
    text = ", ".join(dims.get(i, str(n)) for i, n in enumerate(sizes))
    return jax.export.symbolic_shape(text, scope=scope)


def _as_array(x) -> np.ndarray:
    """x as NumPy in the dtype JAX would give it (Python scalars and int64 become 32-bit without x64)."""
    if isinstance(x, (bool, int, float)):
        return np.asarray(jax.numpy.asarray(x))
    arr = np.asarray(x)
    dtype = jax.dtypes.canonicalize_dtype(arr.dtype)
    return arr if arr.dtype == dtype else arr.astype(dtype)


def jit(fn=None, **options):
    """Compile a JAX function with Cuvil on first call: `cuvil.frontends.jax.jit(f)(x)`.

    Options: `target` ("cpu" or "interpreter"), `passes`, `level`, `dynamic_dims` ({arg: {axis: name}}),
    `precision` (with `calibrate_dataset`, `calibration`: docs/precision.md).
    """
    if fn is None:
        return lambda f: JaxFunction(f, **options)
    return JaxFunction(fn, **options)
