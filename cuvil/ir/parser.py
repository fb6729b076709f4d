"""Parse the text form written by `printer.py` back into a module.

Ops are rebuilt through the `Builder`, so shape rules and attribute whitelists are checked on the way in;
a printed result type that disagrees with the shape rule is a parse error naming the line.
"""
from __future__ import annotations

import base64
import json
import re
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CuvilError, ParseError
from .core import UNKNOWN_LOC, Function, Location, Module, Region, Relation
from .dtypes import DType
from .symbolic import parse_dim
from .types import TensorType, parse_type, split_top_level

if TYPE_CHECKING:
    from .builder import Builder

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_VALUE = re.compile(r"%([A-Za-z0-9_]+)")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf)|nan")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.scopes: list[dict] = []

    # -- lexing helpers ----------------------------------------------------------------------------
    def error(self, message: str) -> ParseError:
        line = self.text.count("\n", 0, self.pos) + 1
        snippet = self.text.splitlines()[line - 1].strip() if self.text.strip() else ""
        return ParseError(f"{message} in: {snippet!r}", f"line {line}")

    def ws(self) -> None:
        while self.pos < len(self.text):
            if self.text[self.pos].isspace():
                self.pos += 1
            elif self.text.startswith("//", self.pos):  # comments run to the end of the line
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                break

    def peek(self, s: str) -> bool:
        self.ws()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.accept(s):
            raise self.error(f"expected {s!r}")

    def match(self, pattern: re.Pattern, what: str) -> re.Match:
        self.ws()
        m = pattern.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected {what}")
        self.pos = m.end()
        return m

    def ident(self) -> str:
        return self.match(_IDENT, "a name").group(0)

    def string(self) -> str:
        return json.loads(self.match(_STRING, "a string").group(0))

    def bracketed(self, open_: str, close: str) -> str:
        """The raw text between matching brackets (the opening one not yet consumed)."""
        self.expect(open_)
        depth, start = 1, self.pos
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == '"':  # brackets inside a string do not count
                self.match(_STRING, "a string")
                continue
            depth += ch == open_
            depth -= ch == close
            self.pos += 1
            if depth == 0:
                return self.text[start:self.pos - 1]
        raise self.error(f"unbalanced {open_!r}")

    def type(self) -> TensorType:
        dtype = self.ident()
        try:
            return parse_type(f"{dtype}[{self.bracketed('[', ']')}]")
        except ValueError as e:
            raise self.error(str(e)) from None

    # -- values ------------------------------------------------------------------------------------
    def define(self, name: str, value) -> None:
        if name in self.scopes[-1]:
            raise self.error(f"value %{name} is defined twice")
        self.scopes[-1][name] = value
        value.name = None if name.isdigit() else name

    def lookup(self, name: str):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise self.error(f"use of undefined value %{name}")

    # -- grammar -----------------------------------------------------------------------------------
    def module(self) -> Module:
        m = Module()
        self.expect("module")
        if self.accept("attributes"):
            for item in self._items(self.bracketed("{", "}")):
                key, _, val = item.partition("=")
                m.metadata[json.loads(key.strip())] = json.loads(val.strip())
        self.expect("{")
        while not self.accept("}"):
            if self.accept("const"):
                self.constant(m)
            elif self.accept("func"):
                self.function(m)
            else:
                raise self.error("expected 'const', 'func' or '}'")
        self.ws()
        if self.pos != len(self.text):
            raise self.error("unexpected text after the module")
        return m

    def constant(self, m: Module) -> None:
        self.expect("@")
        name = self.ident()
        self.expect(":")
        t = self.type()
        self.expect("=")
        if self.accept("elided"):
            raise self.error(f"constant @{name} was elided when printed; its data is not in the text")
        self.expect("dense")
        self.expect("<")
        data = base64.b64decode(self.string())
        self.expect(">")
        if not t.is_static or len(data) != t.static_nbytes():
            raise self.error(f"constant @{name} holds {len(data)} bytes, its type {t} needs another size")
        m.constants[name] = np.frombuffer(data, t.dtype.numpy).reshape(t.shape)

    def function(self, m: Module) -> None:
        self.expect("@")
        name = self.ident()
        self.scopes = [{}]
        names, types = [], []
        for item in self._items(self.bracketed("(", ")")):
            vname, _, tname = item.partition(":")
            names.append(vname.strip().lstrip("%"))
            types.append(self._parse_type_text(tname))
        self.expect("->")
        declared = [self._parse_type_text(t) for t in self._items(self.bracketed("(", ")"))]
        if name in m.functions:
            raise self.error(f"function @{name} is defined twice")
        fn = m.add_function(Function(name, types))
        for n, a in zip(names, fn.args):
            self.define(n, a)
        if self.accept("where"):
            for item in self._items(self.bracketed("[", "]")):
                try:
                    fn.add_relation(parse_relation(item))
                except ValueError as e:
                    raise self.error(getattr(e, "message", str(e))) from None
        self.expect("{")
        from .builder import Builder  # here, not at the top: parse_relation (the runtime's) needs no op

        self.region_ops(Builder(m, fn))
        got = fn.result_types
        if [str(t) for t in got] != [str(t) for t in declared]:
            raise self.error(f"function @{name} declares results ({', '.join(map(str, declared))}) "
                             f"but returns ({', '.join(map(str, got))})")

    def region_ops(self, b: Builder) -> None:
        while not self.accept("}"):
            self.op(b)

    def op(self, b: Builder) -> None:
        results = []
        if self.peek("%"):
            while True:
                rname = self.match(_VALUE, "a value name").group(1)
                self.expect(":")
                results.append((rname, self.type()))
                if not self.accept(","):
                    break
            self.expect("=")
        start = self.pos
        name = self.ident()
        operands = []
        if self.peek("%"):
            operands.append(self.lookup(self.match(_VALUE, "a value").group(1)))
            while self.accept(","):
                operands.append(self.lookup(self.match(_VALUE, "a value").group(1)))
        attrs = self.attr_dict() if self._at_attr_dict() else {}
        regions = []
        while self.peek("{"):
            self.expect("{")
            regions.append(self.region(b))
        loc = self.location()
        try:
            op = b.make_op(name, operands, attrs, regions, loc)
        except (CuvilError, KeyError) as e:
            self.pos = start
            raise self.error(getattr(e, "message", None) or e.args[0]) from None
        if len(results) != len(op.results):
            raise self.error(f"'{name}' gives {len(op.results)} results, the text names {len(results)}")
        for (rname, t), v in zip(results, op.results):
            if str(t) != str(v.type):
                raise self.error(f"'{name}' result %{rname} is printed as {t} but its shape rule gives {v.type}")
            self.define(rname, v)

    def region(self, b: Builder) -> Region:
        names, types = [], []
        if self.accept("^"):
            for item in self._items(self.bracketed("(", ")")):
                vname, _, tname = item.partition(":")
                names.append(vname.strip().lstrip("%"))
                types.append(self._parse_type_text(tname))
            self.expect(":")
        region = Region(types)
        self.scopes.append({})
        for n, a in zip(names, region.args):
            self.define(n, a)
        self.region_ops(b.nested(region))
        self.scopes.pop()
        return region

    def _at_attr_dict(self) -> bool:
        self.ws()
        return re.compile(r"\{\s*[A-Za-z_][A-Za-z0-9_]*\s*=(?!=)").match(self.text, self.pos) is not None

    def attr_dict(self) -> dict:
        attrs = {}
        for item in self._items(self.bracketed("{", "}")):
            key, sep, val = item.partition("=")
            if not sep:
                raise self.error(f"expected 'name = value', got {item!r}")
            attrs[key.strip()] = self._attr_value(val.strip())
        return attrs

    def _attr_value(self, text: str):
        if text.startswith("["):
            inner = text[1:-1].strip()
            return tuple(self._attr_value(p) for p in split_top_level(inner, ",")) if inner else ()
        if text.startswith('"'):
            return json.loads(text)
        if text in ("true", "false"):
            return text == "true"
        if _NUMBER.fullmatch(text):
            return float(text) if any(c in text for c in ".en") or "inf" in text else int(text)
        if text in DType._value2member_map_:
            return DType(text)
        return self._dim(text)

    def location(self):
        if not self.accept("loc"):
            return UNKNOWN_LOC
        self.expect("(")
        what = self.string()
        if self.accept(":"):
            line = int(self.match(re.compile(r"\d+"), "a line number").group(0))
            col = int(self.match(re.compile(r"\d+"), "a column").group(0)) if self.accept(":") else None
            self.expect(")")
            return Location(file=what, line=line, col=col)
        self.expect(")")
        return Location(node=what)

    def _items(self, text: str) -> list:
        return [p for p in split_top_level(text, ",") if p] if text.strip() else []

    def _parse_type_text(self, text: str) -> TensorType:
        try:
            return parse_type(text)
        except ValueError as e:
            raise self.error(str(e)) from None

    def _dim(self, text: str):
        try:
            return parse_dim(text.strip())
        except ValueError as e:
            raise self.error(str(e)) from None


def parse_relation(text: str) -> Relation:
    """A relation as `format_relation` prints it: `lhs == rhs` or `lhs >= rhs`, then optionally its words (a
    string) and its `loc(...)`; ValueError where it is not one."""
    math_end = min((i for i in (text.find('"'), text.find("loc(")) if i >= 0), default=len(text))
    sides = re.split(r"(==|>=)", text[:math_end], maxsplit=1)
    if len(sides) != 3:
        raise ValueError(f"expected 'a == b' or 'a >= b', got {text.strip()!r}")
    p = _Parser(text)
    p.pos = math_end
    what = p.string() if p.peek('"') else ""
    loc = p.location()
    p.ws()
    if p.pos != len(text):
        raise ValueError(f"unexpected text after the relation in {text.strip()!r}")
    return Relation(parse_dim(sides[0].strip()), sides[1], parse_dim(sides[2].strip()), what, loc)


def parse_module(text: str) -> Module:
    """Parse a module printed by `print_module`; raises ParseError naming the line of the problem."""
    return _Parser(text).module()

