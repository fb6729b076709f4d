"""The op registry: one `OpDef` per op, holding everything the compiler knows about it.

An `OpDef` is data: operand and result arity, an attribute whitelist with kinds and defaults, a shape rule,
a NumPy reference and, for composite ops, a decomposition into primitives. Frontends, passes and backends
look ops up here by name instead of branching on op names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ..ir.dtypes import DType
from ..ir.symbolic import Dim, SymExpr, parse_dim

REQUIRED = object()
ATTR_KINDS = ("int", "float", "bool", "str", "dtype", "ints", "floats", "strs", "dims")


@dataclass(frozen=True)
class Attr:
    """An attribute in an op's whitelist: its kind (one of ATTR_KINDS) and default (REQUIRED if none)."""

    kind: str
    default: Any = REQUIRED
    choices: Optional[tuple] = None

    def __post_init__(self):
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")


@dataclass
class OpDef:
    """Everything about one op. `operands` is a count, or (min, max) with max None for variadic."""

    name: str
    operands: Any = 1
    results: int = 1
    attrs: dict = field(default_factory=dict)
    shape: Optional[Callable] = None  # (ctx, operand_types, attrs) -> list[TensorType]
    reference: Optional[Callable] = None  # (list[np.ndarray], attrs) -> np.ndarray | list[np.ndarray]
    decompose: Optional[Callable] = None  # (builder, operands, attrs) -> Value | list[Value]
    normalize: Optional[Callable] = None  # (operand_types, attrs) -> attrs in normal form
    regions: int = 0
    traits: frozenset = frozenset()
    doc: str = ""
    c_expr: Optional[str] = None  # elementwise user ops: C for one element, operands as {0}, {1}, ...
    torch_op: Optional[str] = None  # "mylib::add_relu": the torch.library op that frontends translate to this op
    onnx_op: Optional[str] = None  # "com.example::AddRelu": the ONNX node (domain::op_type) likewise
    # ops whose result size depends on the data: (operand_types, attrs) -> {symbol: upper bound} of the sizes they
    # define (named by their `size` attribute); the bound sizes the buffers, the run-time value the loops
    sizes: Optional[Callable] = None

    @property
    def is_composite(self) -> bool:
        return self.decompose is not None

    @property
    def arity(self) -> tuple:
        return self.operands if isinstance(self.operands, tuple) else (self.operands, self.operands)

    def check_arity(self, n: int) -> Optional[str]:
        lo, hi = self.arity
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any number of'}"
            return f"'{self.name}' takes {want} operands, got {n}"
        return None

    def complex_refusal(self, types) -> Optional[str]:
        """Why the op refuses its operands' `types`: only ops with the "complex" trait (and control flow, which
        passes values through) take complex operands."""
        if "complex" in self.traits or self.regions or "terminator" in self.traits:
            return None
        bad = next((t for t in types if t.dtype.is_complex), None)
        if bad is None:
            return None
        return (f"'{self.name}' does not accept complex operands (got {bad}); complex tensors support elementwise "
                "add, sub, mul, div, neg, conj, real, imag, movement ops and the FFTs")

    def complete_attrs(self, attrs: dict) -> dict:
        """Check names against the whitelist, coerce kinds, fill defaults. Raises ValueError with the reason."""
        out = {}
        for k in attrs:
            if k not in self.attrs:
                allowed = ", ".join(sorted(self.attrs)) or "none"
                raise ValueError(f"'{self.name}' has no attribute '{k}' (allowed: {allowed})")
        for k, spec in self.attrs.items():
            if k in attrs and attrs[k] is not None:
                out[k] = coerce_attr(spec, attrs[k], f"'{self.name}' attribute '{k}'")
            elif spec.default is REQUIRED:
                raise ValueError(f"'{self.name}' requires attribute '{k}'")
            else:
                out[k] = spec.default
        return out


_REGISTRY: dict[str, OpDef] = {}


def register_op(name: str, *, operands=1, results=1, attrs=None, shape=None, reference=None, decompose=None,
                normalize=None, regions=0, traits=(), doc="", c_expr=None, torch_op=None, onnx_op=None,
                sizes=None, replace=False) -> OpDef:
    """Declare an op. Users add custom ops the same way; an elementwise op with a `c_expr` (C for one
    element, operands as `{0}`, `{1}`, computed in float for float types) joins the CPU backend's fused
    loop kernels. `torch_op="ns::name"` (a `torch.library` op) and `onnx_op="domain::OpType"` (a node of a
    custom ONNX domain) name what the frontends translate to it: tensor arguments become operands in order,
    the others attributes of the same name.

    >>> import numpy as np, cuvil
    >>> from cuvil.ops import same_as_operand
    >>> _ = cuvil.register_op("my_square", shape=same_as_operand, reference=lambda xs, a: xs[0] * xs[0],
    ...                       traits={"elementwise"}, replace=True)
    """
    if name in _REGISTRY and not replace:
        raise ValueError(f"op '{name}' is already registered")
    if shape is None:
        raise ValueError(f"op '{name}' needs a shape rule")
    for what, bridge in (("torch_op", torch_op), ("onnx_op", onnx_op)):
        if bridge is not None and (not isinstance(bridge, str) or bridge.count("::") != 1 or
                                   not all(bridge.split("::"))):
            raise ValueError(f"op '{name}': {what} must read 'namespace::name', got {bridge!r}")
    op = OpDef(name, operands, results, dict(attrs or {}), shape, reference, decompose, normalize, regions,
               frozenset(traits), doc, c_expr, torch_op, onnx_op, sizes)
    _REGISTRY[name] = op
    return op


def bridged_op(kind: str, qualified: str) -> Optional[OpDef]:
    """The op declared with `torch_op` or `onnx_op` (`kind`) equal to `qualified` ("ns::name"), if any."""
    return next((op for op in _REGISTRY.values() if getattr(op, kind) == qualified), None)


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown op '{name}'") from None


def has_op(name: str) -> bool:
    return name in _REGISTRY


def all_ops() -> dict:
    return dict(_REGISTRY)


def coerce_attr(spec: Attr, value, what: str):
    """Bring `value` to the canonical Python form of its kind, or raise ValueError naming `what`."""
    kind = spec.kind
    try:
        if kind == "int":
            v = _as_int(value)
        elif kind == "float":
            if isinstance(value, (bool, str)) or not np.isscalar(value):
                raise TypeError
            v = float(value)
        elif kind == "bool":
            if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
                raise TypeError
            v = bool(value)
        elif kind == "str":
            if not isinstance(value, str):
                raise TypeError
            v = value
        elif kind == "dtype":
            v = value if isinstance(value, DType) else (DType(value) if isinstance(value, str)
                                                        else DType.from_numpy(value))
        elif kind == "ints":
            v = tuple(_as_int(x) for x in _as_seq(value))
        elif kind == "floats":
            v = tuple(float(x) for x in _as_seq(value))
        elif kind == "strs":
            v = tuple(_as_str(x) for x in _as_seq(value))
        else:  # dims
            v = tuple(_as_dim(x) for x in _as_seq(value))
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be of kind {kind}, got {value!r}") from None
    if spec.choices is not None and v not in spec.choices:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, spec.choices))}, got {v!r}")
    return v


def _as_int(x) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError
    return int(x)


def _as_str(x) -> str:
    if not isinstance(x, str):
        raise TypeError
    return x


def _as_dim(x) -> Dim:
    if isinstance(x, SymExpr):
        return x
    if isinstance(x, str):
        return parse_dim(x)
    return _as_int(x)


def _as_seq(x):
    if isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
        raise TypeError
    return list(x)
