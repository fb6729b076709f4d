"""The converter table and the context each converter gets.

A converter is registered for ATen ops by name (`@aten("add.Tensor", "add.Scalar")`, or the packet name
`"add"` for every overload) and called as `fn(cx, *args)` with the op's arguments bound to its schema
(defaults filled), FX nodes replaced by IR values (tensors) or dimensions (SymInts). It returns a value,
or a tuple for ops with several results. PyTorch broadcasts and promotes implicitly; the IR does not, so
the context's helpers insert `cast` and `broadcast_to` where the operands' types differ from the result's.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...errors import UnsupportedError
from ...ir.core import Value
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from ...ops import registry
from ...ops.common import broadcast_shapes

CONVERTERS: dict[str, Callable] = {}

DTYPES = {torch.float32: DType.f32, torch.float64: DType.f64, torch.float16: DType.f16, torch.bfloat16: DType.bf16,
          torch.int64: DType.i64, torch.int32: DType.i32, torch.int16: DType.i16, torch.int8: DType.i8,
          torch.uint8: DType.u8, torch.bool: DType.bool, torch.complex64: DType.c64, torch.complex128: DType.c128}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}
INT_MAX = 2 ** 63 - 1  # what torch writes for "to the end" in slices


EFFECT_TOKEN = "effect token"  # what an effect-token input and `with_effects` stand for: orders effects, holds no value


def aten(*names: str):
    """Register the decorated function as the converter of the named ATen ops (or higher-order ops)."""
    def register(fn):
        for name in names:
            CONVERTERS[name if name in ("cond", "while_loop", "getitem") else f"aten.{name}"] = fn
        return fn
    return register


def lookup(target) -> Callable | None:
    """The converter of an FX call target: its exact overload first, then its overload packet, then a user op
    declared with `register_op(..., torch_op="ns::name")`."""
    name = "getitem" if getattr(target, "__name__", None) == "getitem" else str(target)
    packet = getattr(target, "overloadpacket", None)
    found = CONVERTERS.get(name) or (CONVERTERS.get(str(packet)) if packet is not None else None)
    if found is None and packet is not None:
        opdef = registry.bridged_op("torch_op", str(packet).replace(".", "::", 1))
        return _bridge(opdef, target._schema) if opdef is not None else None
    return found


def _bridge(opdef, schema) -> Callable:
    """The converter of a user's torch.library op: tensors are operands (broadcast to the result for elementwise
    ops), other arguments attributes of the same name."""
    def convert(cx, *args):
        tensors = [a for a in args if isinstance(a, Value)]
        if "elementwise" in opdef.traits:
            tensors = [cx.broadcast(t, cx.out_shape()) for t in tensors]
        attrs = {arg.name: v for arg, v in zip(schema.arguments, args)
                 if not isinstance(v, Value) and arg.name in opdef.attrs}
        return cx.b.emit(opdef.name, *tensors, **attrs)
    return convert


def source_text(node) -> str:
    """`, from: <the user's code line>` when the stack trace has it, for error messages."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    return f", from: {trace[-1].strip()}" if len(trace) >= 2 and not trace[-1].lstrip().startswith("File") else ""


def to_dtype(dtype: torch.dtype) -> DType:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise UnsupportedError(f"cuvil has no element type for {dtype}") from None


class Ctx:
    """What a converter sees: the builder `b`, the FX `node`, the walker, and broadcasting helpers."""

    def __init__(self, walker, b, node):
        self.walker, self.b, self.node = walker, b, node

    @property
    def out(self):
        """The node's example result (a FakeTensor, or a tuple of them)."""
        return self.node.meta.get("val")

    def out_dtype(self, i: int | None = None) -> DType:
        val = self.out if i is None else self.out[i]
        return to_dtype(val.dtype)

    def out_shape(self, i: int | None = None) -> tuple:
        val = self.out if i is None else self.out[i]
        return self.walker.shape(val.shape)

    @property
    def op_name(self) -> str:
        """The ATen op's name without namespace and overload (`"isnan"`)."""
        return str(self.node.target.overloadpacket).split(".")[-1]

    def error(self, message: str) -> UnsupportedError:
        return UnsupportedError(f"{self.node.target} (FX node {self.node.name}{source_text(self.node)}): {message}",
                                self.b.loc)

    # -- operands --------------------------------------------------------------------------------------------
    def tensor(self, x, dtype: DType, shape=None) -> Value:
        """`x` (a value, a Python number or a dimension) as a tensor of `dtype`, broadcast to `shape` if given."""
        if not isinstance(x, Value):
            v = self.scalar(x, dtype)
        else:
            v = x if x.type.dtype is dtype else self.b.cast(x, dtype=dtype)
        return self.broadcast(v, shape) if shape is not None else v

    def scalar(self, x, dtype: DType) -> Value:
        if isinstance(x, SymExpr):
            return self.b.dim_size(dim=[x], dtype=dtype)
        if isinstance(x, (complex, np.complexfloating)) or (dtype.is_complex and isinstance(x, (int, float))):
            if not dtype.is_complex:
                raise self.error(f"a complex number ({x}) in a {dtype} computation")
            parts = (self.b.full(float(p), (), dtype.real) for p in (x.real, x.imag))
            return self.b.complex(*parts)
        if isinstance(x, (bool, int, float, np.number)):
            return self.b.full(float(x), (), dtype)
        raise self.error(f"expected a tensor or a number, got {type(x).__name__}")

    def broadcast(self, v: Value, shape) -> Value:
        shape = tuple(shape)
        if v.type.shape == shape:
            return v
        if v.type.rank > len(shape):  # a [1, 1] operand against a scalar result: drop the size-1 dims
            v = self.b.reshape(v, shape=v.type.shape[v.type.rank - len(shape):])
        return self.b.broadcast_to(v, shape=shape)

    def common_shape(self, *xs) -> tuple:
        """The broadcast shape of the tensors among `xs` (scalars broadcast to anything)."""
        shape: tuple = ()
        for x in xs:
            if isinstance(x, Value):
                shape = broadcast_shapes(shape, x.type.shape)
        return shape

    def operands(self, xs, dtype: DType) -> list[Value]:
        """Tensors and scalars brought to one dtype and their broadcast shape, as an elementwise op needs."""
        shape = self.common_shape(*xs)
        return [self.tensor(x, dtype, shape) for x in xs]

    def promoted(self, x, y) -> DType:
        """The dtype PyTorch computes `x op y` in (its type promotion: tensors by category, then scalars)."""
        return to_dtype(torch.result_type(_dummy(x), _dummy(y)))


def _dummy(x):
    """A stand-in with x's dtype and dimension category (0-d or not) for `torch.result_type`."""
    if isinstance(x, Value):
        return torch.empty((1,) * min(x.type.rank, 1), dtype=TORCH_DTYPES[x.type.dtype])
    return 1 if isinstance(x, SymExpr) else x
