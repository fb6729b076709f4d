"""The tensor IR: types, SSA values, ops with regions, functions, modules and their text and binary forms.

`Builder` (which imports every op declaration) is imported on first use: running a `.cuv` needs the types and
the core, not the ops."""
from .core import UNKNOWN_LOC, Function, Location, Module, Op, Region, Relation, ShapeContext, Value
from .dtypes import DType
from . import printer  # noqa: F401, E402 (registers str(Module): the text form)
from .symbolic import Dim, SymExpr, parse_dim, sym
from .types import TensorType, parse_type


def __getattr__(name: str):
    """`cuvil.ir.Builder`, imported on first use."""
    if name == "Builder":
        from .builder import Builder

        return Builder
    raise AttributeError(f"module 'cuvil.ir' has no attribute {name!r}")


__all__ = ["Builder", "DType", "Dim", "Function", "Location", "Module", "Op", "Region", "Relation", "ShapeContext",
           "SymExpr", "TensorType", "UNKNOWN_LOC", "Value", "parse_dim", "parse_type", "sym"]
