"""What the translator computes with: tensors (`TV`), Python values known at compile time, and markers.

A Python value (int, float, tuple, module, dtype ...) is evaluated at compile time; a `TV` wraps an IR
value. Result dtypes come from the framework itself: `x + 2.0` is typed by asking NumPy (or torch) what
`np.add(<f32 array>, 2.0)` gives, on empty dummies, so promotion rules (NEP 50 weak scalars, torch's
category rules, `int / int -> float`) match the original exactly without a table of our own.
"""
from __future__ import annotations

import sys
from typing import NamedTuple, Optional

import numpy as np

from ...errors import UnsupportedError
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr

SUPPORTED_DTYPES = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool")


class TV:
    """A tensor value. `weak` marks one that stands for a Python scalar: it adapts to the other operand's
    dtype (NumPy 2 / torch semantics), so `x * k` keeps f32 even when `k` became a tensor in a loop."""

    __slots__ = ("value", "weak")

    def __init__(self, value, weak: bool = False):
        self.value = value
        self.weak = weak

    @property
    def type(self):
        return self.value.type

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def shape(self) -> tuple:
        return self.value.type.shape

    @property
    def rank(self) -> int:
        return self.value.type.rank

    def __repr__(self) -> str:
        return f"TV({self.type}{', weak' if self.weak else ''})"


class Undefined:
    """A name bound on some paths only; using it raises `why` at the line of the use."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


class StackedList:
    """A Python list that a loop running at run time appended to: its items, in order, are single tensors
    and the rows of stacked tensors (one row per iteration). `parts` holds (tensor, is_rows) pairs."""

    __slots__ = ("parts",)

    def __init__(self, parts: list):
        self.parts = parts

    def length(self):
        """An int, or a symbolic size."""
        n = 0
        for t, rows in self.parts:
            n = n + (t.shape[0] if rows else 1)
        return n


class RunTimeValue:
    """Base of the translator's own values that stand for something only known at run time."""

    __slots__ = ()


class RuntimeRange(NamedTuple):
    """`range(n)` whose bounds are tensors or symbolic sizes: a loop at run time."""

    start: object
    stop: object
    step: int


class BoundMethod:
    """`x.sum` before the call: the tensor and the method name."""

    __slots__ = ("tensor", "name")

    def __init__(self, tensor: TV, name: str):
        self.tensor, self.name = tensor, name


def is_dynamic(v) -> bool:
    """Values only known at run time (or symbolically), anywhere inside tuples, lists and dicts."""
    if isinstance(v, (tuple, list)):
        return any(is_dynamic(x) for x in v)
    if isinstance(v, dict):
        return any(is_dynamic(x) for x in v.values())
    return isinstance(v, (TV, SymExpr, BoundMethod, Undefined, RuntimeRange, StackedList, RunTimeValue))


def is_tensorish(v) -> bool:
    """Values that can become a tensor: tensors, Python numbers and symbolic sizes."""
    return isinstance(v, TV) or isinstance(v, (bool, int, float, SymExpr))


# -- dtypes -------------------------------------------------------------------------------------------------
def torch_module():
    return sys.modules.get("torch")


def is_torch_tensor(x) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def to_dtype(obj) -> Optional[DType]:
    """The IR dtype an object names (np.float32, np.dtype, "float32", torch.float32, DType), else None."""
    if isinstance(obj, DType):
        return obj
    torch = torch_module()
    if torch is not None and isinstance(obj, torch.dtype):
        name = str(obj).split(".")[-1]
        if name == "bfloat16":
            return DType.bf16
        obj = name
    if obj is float:
        return DType.f64
    if obj is int:
        return DType.i64
    if obj is bool:
        return DType.bool
    try:
        return check_dtype(DType.from_numpy(np.dtype(obj)))
    except TypeError:
        return None


def check_dtype(d: DType) -> DType:
    if d.value not in SUPPORTED_DTYPES:
        raise UnsupportedError(f"element type {d} ({d.numpy}) is not supported in @cuvil.jit functions (supported: "
                               f"{', '.join(SUPPORTED_DTYPES)})")
    return d


def dtype_of_array(dt) -> DType:
    """The IR dtype of a NumPy or torch dtype; unsupported ones are an error naming the supported ones."""
    if not isinstance(dt, np.dtype) and to_dtype(dt) is not None:
        return to_dtype(dt)
    try:
        return check_dtype(DType.from_numpy(dt))
    except TypeError:
        raise UnsupportedError(f"element type {dt} is not supported (supported: {', '.join(SUPPORTED_DTYPES)})") \
            from None


