"""Cuvil: a lightweight compiler for AI inference.

    >>> import numpy as np, cuvil
    >>> from cuvil.ir import Builder, Module, TensorType, sym
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 4))], ["x"])
    >>> b.ret(b.relu(b.args[0]))
    >>> cuvil.interpret(m, [np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)])[0].tolist()
    [[0.0, 2.0, 0.0, 4.0]]

Frontends (PyTorch, ONNX, JAX) are imported lazily, so `import cuvil` loads only NumPy and the core.
"""
from __future__ import annotations

from . import errors, ir, ops
from .api import compile, compile_to_ir, jit, load_onnx
from .compiler import Executable, compile_module
from .deploy import export
from .errors import (ArtifactError, CuvilError, IndexRangeError, ParseError, SerializationError, ShapeError,
                     UnsupportedError, VerificationError)
from .interpreter import interpret
from .ir import DType, Module, TensorType, sym
from .log import LogLevel, set_log_level
from .profiler import profile as profile  # noqa: F401 (public: cuvil.profile)
from .ops import register_op

from .version import __version__  # noqa: F401 (public: cuvil.__version__)


def load(path):
    """A `.cuv` file (or its bytes) as a `cuvil.runtime.Artifact`: see docs/artifact.md. The runtime is imported
    here, not with `cuvil`, so that `import cuvil` stays as light as it was."""
    from .runtime import load as load_artifact

    return load_artifact(path)


_LAZY_MODULES = {"cache": ".cache", "nd": ".runtime.nd", "quantize": ".quantize", "runtime": ".runtime"}


def __getattr__(name: str):
    """`cuvil.cache`, `cuvil.nd`, `cuvil.quantize` and `cuvil.runtime`, imported on first use (`import cuvil` stays
    light)."""
    if name in _LAZY_MODULES:
        import importlib

        return importlib.import_module(_LAZY_MODULES[name], __name__)
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
           "load_onnx", "ops", "register_op", "set_log_level", "sym"]
