"""Symbolic dimensions: integer expressions over named sizes such as `batch`, `2*s0`, `s0+1`, `s0//2`.

A dimension is a Python `int` or a `SymExpr`. Every operation returns its canonical form (a polynomial
with integer coefficients whose atoms are symbols or floor-div/mod terms), and collapses to a plain `int`
when no symbol is left, so structural equality is semantic equality for everything shape rules produce.
"""
from __future__ import annotations

import re
from typing import Union

Dim = Union[int, "SymExpr"]


class SymExpr:
    """An immutable canonical polynomial: a sorted tuple of (monomial, coefficient) pairs.

    A monomial is a sorted tuple of atoms; an atom is a symbol name (str) or a `("//" | "%", SymExpr, int)`.
    The empty monomial carries the constant term.
    """

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: tuple):
        self.terms = terms
        self._hash = hash(terms)

    # -- construction ------------------------------------------------------------------------------
    @staticmethod
    def symbol(name: str) -> "SymExpr":
        if not _IDENT.fullmatch(name):
            raise ValueError(f"invalid symbol name {name!r}")
        return SymExpr((((name,), 1),))

    @staticmethod
    def _make(poly: dict) -> Dim:
        terms = tuple(sorted(((m, c) for m, c in poly.items() if c != 0), key=_term_key))
        if not terms:
            return 0
        if len(terms) == 1 and terms[0][0] == ():
            return terms[0][1]
        return SymExpr(terms)

    # -- arithmetic --------------------------------------------------------------------------------
    def __add__(self, other) -> Dim:
        poly = dict(self.terms)
        for m, c in _poly(other).items():
            poly[m] = poly.get(m, 0) + c
        return SymExpr._make(poly)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return SymExpr._make({m: -c for m, c in self.terms})

    def __sub__(self, other) -> Dim:
        return self + (-other)

    def __rsub__(self, other) -> Dim:
        return (-self) + other

    def __mul__(self, other) -> Dim:
        poly: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in _poly(other).items():
                m = tuple(sorted(m1 + m2, key=_atom_key))
                poly[m] = poly.get(m, 0) + c1 * c2
        return SymExpr._make(poly)

    __rmul__ = __mul__

    def __floordiv__(self, k) -> Dim:
        k = _divisor(k)
        if k == 1:
            return self
        if all(c % k == 0 for _, c in self.terms):
            return SymExpr._make({m: c // k for m, c in self.terms})
        return SymExpr._make({(("//", self, k),): 1})

    def __mod__(self, k) -> Dim:
        k = _divisor(k)
        if all(c % k == 0 for _, c in self.terms):
            return 0
        return SymExpr._make({(("%", self, k),): 1})

    def __rfloordiv__(self, other):
        raise TypeError("division by a symbolic dimension is not supported")

    __rmod__ = __rfloordiv__

    # -- queries -----------------------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, SymExpr) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return True  # a canonical symbolic expression is never the constant 0

    def __index__(self):
        raise TypeError(f"symbolic dimension {self} has no value until a call binds it")

    @property
    def free_symbols(self) -> frozenset:
        out = set()
        for m, _ in self.terms:
            for a in m:
                out |= {a} if isinstance(a, str) else a[1].free_symbols
        return frozenset(out)

    def evaluate(self, env: dict) -> int:
        """The value under `env` (symbol name -> int); KeyError names an unbound symbol."""
        total = 0
        for m, c in self.terms:
            v = c
            for a in m:
                v *= env[a] if isinstance(a, str) else (
                    a[1].evaluate(env) // a[2] if a[0] == "//" else a[1].evaluate(env) % a[2])
            total += v
        return total

    def __repr__(self) -> str:
        return f"SymExpr({str(self)!r})"

    def __str__(self) -> str:
        out = ""
        for m, c in self.terms:
            # a // or % atom next to a factor or a sign is parenthesised: 2*(s//2) is not (2*s)//2
            alone = len(m) == 1 and c == 1
            body = "*".join(_atom_str(a) if alone or isinstance(a, str) else f"({_atom_str(a)})" for a in m)
            if not m:
                piece = str(abs(c))
            elif abs(c) == 1:
                piece = body
            else:
                piece = f"{abs(c)}*{body}"
            out += ("-" if c < 0 else ("+" if out else "")) + piece
        return out


def _poly(x) -> dict:
    if isinstance(x, SymExpr):
        return dict(x.terms)
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"a dimension must be an int or a symbolic expression, not {type(x).__name__}")
    return {(): x}


def _divisor(k) -> int:
    if isinstance(k, SymExpr):
        raise TypeError("division by a symbolic dimension is not supported")
    if k <= 0:
        raise ValueError(f"dimension divisor must be positive, got {k}")
    return int(k)


def _atom_str(a) -> str:
    if isinstance(a, str):
        return a
    inner = str(a[1])
    if len(a[1].terms) > 1 or a[1].terms[0][1] != 1:
        inner = f"({inner})"
    return f"{inner}{a[0]}{a[2]}"


def _atom_key(a) -> str:
    return a if isinstance(a, str) else "~" + _atom_str(a)


def _term_key(term) -> tuple:
    m, _ = term
    return (-len(m), tuple(_atom_key(a) for a in m))


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*%()]))")