def torch_dtype(d: DType):
    names = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "i64": "int64",
             "i32": "int32", "i16": "int16", "i8": "int8", "u8": "uint8", "bool": "bool"}
    return getattr(torch_module(), names[d.value])


def user_dtype(d: DType, mode: str):
    """The framework's own object for `x.dtype`."""
    return torch_dtype(d) if mode == "torch" else d.numpy


# -- promotion by asking the framework ---------------------------------------------------------------------
_WEAK_DUMMY = {DType.bool: True, DType.i64: 1, DType.f64: 1.0}  # ones: integer division by a dummy must not fail


def weak_kind(v) -> DType:
    """The dtype a Python scalar (or a weak tensor) stands for: bool, i64 or f64."""
    if isinstance(v, TV):
        return DType.bool if v.dtype is DType.bool else DType.f64 if v.dtype.is_float else DType.i64
    if isinstance(v, (bool, np.bool_)):
        return DType.bool
    if isinstance(v, (int, SymExpr, np.integer)):
        return DType.i64
    if isinstance(v, (float, np.floating)):
        return DType.f64
    raise UnsupportedError(f"a {type(v).__name__} cannot be used as a number here")


def is_weak(v) -> bool:
    """Python numbers and weak tensors; NumPy scalars (np.float32(2)) are strong, as in NEP 50."""
    return v.weak if isinstance(v, TV) else not isinstance(v, np.generic)


def _dummy(v, mode: str):
    """An empty stand-in of the same kind: a Python scalar, a 0-d or a 1-d array (the rank class matters)."""
    if v is None:
        return None
    if is_weak(v):
        return _WEAK_DUMMY[weak_kind(v)]
    dtype, rank = (dtype_of_array(v.dtype), 0) if isinstance(v, np.generic) else (v.dtype, min(v.rank, 1))
    if mode == "torch":
        return torch_module().ones((1,) * rank, dtype=torch_dtype(dtype))
    return np.ones((1,) * rank, dtype.numpy)


def _namespace(mode: str):
    return torch_module() if mode == "torch" else np


_ALIASES = {"pow": "power", "power": "pow", "mul": "multiply", "multiply": "mul", "sub": "subtract",
            "subtract": "sub", "neg": "negative", "negative": "neg", "abs": "absolute", "clamp": "clip",
            "clip": "clamp", "amax": "max", "amin": "min", "remainder": "mod",
            "left_shift": "bitwise_left_shift", "right_shift": "bitwise_right_shift"}


def result_dtype(mode: str, fname: str, *operands) -> DType:
    """The dtype `<framework>.<fname>(*operands)` returns. All-weak operands follow Python (NumPy) rules; a
    function the namespace lacks (torch-only activations on Python numbers) keeps floats and makes ints float."""
    ns = np if all(is_weak(v) for v in operands) else _namespace(mode)
    fn = getattr(ns, fname, None) or getattr(ns, _ALIASES.get(fname, ""), None)
    if fn is None:
        d = common_dtype(mode, *operands)
        return d if d.is_float else DType.f32 if mode == "torch" else DType.f64
    try:
        with np.errstate(all="ignore"):
            out = fn(*[_dummy(v, mode) for v in operands])
    except Exception as e:  # the framework refuses these operands: so do we, with its reason
        kinds = ", ".join(str(v.dtype) if isinstance(v, TV) else type(v).__name__ for v in operands)
        raise UnsupportedError(f"{ns.__name__}.{fname} does not accept ({kinds}): {e}") from None
    return dtype_of_array(out.dtype if hasattr(out, "dtype") else np.asarray(out).dtype)


def common_dtype(mode: str, *operands) -> DType:
    """The dtype operands are compared or joined in (the framework's `result_type`)."""
    if all(is_weak(v) for v in operands):
        d = dtype_of_array(np.result_type(*[_dummy(v, "numpy") for v in operands]))
        return DType.f32 if mode == "torch" and d.is_float else d  # torch's default dtype for Python floats
    if mode != "torch":
        return dtype_of_array(np.result_type(*[_dummy(v, "numpy") for v in operands]))
    torch = torch_module()
    acc = _dummy(operands[0], mode)
    for v in operands[1:]:
        d = _dummy(v, mode)
        if isinstance(acc, (bool, int, float)) and isinstance(d, (bool, int, float)):
            acc = acc + d
            continue
        rank = max(getattr(x, "ndim", 0) for x in (acc, d))
        acc = torch.zeros((1,) * rank, dtype=torch.result_type(acc, d))
    return to_dtype(acc.dtype) if hasattr(acc, "dtype") else weak_kind(acc)
