"""Building IR: the `Builder` creates ops through the registry so every op is checked as it is made.

    >>> from cuvil.ir import Builder, Module, TensorType, sym
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 4))], ["x"])
    >>> y = b.exp(b.args[0])
    >>> b.ret(y)
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ops import registry
from .core import UNKNOWN_LOC, Function, Location, Module, Op, Region, ShapeContext, Value
from .dtypes import DType
from .dynamic import fresh_size
from .types import TensorType


class Builder:
    """Appends ops to a region of a function. Shape rules run at once; errors carry the location."""

    def __init__(self, module: Module, function: Function, region: Optional[Region] = None,
                 loc: Location = UNKNOWN_LOC):
        self.module = module
        self.function = function
        self.region = region if region is not None else function.body
        self.loc = loc

    @classmethod
    def new_function(cls, module: Module, name: str, arg_types: Sequence[TensorType], arg_names=None) -> "Builder":
        return cls(module, module.add_function(Function(name, list(arg_types), arg_names)))

    @property
    def args(self) -> list[Value]:
        return self.region.args

    def nested(self, region: Region) -> "Builder":
        return Builder(self.module, self.function, region, self.loc)

    # -- ops ---------------------------------------------------------------------------------------
    def make_op(self, name: str, operands: Sequence[Value], attrs: dict, regions=(), loc=None) -> Op:
        """Create `name` with result types from its shape rule, append it and return it."""
        loc = loc or self.loc
        opdef = registry.get_op(name)
        problem = opdef.check_arity(len(operands))
        if problem:
            raise ShapeError(problem, loc)
        for v in operands:
            if not isinstance(v, Value):
                raise ShapeError(f"'{name}' operand must be an IR value, got {type(v).__name__}", loc)
        if opdef.sizes is not None and not attrs.get("size"):  # a data-dependent size gets a fresh symbol
            attrs = {**attrs, "size": fresh_size(self.function)}
        try:
            attrs = opdef.complete_attrs(attrs)
        except ValueError as e:
            raise ShapeError(str(e), loc) from None
        types = [v.type for v in operands]
        refusal = opdef.complex_refusal(types)
        if refusal:
            raise UnsupportedError(refusal, loc)
        ctx = ShapeContext(self.module, self.function, loc, regions)
        try:
            if opdef.normalize is not None:
                attrs = opdef.normalize(types, attrs)
            result_types = opdef.shape(ctx, types, attrs)
            ctx.require_sizes(name, result_types)
        except ShapeError:
            raise
        except ValueError as e:
            raise ShapeError(str(e), loc) from None
        op = Op(name, operands, attrs, result_types, regions, loc)
        self.region.append(op)
        return op

    def emit(self, op_name: str, /, *operands: Value, loc=None, **attrs):
        """Append op `op_name`; return its result, or a tuple when it has several (none for terminators)."""
        op = self.make_op(op_name, operands, attrs, loc=loc)
        return op.results[0] if len(op.results) == 1 else tuple(op.results)

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("_") or not registry.has_op(name):
            raise AttributeError(name)
        return lambda *operands, loc=None, **attrs: self.emit(name, *operands, loc=loc, **attrs)

    def constant(self, array, name_hint: str = "c", loc=None) -> Value:
        """A module constant holding `array` (not copied)."""
        arr = np.asarray(array)
        DType.from_numpy(arr.dtype)  # reject dtypes the IR lacks before storing anything
        return self.emit("constant", name=self.module.add_constant(arr, name_hint), loc=loc)

    def full(self, value, shape=(), dtype="f32", loc=None) -> Value:
        return self.emit("full", value=float(value), shape=tuple(shape), dtype=dtype, loc=loc)

    def ret(self, *values: Value, loc=None) -> None:
        self.make_op("return", values, {}, loc=loc)

    def yield_(self, *values: Value, loc=None) -> None:
        self.make_op("yield", values, {}, loc=loc)

    # -- control flow ------------------------------------------------------------------------------
    def cond(self, pred: Value, then_fn: Callable, else_fn: Callable, loc=None) -> tuple:
        """`cond`: each fn gets a Builder for its region and returns the values to yield."""
        regions = [self._region([], fn) for fn in (then_fn, else_fn)]
        return tuple(self.make_op("cond", [pred], {}, regions, loc).results)

    def while_loop(self, init: Sequence[Value], cond_fn: Callable, body_fn: Callable, loc=None) -> tuple:
        """`while`: cond_fn(builder, *carried) returns a bool scalar, body_fn(...) the next carried values."""
        types = [v.type for v in init]
        regions = [self._region(types, cond_fn), self._region(types, body_fn)]
        return tuple(self.make_op("while", list(init), {}, regions, loc).results)

    def _region(self, arg_types, fn: Callable) -> Region:
        region = Region(arg_types)
        nested = self.nested(region)
        out = fn(nested, *region.args)
        out = out if isinstance(out, (tuple, list)) else (out,)
        nested.yield_(*out)
        return region
