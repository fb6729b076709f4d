"""The tensor IR: types, SSA values, ops with regions, functions, modules and their text and binary forms."""
from .builder import Builder
from .core import UNKNOWN_LOC, Function, Location, Module, Op, Region, Relation, ShapeContext, Value
from .dtypes import DType
from . import printer  # noqa: F401, E402 (registers str(Module): the text form)
from .symbolic import Dim, SymExpr, parse_dim, sym
from .types import TensorType, parse_type

__all__ = ["Builder", "DType", "Dim", "Function", "Location", "Module", "Op", "Region", "Relation", "ShapeContext",
           "SymExpr", "TensorType", "UNKNOWN_LOC", "Value", "parse_dim", "parse_type", "sym"]
