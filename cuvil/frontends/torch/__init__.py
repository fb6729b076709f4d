"""The PyTorch frontend: `torch.export` -> core ATen IR -> Cuvil IR.

`compile_module` (behind `cuvil.compile`) returns a callable that takes and returns tensors; `build_ir`
(behind `cuvil.frontend.build_ir`) returns the IR module. Converters live in tables keyed by ATen op
(`convert_*.py`); `program.py` walks the exported graph. The converters load on first use: they import
sympy (through torch.export), which a compile served by the artifact cache never needs.
"""
import importlib

_EXPORTS = {"CompiledModule": "compile", "build_ir": "compile", "compile_module": "compile", "convert": "compile",
            "CONVERTERS": "context", "aten": "context"}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)


__all__ = ["CONVERTERS", "CompiledModule", "aten", "build_ir", "compile_module", "convert"]
