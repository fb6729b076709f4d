"""The reference interpreter: runs any module with NumPy. It is the oracle every backend is tested against.

Each op runs its registry reference; `constant`, `cond` and `while` have rules here because they need
the module or regions. Symbolic sizes are bound from the inputs, the function's relations are checked,
and every result is checked against its type, so a wrong shape rule or reference shows up at once.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .errors import IndexRangeError, ShapeError
from .ir.core import Function, Module, Op, Region
from .ir.dynamic import data_sizes, defined_sizes
from .ir.symbolic import evaluate, free_symbols, plain_symbol
from .ir.types import TensorType
from .ops import registry


def bind_symbols(fn: Function, inputs: Sequence[np.ndarray]) -> dict:
    """Bind `fn`'s symbolic sizes from `inputs`, check dtypes, static sizes and recorded relations."""
    if len(inputs) != len(fn.args):
        raise ShapeError(f"@{fn.name} takes {len(fn.args)} inputs, got {len(inputs)}")
    env: dict = {}
    for i, (arg, x) in enumerate(zip(fn.args, inputs)):
        t = arg.type
        if x.dtype != t.dtype.numpy:
            raise ShapeError(f"input {i} of @{fn.name} must have element type {t.dtype}, got {x.dtype}")
        if x.ndim != t.rank:
            raise ShapeError(f"input {i} of @{fn.name} must have rank {t.rank} ({t}), got shape {x.shape}")
        for d, n in zip(t.shape, x.shape):
            if plain_symbol(d) is not None:
                env.setdefault(plain_symbol(d), n)
    for i, (arg, x) in enumerate(zip(fn.args, inputs)):
        _check_shape(arg.type, x.shape, env, f"input {i} of @{fn.name}")
    data = data_sizes(fn)
    for relation in fn.constraints:
        if reads_sizes(relation, data):
            continue  # checked once the op that computes the size has run
        try:
            holds = relation.holds(env)
        except KeyError as e:
            raise ShapeError(f"@{fn.name}: symbolic size {e.args[0]} is not bound by any input dimension") from None
        if not holds:
            raise relation.failure(env)
    return env


def _check_shape(t: TensorType, shape: tuple, env: dict, what: str) -> None:
    want = tuple(evaluate(d, env) for d in t.shape)
    if want != tuple(shape):
        raise ShapeError(f"{what} must have shape {t} = {want}, got {tuple(shape)}")


def interpret(module: Module, inputs: Sequence, function: str | None = None) -> list[np.ndarray]:
    """Run `function` (default: main) on NumPy `inputs`; returns the list of outputs."""
    fn = module.functions[function] if function else module.main
    arrays = [np.asarray(x) for x in inputs]
    env = bind_symbols(fn, arrays)
    data = data_sizes(fn)
    return _Interpreter(module, env, [r for r in fn.constraints if reads_sizes(r, data)]).region(fn.body, arrays)


def reads_sizes(relation, names) -> bool:
    """Whether `relation` reads one of the sizes `names`."""
    return bool((free_symbols(relation.lhs) | free_symbols(relation.rhs)) & set(names))


class _Interpreter:
    def __init__(self, module: Module, env: dict, deferred: list = ()):
        self.module, self.env = module, env
        self.deferred = list(deferred)  # relations that read data-dependent sizes
        self.values: dict[int, np.ndarray] = {}

    def region(self, region: Region, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        for a, x in zip(region.args, args):
            self.values[id(a)] = x
        for op in region.ops:
            if op.name in ("yield", "return"):
                return [self.values[id(v)] for v in op.operands]
            rule = _RULES.get(op.name, _Interpreter.reference)
            defined = defined_sizes(op)
            shapes = [] if defined else [self.result_shape(op, r.type) for r in op.results]
            outs = rule(self, op, [self.values[id(v)] for v in op.operands])
            if defined:
                self.bind_sizes(op, outs, defined)
                shapes = [self.result_shape(op, r.type) for r in op.results]
            for r, x, want in zip(op.results, outs, shapes):
                if want != tuple(x.shape):
                    raise ShapeError(f"result of '{op.name}' ({op.loc}) must have shape {r.type} = {want}, "
                                     f"got {tuple(x.shape)}")
                if x.dtype != r.type.dtype.numpy:
                    raise ShapeError(f"'{op.name}' reference gave {x.dtype}, its type says {r.type}", op.loc)
                self.values[id(r)] = x
        raise ShapeError("region has no terminator")

    def bind_sizes(self, op: Op, outs: list, defined: dict) -> None:
        """Bind the sizes `op` computed from its results' shapes, then check the relations that read them (once all
        their sizes are bound)."""
        for r, x in zip(op.results, outs):
            for d, n in zip(r.type.shape, np.shape(x)):
                if plain_symbol(d) in defined:
                    self.env[plain_symbol(d)] = n
        for relation in self.deferred:
            names = free_symbols(relation.lhs) | free_symbols(relation.rhs)
            if names & set(defined) and names <= set(self.env) and not relation.holds(self.env):
                raise relation.failure(self.env)

    def result_shape(self, op: Op, t: TensorType) -> tuple:
        """The sizes of a result at this call; a negative one (a relation no shape rule recorded) is refused
        before the op runs."""
        shape = tuple(evaluate(d, self.env) for d in t.shape)
        if min(shape, default=0) < 0:
            raise ShapeError(f"'{op.name}' would give a result of shape {t} = {shape}", op.loc)
        return shape

    def reference(self, op: Op, inputs: list) -> list:
        opdef = registry.get_op(op.name)
        if opdef.reference is None:
            raise ShapeError(f"'{op.name}' has no reference implementation", op.loc)
        attrs = {k: self.bind_dims(op, k, v) for k, v in op.attrs.items()}
        try:
            out = opdef.reference(inputs, attrs)
        except IndexError as e:  # NumPy's own words, with the op and the node or line that gave the index
            raise IndexRangeError(f"'{op.name}': {e}", op.loc) from None
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        return [np.asarray(o) for o in outs]

    def bind_dims(self, op: Op, key: str, value):
        if registry.get_op(op.name).attrs[key].kind == "dims":
            return tuple(evaluate(d, self.env) for d in value)
        return value

    def constant(self, op: Op, inputs: list) -> list:
        return [self.module.constants[op.attrs["name"]]]

    def cond(self, op: Op, inputs: list) -> list:
        taken = op.regions[0] if bool(inputs[0]) else op.regions[1]
        return self.region(taken, [])

    def fused(self, op: Op, inputs: list) -> list:
        return self.region(op.regions[0], inputs)

    def while_(self, op: Op, inputs: list) -> list:
        carried = inputs
        while bool(self.region(op.regions[0], carried)[0]):
            carried = self.region(op.regions[1], carried)
        return carried


_RULES = {"constant": _Interpreter.constant, "cond": _Interpreter.cond, "while": _Interpreter.while_,
          "fused": _Interpreter.fused}
