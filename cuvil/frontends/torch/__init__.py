"""The PyTorch frontend: `torch.export` -> core ATen IR -> Cuvil IR.

`compile_module` (behind `cuvil.compile`) returns a callable that takes and returns tensors; `build_ir`
(behind `cuvil.frontend.build_ir`) returns the IR module. Converters live in tables keyed by ATen op
(`convert_*.py`); `program.py` walks the exported graph.
"""
from .compile import CompiledModule, build_ir, compile_module, convert
from .context import CONVERTERS, aten

__all__ = ["CONVERTERS", "CompiledModule", "aten", "build_ir", "compile_module", "convert"]
