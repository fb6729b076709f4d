"""The jaxpr walker: a `ClosedJaxpr` becomes a Cuvil IR function.

Invars become the function's arguments, closed-over constants become module constants (NumPy views of the
arrays, not copies), literals become `full` ops, and every equation goes through the primitive table.
Nested jaxprs (`jit`, `custom_jvp_call`, `cond` branches, loop bodies) run through `run` with a builder for
the region (or the current one, when they are inlined).
"""
from __future__ import annotations

import numpy as np
from jax._src import source_info_util

from ...errors import UnsupportedError
from ...ir.builder import Builder
from ...ir.core import Location, Module, Op, Value
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from ...ops import registry
from . import control, primitives, primitives_nn  # noqa: F401 (fill the table)
from .context import PRIMITIVES, Ctx, aval_type


def eqn_location(eqn) -> Location:
    """The user's source line of a jaxpr equation, and the primitive's name as the node."""
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    node = f"jax:{eqn.primitive.name}"
    if frame is not None and not frame.file_name.startswith("<"):
        return Location(frame.file_name, frame.start_line, node=node)
    return Location(node=node)


class JaxprWalker:
    def __init__(self, module: Module | None = None):
        self.module = module or Module()
        self.env: dict = {}
        self._folded: dict = {}

    def build(self, closed, arg_names=None, name: str = "main") -> Module:
        """Convert `closed` (a ClosedJaxpr) into function `name` of the module; returns the module."""
        jaxpr = closed.jaxpr
        types = [aval_type(v.aval) for v in jaxpr.invars]
        b = Builder.new_function(self.module, name, types, arg_names)
        b.ret(*[self.as_value(b, v) for v in self.run(closed, b, b.args)])
        return self.module

    def run(self, closed, b, args) -> list:
        """Run a ClosedJaxpr (or a Jaxpr with no consts) into builder `b`; returns its outputs."""
        jaxpr, consts = (closed.jaxpr, closed.consts) if hasattr(closed, "consts") else (closed, [])
        for var, c in zip(jaxpr.constvars, consts):
            self.env[var] = self.constant(b, c)
        for var, a in zip(jaxpr.invars, args):
            self.env[var] = a
        for eqn in jaxpr.eqns:
            self.equation(eqn, b)
        return [self.read(b, v) for v in jaxpr.outvars]

    def equation(self, eqn, b) -> None:
        name = eqn.primitive.name
        b.loc = eqn_location(eqn)
        fn = PRIMITIVES.get(name)
        if fn is None:
            raise UnsupportedError(f"jaxpr primitive '{name}' has no Cuvil converter", b.loc)
        operands = [self.read(b, v) for v in eqn.invars]
        try:
            out = fn(Ctx(self, b, eqn), *operands, **eqn.params)
        except Exception as e:
            e.add_note(f"while converting the jaxpr equation {eqn} at {b.loc}")
            raise
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        for var, value in zip(eqn.outvars, outs):
            self.env[var] = value

    def read(self, b, var):
        if hasattr(var, "val"):  # a Literal, in its aval's dtype (the value may be a wider NumPy scalar)
            return self.constant(b, np.asarray(var.val, dtype=var.aval.dtype))
        return self.env[var]

    def constant(self, b, value) -> Value:
        arr = np.asarray(value)
        if arr.ndim == 0:
            return b.full(arr.item(), (), DType.from_numpy(arr.dtype))
        return b.constant(arr, "c")

    def as_value(self, b, x) -> Value:
        return x if isinstance(x, Value) else self.constant(b, x)

    # -- values known while converting (index arithmetic on literals) ---------------------------------------
    def static_value(self, v, index: int | None = None):
        """The number `v` holds (element `index` of a vector) if it follows from constants alone, else None."""
        arr = self._fold(v) if isinstance(v, Value) else np.asarray(v)
        if arr is None:
            return None
        return arr.reshape(-1)[index].item() if index is not None else (arr.item() if arr.size == 1 else None)

    def _fold(self, v: Value):
        """Evaluate v's defining ops with their references when none depends on an input (small tensors only)."""
        if id(v) in self._folded:
            return self._folded[id(v)]
        op, out = v.owner, None
        if isinstance(op, Op) and not op.regions and v.type.is_static and v.type.numel <= _FOLD_LIMIT:
            if op.name == "constant":
                out = self.module.constants[op.attrs["name"]]
            elif registry.get_op(op.name).reference is not None and not _symbolic_attrs(op):
                ins = [self._fold(x) for x in op.operands]
                if all(x is not None for x in ins):
                    res = registry.get_op(op.name).reference(ins, op.attrs)
                    out = np.asarray(res[v.index] if isinstance(res, (list, tuple)) else res)
        self._folded[id(v)] = out
        return out


_FOLD_LIMIT = 4096


def _symbolic_attrs(op) -> bool:
    return any(isinstance(d, SymExpr) for a in op.attrs.values() if isinstance(a, tuple) for d in a)
