"""The text form of the IR. `parse_module(print_module(m))` gives back the same module.

    module {
      const @w : f32[4,4] = dense<"...base64...">
      func @main(%x: f32[n,4]) -> (f32[n,4]) {
        %0:f32[4,4] = constant {name = "w"}
        %1:f32[n,4] = matmul %x, %0 loc("model.py":3)
        return %1
      }
    }

Every attribute is printed, defaults included, so a printed module means the same thing even if a default
changes later.
"""
from __future__ import annotations

import base64
import json
import math
import re

import numpy as np

from .core import Function, Location, Module, Op, Region, Relation, Value
from .dtypes import DType

_NAME_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def format_attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else ("-inf" if v == -math.inf else repr(v)))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, DType):
        return v.value
    if isinstance(v, tuple):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    return str(v)  # a symbolic dimension


def format_loc(loc: Location) -> str:
    if loc.file is not None:
        return f"loc({json.dumps(loc.file)}:{loc.line}" + (f":{loc.col})" if loc.col is not None else ")")
    return f"loc({json.dumps(loc.node)})" if loc.node else ""


def format_relation(r: Relation) -> str:
    """`lhs == rhs` or `lhs >= rhs`, then its words as a string and its location where it has them."""
    text = str(r) + (f" {json.dumps(r.what)}" if r.what else "")
    return text + (f" {format_loc(r.loc)}" if format_loc(r.loc) else "")


def encode_constant(arr: np.ndarray) -> str:
    data = np.ascontiguousarray(arr).tobytes()
    return base64.b64encode(data).decode("ascii")


class _Printer:
    def __init__(self, elide_constants_over: int | None):
        self.elide = elide_constants_over
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0
        self.lines: list[str] = []

    def name(self, v: Value) -> str:
        key = id(v)
        if key not in self.names:
            hint = v.name if v.name and _NAME_OK.fullmatch(v.name) and v.name not in self.used else None
            if hint is None:
                hint = str(self.counter)
                self.counter += 1
            self.used.add(hint)
            self.names[key] = hint
        return "%" + self.names[key]

    def ref(self, v: Value) -> str:
        return "%" + self.names[id(v)] if id(v) in self.names else "%<undefined>"

    def module(self, m: Module) -> str:
        meta = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in m.metadata.items())
        self.lines.append(f"module attributes {{{meta}}} {{" if meta else "module {")
        for cname, arr in m.constants.items():
            t = f"{DType.from_numpy(arr.dtype).value}[{','.join(map(str, arr.shape))}]"
            body = "elided" if self.elide is not None and arr.size > self.elide else f'dense<"{encode_constant(arr)}">'
            self.lines.append(f"  const @{cname} : {t} = {body}")
        for fn in m.functions.values():
            self.function(fn, "  ")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def function(self, fn: Function, indent: str) -> None:
        self.names, self.used, self.counter = {}, set(), 0
        args = ", ".join(f"{self.name(a)}: {a.type}" for a in fn.args)
        results = ", ".join(str(t) for t in fn.result_types)
        where = (" where [" + ", ".join(map(format_relation, fn.constraints)) + "]") if fn.constraints else ""
        self.lines.append(f"{indent}func @{fn.name}({args}) -> ({results}){where} {{")
        self.region_body(fn.body, indent + "  ")
        self.lines.append(f"{indent}}}")

    def region_body(self, region: Region, indent: str) -> None:
        for op in region.ops:
            self.op(op, indent)

    def op(self, op: Op, indent: str) -> None:
        results = ", ".join(f"{self.name(r)}:{r.type}" for r in op.results)
        operands = ", ".join(self.ref(v) for v in op.operands)
        attrs = ", ".join(f"{k} = {format_attr(v)}" for k, v in op.attrs.items())
        line = indent + (f"{results} = " if results else "") + op.name
        line += (f" {operands}" if operands else "") + (f" {{{attrs}}}" if attrs else "")
        loc = f" {format_loc(op.loc)}" if format_loc(op.loc) else ""
        if not op.regions:
            self.lines.append(line + loc)
            return
        self.lines.append(line + " {")
        for i, region in enumerate(op.regions):
            if region.args:
                sig = ", ".join(f"{self.name(a)}: {a.type}" for a in region.args)
                self.lines.append(f"{indent}^({sig}):")
            self.region_body(region, indent + "  ")
            self.lines.append(f"{indent}}}" + (" {" if i + 1 < len(op.regions) else loc))


def print_module(module: Module, elide_constants_over: int | None = None) -> str:
    """The module's text. With `elide_constants_over=N`, constants of more than N elements print as
    `elided` (for reading; such text does not parse back)."""
    return _Printer(elide_constants_over).module(module)


def print_function(module: Module, fn: Function) -> str:
    p = _Printer(None)
    p.function(fn, "")
    return "\n".join(p.lines) + "\n"


Module.printer = print_module  # str(module), without a cycle between the core and its printer