def sym(name: str) -> SymExpr:
    """A fresh symbolic dimension called `name`."""
    return SymExpr.symbol(name)


def is_static(d: Dim) -> bool:
    return isinstance(d, int)


def plain_symbol(d: Dim):
    """The name of `d` when it is one symbol alone (`n`, not `2*n`), else None."""
    if isinstance(d, SymExpr) and len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1 \
            and isinstance(d.terms[0][0][0], str):
        return d.terms[0][0][0]
    return None


def free_symbols(d: Dim) -> frozenset:
    return d.free_symbols if isinstance(d, SymExpr) else frozenset()


def evaluate(d: Dim, env: dict) -> int:
    return d.evaluate(env) if isinstance(d, SymExpr) else d


def substitute(d: Dim, values: dict) -> Dim:
    """`d` with each symbol named in `values` replaced by its value there (an int or another dimension)."""
    if isinstance(d, int):
        return d
    total: Dim = 0
    for m, c in d.terms:
        v: Dim = c
        for a in m:
            if isinstance(a, str):
                v = v * values.get(a, SymExpr.symbol(a))
            else:
                inner = substitute(a[1], values)
                v = v * (inner // a[2] if a[0] == "//" else inner % a[2])
        total = total + v
    return total


def grows_with(d: Dim, names) -> bool:
    """Whether `d` never shrinks as the symbols `names` grow (so their upper bounds bound `d`): every term that reads
    one has a positive coefficient and reads it through products and floor divisions only."""
    if isinstance(d, int):
        return True
    names = frozenset(names)
    for m, c in d.terms:
        reads = [a for a in m if (a in names if isinstance(a, str) else a[1].free_symbols & names)]
        if reads and (c < 0 or any(not isinstance(a, str) and (a[0] == "%" or not grows_with(a[1], names))
                                   for a in reads)):
            return False
    return True


def dim_str(d: Dim) -> str:
    return str(d)


def split_constant(d: Dim) -> tuple:
    """(the terms of d without its constant, the constant): d = X + c."""
    if isinstance(d, int):
        return (), d
    return tuple(t for t in d.terms if t[0]), dict(d.terms).get((), 0)


def is_nonnegative(d: Dim, floors: dict | None = None) -> bool:
    """Whether d >= 0 for all sizes (every symbol >= 0): non-negative coefficients over symbols, mods and floor
    divisions of such expressions. `floors` adds what is known: X + c >= 0 for c >= floors[X's terms]."""
    if isinstance(d, int):
        return d >= 0
    rest, const = split_constant(d)
    if floors and rest in floors and const >= floors[rest]:
        return True
    return all(c >= 0 and all(isinstance(a, str) or a[0] == "%" or is_nonnegative(a[1], floors) for a in m)
               for m, c in d.terms)


def parse_dim(text: str) -> Dim:
    """Parse the printed form of a dimension (`4`, `batch`, `2*s0+1`, `(s0+1)//2`)."""
    tokens = [m for m in _TOKEN.finditer(text)]
    if "".join(m.group(0) for m in tokens).strip() != text.strip() or not tokens:
        raise ValueError(f"cannot parse dimension {text!r}")
    toks = [m.group(1) or m.group(2) or m.group(3) for m in tokens]
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        if pos >= len(toks):
            raise ValueError(f"cannot parse dimension {text!r}: it ends too early")
        pos += 1
        return toks[pos - 1]

    def atom() -> Dim:
        t = take()
        if t == "(":
            v = expr()
            if take() != ")":
                raise ValueError(f"unbalanced parentheses in {text!r}")
            return v
        if t == "-":
            return -atom()
        if t is not None and t.isdigit():
            return int(t)
        if t is not None and _IDENT.fullmatch(t):
            return SymExpr.symbol(t)
        raise ValueError(f"cannot parse dimension {text!r}")

    def term() -> Dim:
        v = atom()
        while peek() in ("*", "//", "%"):
            op, rhs = take(), atom()
            v = v * rhs if op == "*" else (v // rhs if op == "//" else v % rhs)
        return v

    def expr() -> Dim:
        v = term()
        while peek() in ("+", "-"):
            v = v + term() if take() == "+" else v - term()
        return v

    result = expr()
    if pos != len(toks):
        raise ValueError(f"cannot parse dimension {text!r}")
    return result
