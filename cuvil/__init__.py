"""Cuvil: a lightweight compiler for AI inference.

    >>> import numpy as np, cuvil
    >>> from cuvil.ir import Builder, Module, TensorType, sym
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 4))], ["x"])
    >>> b.ret(b.relu(b.args[0]))
    >>> cuvil.interpret(m, [np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)])[0].tolist()
    [[0.0, 2.0, 0.0, 4.0]]

Frontends (PyTorch, ONNX, JAX), the ops, the passes and the compiler are imported on first use, so `import cuvil`
loads only NumPy, the errors and the IR's core (what running a `.cuv` needs).
"""
from __future__ import annotations

from . import errors, ir
from .errors import (ArtifactError, CuvilError, IndexRangeError, ParseError, SerializationError, ShapeError,
                     UnsupportedError, VerificationError)
from .ir import DType, Module, TensorType, sym
from .log import LogLevel, set_log_level

from .version import __version__  # noqa: F401 (public: cuvil.__version__)


def load(path):
    """A `.cuv` file (or its bytes) as a `cuvil.runtime.Artifact`: see docs/artifact.md. The runtime is imported
    here, not with `cuvil`, so that `import cuvil` stays as light as it was."""
    from .runtime import load as load_artifact

    return load_artifact(path)


_LAZY_MODULES = {"cache": ".cache", "nd": ".runtime.nd", "ops": ".ops", "quantize": ".quantize",
                 "runtime": ".runtime"}
# The compiler's entry points, imported on first use: a process that only runs `.cuv` files (a Ray worker,
# `cuvil.load`) never imports the ops, the passes or the code generator (tests/runtime/test_imports.py).
_LAZY_NAMES = {"compile": ".api", "compile_to_ir": ".api", "jit": ".api", "load_onnx": ".api",
               "Executable": ".compiler", "compile_module": ".compiler", "export": ".deploy",
               "interpret": ".interpreter", "profile": ".profiler", "register_op": ".ops"}


def __getattr__(name: str):
    """`cuvil.cache`, `cuvil.nd`, `cuvil.ops`, `cuvil.quantize`, `cuvil.runtime` and the compiler's entry points
    (`cuvil.compile`, `cuvil.export`, ...), imported on first use (`import cuvil` stays light)."""
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(_LAZY_MODULES[name], __name__)
    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(_LAZY_NAMES[name], __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'cuvil' has no attribute {name!r}")


def inspect_ir(obj, elide_constants: bool = True) -> str:
    """The IR text of a module or of anything Cuvil compiled (it carries `.module`).

    Constants of more than 16 elements print as `elided` unless `elide_constants=False`; the full text
    parses back with `cuvil.ir.parse_module`.
    """
    from .ir.printer import print_module

    module = obj if isinstance(obj, Module) else getattr(obj, "module", None)
    if not isinstance(module, Module):
        raise TypeError(f"inspect_ir needs a cuvil Module or a compiled cuvil object, got {type(obj).__name__}")
    return print_module(module, 16 if elide_constants else None)


__all__ = ["ArtifactError", "CuvilError", "DType", "Executable", "IndexRangeError", "LogLevel", "Module", "ParseError",
           "SerializationError", "ShapeError", "TensorType", "UnsupportedError", "VerificationError", "compile",
           "compile_module", "compile_to_ir", "errors", "export", "inspect_ir", "interpret", "ir", "jit", "load",
           "load_onnx", "ops", "profile", "register_op", "set_log_level", "sym"]
