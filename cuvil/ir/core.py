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
from .symbolic import Dim, SymExpr, evaluate, free_symbols, is_nonnegative, split_constant
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


@dataclass(frozen=True, eq=False)
class Relation:
    """A relation between sizes that an op relies on (`lhs == rhs`, or `lhs >= rhs`: a window fits, an output
    size is at least 1), checked on every call once the sizes are bound. `what` says what it means in the op's
    words, with `{lhs}` and `{rhs}` standing for the two sides' values; `loc` is the op's node or line. Two
    relations are equal when their sizes say the same, whatever their words.

        >>> from cuvil.ir import sym
        >>> r = Relation(sym("n") + 2, ">=", 5, "'conv': the 5-wide window spans {rhs} but the input has {lhs}")
        >>> r.failure({"n": 1}).message
        "'conv': the 5-wide window spans 5 but the input has 3 (n=1)"
    """

    lhs: Dim
    kind: str  # "==" or ">="
    rhs: Dim
    what: str = ""
    loc: Location = UNKNOWN_LOC

    def __post_init__(self):
        if self.kind not in ("==", ">="):
            raise ValueError(f"a relation is '==' or '>=', not {self.kind!r}")
        # what it says: equal pairs in either order, and d >= k as d - k >= 0, are the same
        key = ("==", *sorted((str(self.lhs), str(self.rhs)))) if self.kind == "==" else (">=", str(self.lhs - self.rhs))
        object.__setattr__(self, "key", key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Relation) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return f"{self.lhs} {self.kind} {self.rhs}"

    def holds(self, env: dict) -> bool:
        """Whether the sizes in `env` keep it (KeyError names a symbol `env` does not bind)."""
        lhs, rhs = evaluate(self.lhs, env), evaluate(self.rhs, env)
        return lhs == rhs if self.kind == "==" else lhs >= rhs

    def describe(self, lhs: Dim, rhs: Dim) -> str:
        """`what` with these values of the sides in it, or `what: lhs < rhs` where it names no side."""
        if self._names_sides():
            return self.what.replace("{lhs}", str(lhs)).replace("{rhs}", str(rhs))
        return self._after_what(self._broken(lhs, rhs))

    def failure(self, env: dict) -> ShapeError:
        """The error for a call whose sizes (`env`) break it: its words, the sizes it reads and the op's place."""
        lhs, rhs = evaluate(self.lhs, env), evaluate(self.rhs, env)
        text = self.describe(lhs, rhs) if self._names_sides() else \
            self._after_what(f"needs {self}, but the inputs give {self._broken(lhs, rhs)}")
        sizes = ", ".join(f"{s}={env[s]}" for s in sorted(free_symbols(self.lhs) | free_symbols(self.rhs)))
        return ShapeError(f"{text} ({sizes})" if sizes else text, self.loc)

    def _names_sides(self) -> bool:
        return "{lhs}" in self.what or "{rhs}" in self.what

    def _broken(self, lhs: Dim, rhs: Dim) -> str:
        return f"{lhs} {'!=' if self.kind == '==' else '<'} {rhs}"

    def _after_what(self, text: str) -> str:
        return f"{self.what}: {text}" if self.what else text


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

    `constraints` are the `Relation`s between sizes that shape rules needed (two symbolic sizes added
    elementwise are the same, a window fits its input); a call checks them once sizes are bound.
    """

    def __init__(self, name: str, arg_types, arg_names=None):
        self.name = name
        self.body = Region(arg_types, arg_names)
        self.body.parent = None
        self.constraints: list[Relation] = []
        self._known = None  # what `implies` derived from `constraints`, and the state of the list it read
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

    def add_constraint(self, a: Dim, b: Dim, what: str = "", loc: Location = UNKNOWN_LOC) -> None:
        """Record a == b."""
        lhs, rhs = sorted((a, b), key=str)
        self.add_relation(Relation(lhs, "==", rhs, what, loc))

    def add_relation(self, relation: Relation) -> None:
        """Record `relation` unless the recorded ones imply it (the first one's words are kept)."""
        if not self.implies(relation):
            self.constraints.append(relation)

    def implies(self, relation: Relation) -> bool:
        """Whether the recorded relations say as much: the same one, or X + c >= 0 where X + b >= 0 with b <= c is
        recorded (also inside floor divisions: X // 2 + 1 >= 0 where X >= 0)."""
        keys, floors, implied = self._knowledge()
        if relation.key in keys or relation.key in implied:
            return True
        if relation.kind == ">=" and is_nonnegative(relation.lhs - relation.rhs, floors):
            implied.add(relation.key)
            return True
        return False

    def _knowledge(self) -> tuple:
        """(keys of the recorded relations, the floors they set, keys found implied), rebuilt when the list
        changed (it grows by appends; a frontend may cut it back to a saved prefix)."""
        c = self.constraints
        state = (len(c), c[-1] if c else None)
        if self._known is None or self._known[0][0] != state[0] or self._known[0][1] is not state[1]:
            floors: dict = {}
            for r in c:
                if r.kind == ">=":
                    rest, low = split_constant(r.lhs - r.rhs)
                    floors[rest] = min(low, floors.get(rest, low))
            self._known = (state, {r.key for r in c}, floors, set())
        return self._known[1:]


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

    # The text form lives in printer.py, which registers it here (the core does not import the printer, which
    # imports the core); importing cuvil.ir loads it.
    printer = None

    def __str__(self) -> str:
        return Module.printer(self)


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
            self.function.add_constraint(a, b, what, self.loc or UNKNOWN_LOC)
        return a if isinstance(a, int) or not isinstance(b, int) else b

    def require_sizes(self, name: str, types) -> None:
        """Demand that every dim of these result types is >= 0 at every call: the backstop under the shape rules'
        own relations, so that no kernel sees a negative size."""
        for i, t in enumerate(types):
            for axis, d in enumerate(t.shape):
                self.require_at_least(d, 0, f"'{name}' would give result {i} ({t}) the size {{lhs}} in dim {axis}")

    def require_at_least(self, d: Dim, k: Dim, what: str) -> None:
        """Demand d >= k: raise if both are known and it fails, record the relation if symbolic (unless no sizes
        could break it). `what` may say `{lhs}` and `{rhs}` for the values of d and k (see `Relation`)."""
        relation = Relation(d, ">=", k, what, self.loc or UNKNOWN_LOC)
        gap = d - k
        if isinstance(gap, int):
            if gap < 0:
                raise self.error(relation.describe(d, k))
        elif self.function is not None and not is_nonnegative(gap):
            self.function.add_relation(relation)

    def constant(self, name: str) -> np.ndarray:
        if self.module is None or name not in self.module.constants:
            raise self.error(f"unknown constant @{name}")
        return self.module.constants[name]


def is_symbolic(d: Dim) -> bool:
    return isinstance(d, SymExpr)
