"""`NodeContext`: what a converter sees of one ONNX node (its inputs as IR values or known arrays, its
attributes, its opset, a builder placed at the node) and the helpers every converter family shares."""
from __future__ import annotations

import copy

import numpy as np
from onnx import AttributeProto

from ...errors import ShapeError, UnsupportedError
from ...ir.builder import Builder
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from ...ir.types import TensorType
from ...ops.common import broadcast_shapes
from .tensors import ONNX_DTYPES, Tensor, tensor_to_array

_ATTR_READERS = {
    AttributeProto.FLOAT: lambda a: a.f, AttributeProto.INT: lambda a: a.i,
    AttributeProto.STRING: lambda a: a.s.decode("utf-8", "replace"),
    AttributeProto.TENSOR: lambda a: tensor_to_array(a.t),
    AttributeProto.GRAPH: lambda a: a.g, AttributeProto.FLOATS: lambda a: list(a.floats),
    AttributeProto.INTS: lambda a: list(a.ints), AttributeProto.STRINGS: lambda a: [s.decode() for s in a.strings],
    AttributeProto.GRAPHS: lambda a: list(a.graphs), AttributeProto.TYPE_PROTO: lambda a: a.tp,
}


class NeedsValue(UnsupportedError):
    """A shape-like input is computed from graph inputs' values (`inputs` names them). The loader may then
    specialize the model on those inputs' values, converting it once per distinct value."""

    def __init__(self, message: str, loc=None, inputs=frozenset()):
        super().__init__(message, loc)
        self.inputs = frozenset(inputs)


class NodeContext:
    """One node being converted. `b` appends to the node's region with the node's location."""

    def __init__(self, graph, node, inputs: list, opset: int, b: Builder, scope, opsets: dict, name: str):
        self.graph, self.node, self.inputs, self.opset = graph, node, inputs, opset
        self.op_type, self.name, self.b, self.scope, self.opsets = node.op_type, name, b, scope, opsets
        self._attrs = {a.name: a for a in node.attribute}

    def within(self, b: Builder) -> "NodeContext":
        """This node's context building into another region (a loop body)."""
        other = copy.copy(self)
        other.b = b
        return other

    # -- messages --------------------------------------------------------------------------------------
    @property
    def where(self) -> str:
        return f"ONNX {self.op_type} node {self.name!r} (opset {self.opset})"

    def unsupported(self, message: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where}: {message}", self.b.loc)

    def error(self, message: str) -> ShapeError:
        return ShapeError(f"{self.where}: {message}", self.b.loc)

    # -- attributes ------------------------------------------------------------------------------------
    def attr(self, name: str, default=None):
        a = self._attrs.get(name)
        if a is None:
            return default
        reader = _ATTR_READERS.get(a.type)
        if reader is None:
            raise self.unsupported(f"attribute {name!r} has a type Cuvil does not read")
        return reader(a)

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    # -- inputs ----------------------------------------------------------------------------------------
    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def value(self, i: int):
        """Input i as it is: a Tensor, a Sequence or an OptionalValue."""
        if not self.has(i):
            raise self.error(f"needs input {i}, which is missing")
        return self.inputs[i]

    def tensor(self, i: int) -> Tensor:
        t = self.value(i)
        if not isinstance(t, Tensor):
            raise self.unsupported(f"input {i} is {t.describe()}; this op takes a tensor")
        return t

    def x(self, i: int = 0):
        """Input i as an IR value (made from its known contents if need be)."""
        return self.graph.materialize(self.tensor(i), self.b.loc)

    def known(self, i: int):
        return self.inputs[i].known if self.has(i) and isinstance(self.inputs[i], Tensor) else None

    def type(self, i: int = 0) -> TensorType:
        return self.tensor(i).type

    def dims(self, i: int, what: str) -> tuple:
        """A shape-like input (Reshape's shape, Slice's starts...) as a tuple of ints and symbolic dims.
        It must be computable at conversion time: a constant or shape arithmetic on input sizes."""
        k = self.known(i)
        if k is None:
            raise self.needs_value(i, what)
        return tuple(v if isinstance(v, SymExpr) else int(v) for v in np.asarray(k).reshape(-1))

    def floats(self, i: int, what: str) -> tuple:
        k = self.known(i)
        if k is None or k.dtype == object:
            raise self.needs_value(i, what)
        return tuple(float(v) for v in k.reshape(-1))

    def needs_value(self, i: int, what: str) -> NeedsValue:
        deps = self.tensor(i).deps
        return NeedsValue(f"{self.where}: {what} (input {i}) must be computable when the model is loaded (a constant "
                          f"or arithmetic on input shapes); it depends on the values of "
                          f"{', '.join(map(repr, sorted(deps))) or 'other data'}", self.b.loc, deps)

    def known_scalar(self, i: int, what: str, default=None):
        """A known scalar input (or `default` when the optional input is absent)."""
        if not self.has(i):
            return default
        vals = self.dims(i, what) if self.tensor(i).dtype.is_int else self.floats(i, what)
        if len(vals) != 1:
            raise self.error(f"{what} (input {i}) must hold one value, got {len(vals)}")
        return vals[0]

    # -- building helpers ------------------------------------------------------------------------------
    def const(self, array, dtype: DType | None = None):
        return self.graph.constant(np.asarray(array, dtype.numpy if dtype else None), self.b.loc)

    def scalar_like(self, value, like):
        """A scalar (a number or a symbolic size) of `like`'s element type, broadcast to like's shape."""
        c = self.scalar(value, like.type.dtype)
        return self.b.broadcast_to(c, shape=like.type.shape) if like.type.rank else c

    def scalar(self, value, dtype: DType):
        """A scalar of `dtype`: a constant, or a `dim_size` for a symbolic size."""
        if isinstance(value, SymExpr):
            return self.graph.materialize(Tensor(known=np.array(value, dtype=object), elem=ONNX_DTYPES[dtype]),
                                          self.b.loc)
        return self.const(np.asarray(value).astype(dtype.numpy))

    def cast(self, v, dtype: DType):
        return v if v.type.dtype is dtype else self.b.cast(v, dtype=dtype)

    def expand(self, v, shape):
        return v if tuple(v.type.shape) == tuple(shape) else self.b.broadcast_to(v, shape=tuple(shape))

    def broadcast(self, *values) -> list:
        """NumPy broadcasting made explicit: every value expanded to the common shape."""
        shape: tuple = ()
        for v in values:
            shape = broadcast_dims(shape, v.type.shape, self)
        return [self.expand(v, shape) for v in values]

    def reshape(self, v, shape):
        return v if tuple(v.type.shape) == tuple(shape) else self.b.reshape(v, shape=tuple(shape))


def broadcast_dims(a: tuple, b: tuple, ctx=None) -> tuple:
    """Multidirectional broadcasting (`cuvil.ops.broadcast_shapes`), its error naming the node."""
    try:
        return broadcast_shapes(a, b)
    except ShapeError as e:
        raise (ctx.error(e.message) if ctx is not None else e) from None
