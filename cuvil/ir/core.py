"""The IR's data structures: SSA values, ops with regions, functions and the module.

An op owns its result values and its regions; a region is a single block with arguments whose last op is a
terminator (`yield` in regions, `return` in a function body). Values from enclosing regions may be used
inside a region (regions are not isolated), which keeps `cond`/`while` bodies free of explicit captures.
Tensor semantics are immutable: no op writes into an operand.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ..errors import ShapeError
from .symbolic import Dim, SymExpr, at_least
from .types import TensorType


@dataclass(frozen=True)
class Location:
    """Where an op came from: a Python `file:line[:col]`, or a model node (`onnx:Conv_3`, `fx:linear_1`)."""

    file: Optional[str] = None
    line: Optional[int] = None
    col: Optional[int] = None
    node: Optional[str] = None

    def __str__(self) -> str:
        if self.file is not None:
            return f"{self.file}:{self.line}" + (f":{self.col}" if self.col is not None else "")
        return self.node or ""


UNKNOWN_LOC = Location()


class Value:
    """An SSA value: the result of an op or the argument of a region."""

    __slots__ = ("type", "owner", "index", "name")

    def __init__(self, type: TensorType, owner, index: int, name: Optional[str] = None):
        self.type = type
        self.owner = owner  # the Op that defines it, or the Region whose argument it is
        self.index = index
        self.name = name  # a hint for printing only

    def __repr__(self) -> str:
        return f"Value({self.name or '?'}: {self.type})"


class Op:
    """An operation: a registered name, operands, attributes, results and regions."""

    __slots__ = ("name", "operands", "attrs", "results", "regions", "loc", "parent")

    def __init__(self, name: str, operands, attrs: dict, result_types, regions=(), loc: Location = UNKNOWN_LOC):
        self.name = name
        self.operands = list(operands)
        self.attrs = dict(attrs)
        self.results = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.regions = list(regions)
        for r in self.regions:
            r.parent = self
        self.loc = loc
        self.parent: Optional[Region] = None

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"op '{self.name}' has {len(self.results)} results, not one")
        return self.results[0]

    def walk(self) -> Iterator["Op"]:
        """This op and every op nested in its regions, in program order."""
        yield self
        for r in self.regions:
            yield from r.walk()

    def __repr__(self) -> str:
        return f"Op({self.name}, {len(self.operands)} operands, {len(self.results)} results)"


class Region:
    """A single-block region: arguments and a list of ops ending in a terminator."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types=(), arg_names=None):
        names = arg_names or [None] * len(arg_types)
        self.args = [Value(t, self, i, n) for i, (t, n) in enumerate(zip(arg_types, names))]
        self.ops: list[Op] = []
        self.parent: Optional[Op] = None

    def append(self, op: Op) -> Op:
        op.parent = self
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> Optional[Op]:
        return self.ops[-1] if self.ops else None

    def walk(self) -> Iterator[Op]:
        for op in self.ops:
            yield from op.walk()


class Function:
    """A named function: a body region whose arguments are the inputs and whose `return` gives the outputs.

    `constraints` are equalities between dimensions that shape rules needed (for example that two
    symbolic sizes added elementwise are the same); a call checks them once sizes are bound.
    """

    def __init__(self, name: str, arg_types, arg_names=None):
        self.name = name
        self.body = Region(arg_types, arg_names)
        self.body.parent = None
        self.constraints: list[tuple[Dim, Dim]] = []
        self.module: Optional[Module] = None  # set when added to a module

    @property
    def args(self) -> list[Value]:
        return self.body.args

    @property
    def result_types(self) -> list[TensorType]:
        ret = self.body.terminator
        return [v.type for v in ret.operands] if ret is not None and ret.name == "return" else []

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def replace_uses(self, mapping: dict) -> None:
        """Make every operand that is a key of `mapping` (by `id` of the old value) use the new value."""
        for op in self.walk():
            op.operands = [mapping.get(id(v), v) for v in op.operands]

    def add_constraint(self, a: Dim, b: Dim) -> None:
        pair = tuple(sorted((a, b), key=str))
        if pair not in self.constraints:
            self.constraints.append(pair)


class Module:
    """Functions and the constants (weights) they read. Constants are NumPy arrays, never copied."""

    def __init__(self):
        self.functions: dict[str, Function] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.metadata: dict[str, str] = {}

    def add_function(self, fn: Function) -> Function:
        if fn.name in self.functions:
            raise ValueError(f"module already has a function named @{fn.name}")
        self.functions[fn.name] = fn
        fn.module = self
        return fn

    def add_constant(self, array, name_hint: str = "c") -> str:
        """Store `array` (without copying when it is already a NumPy array) and return its unique name."""
        arr = np.asarray(array)
        name, i = name_hint, 0
        while name in self.constants:
            i += 1
            name = f"{name_hint}_{i}"
        self.constants[name] = arr
        return name

    @property
    def main(self) -> Function:
        if "main" in self.functions:
            return self.functions["main"]
        if len(self.functions) == 1:
            return next(iter(self.functions.values()))
        raise KeyError("module has no function @main")

    def __str__(self) -> str:
        from .printer import print_module

        return print_module(self)


class ShapeContext:
    """What a shape rule may consult and record: the module's constants and the function's constraints."""

    def __init__(self, module: Optional[Module] = None, function: Optional[Function] = None, loc=None,
                 regions=()):
        self.module = module
        self.function = function
        self.loc = loc
        self.regions = regions

    def error(self, message: str) -> ShapeError:
        return ShapeError(message, self.loc)

    def require_equal(self, a: Dim, b: Dim, what: str) -> Dim:
        """Demand a == b: raise if both are known and differ, record the relation if symbolic."""
        if a == b:
            return a
        if isinstance(a, int) and isinstance(b, int):
            raise self.error(f"{what}: {a} != {b}")
        if self.function is not None:
            self.function.add_constraint(a, b)
        return a if isinstance(a, int) or not isinstance(b, int) else b

    def require_at_least(self, d: Dim, k: Dim, what: str) -> None:
        """Demand d >= k: raise if both are known and it fails, record the relation if symbolic."""
        gap = d - k
        if isinstance(gap, int):
            if gap < 0:
                raise self.error(f"{what}: {d} < {k}")
        elif self.function is not None:
            self.function.add_constraint(*at_least(d, k))

    def constant(self, name: str) -> np.ndarray:
        if self.module is None or name not in self.module.constants:
            raise self.error(f"unknown constant @{name}")
        return self.module.constants[name]


def is_symbolic(d: Dim) -> bool:
    return isinstance(d, SymExpr)
