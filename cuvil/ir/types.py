"""Tensor types: an element type and a shape of static or symbolic dimensions."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .dtypes import DType
from .symbolic import Dim, SymExpr, free_symbols, parse_dim


@dataclass(frozen=True)
class TensorType:
    """`f32[batch,128]`: the type of every SSA value. Scalars have the empty shape (`f32[]`)."""

    dtype: DType
    shape: tuple

    def __post_init__(self):
        if not isinstance(self.dtype, DType):
            object.__setattr__(self, "dtype", DType(self.dtype) if isinstance(self.dtype, str)
                               else DType.from_numpy(self.dtype))
        shape = tuple(self.shape)
        for d in shape:
            if not isinstance(d, SymExpr) and (isinstance(d, bool) or not isinstance(d, int) or d < 0):
                raise ValueError(f"invalid dimension {d!r} in shape {shape}")
        object.__setattr__(self, "shape", shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> Dim:
        n: Dim = 1
        for d in self.shape:
            n = n * d
        return n

    @property
    def free_symbols(self) -> frozenset:
        out: frozenset = frozenset()
        for d in self.shape:
            out |= free_symbols(d)
        return out

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(dtype, self.shape)

    def static_nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(str(d) for d in self.shape)}]"

    def __repr__(self) -> str:
        return f"TensorType({self})"


def parse_type(text: str) -> TensorType:
    """Parse `f32[batch,4]`."""
    text = text.strip()
    lb = text.find("[")
    if lb <= 0 or not text.endswith("]"):
        raise ValueError(f"cannot parse tensor type {text!r}")
    try:
        dtype = DType(text[:lb])
    except ValueError:
        raise ValueError(f"unknown element type {text[:lb]!r} in {text!r}") from None
    inner = text[lb + 1:-1].strip()
    dims = [parse_dim(p) for p in split_top_level(inner, ",")] if inner else []
    return TensorType(dtype, tuple(dims))


def split_top_level(text: str, sep: str) -> list:
    """Split on `sep` outside brackets, braces, parentheses and strings."""
    parts, depth, cur, in_str = [], 0, [], False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_str:
            cur.append(ch)
            if ch == "\\":
                cur.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            cur.append(ch)
        elif ch in "([{":
            depth += 1
            cur.append(ch)
        elif ch in ")]}":
            depth -= 1
            cur.append(ch)
        elif ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur).strip())
    return parts
