"""ONNX element types, tensors read as NumPy arrays without copying, and `Tensor`: what the converter knows
about one ONNX value (its IR value, and its contents when they are known at conversion time)."""
from __future__ import annotations

import math
import os
import re

import numpy as np
from onnx import TensorProto, numpy_helper

from ...errors import SerializationError, UnsupportedError
from ...ir.dtypes import DType
from ...ir.types import TensorType
from . import snapshot
from .carriers import CARRIERS, to_carrier

# ONNX element type -> Cuvil element type. The others (strings, unsigned >8 bits, float8, 4-bit) have no IR type.
IR_DTYPES = {TensorProto.FLOAT: DType.f32, TensorProto.DOUBLE: DType.f64, TensorProto.FLOAT16: DType.f16,
             TensorProto.BFLOAT16: DType.bf16, TensorProto.INT64: DType.i64, TensorProto.INT32: DType.i32,
             TensorProto.INT16: DType.i16, TensorProto.INT8: DType.i8, TensorProto.UINT8: DType.u8,
             TensorProto.BOOL: DType.bool}
ONNX_DTYPES = {v: k for k, v in IR_DTYPES.items()}
# Fields that hold a tensor's elements when it has no raw_data, and how they map to the element type.
_TYPED_FIELDS = {TensorProto.FLOAT: "float_data", TensorProto.DOUBLE: "double_data", TensorProto.INT64: "int64_data",
                 TensorProto.INT32: "int32_data", TensorProto.INT16: "int32_data", TensorProto.INT8: "int32_data",
                 TensorProto.UINT8: "int32_data", TensorProto.BOOL: "int32_data", TensorProto.FLOAT16: "int32_data",
                 TensorProto.BFLOAT16: "int32_data"}
_BITS_AS_INT32 = {TensorProto.FLOAT16, TensorProto.BFLOAT16}  # int32_data holds their 16-bit patterns
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"<element type {elem_type}>"


def ir_dtype(elem_type: int, what: str = "a value") -> DType:
    """The IR element type that holds an ONNX one (its carrier for types the IR lacks), or UnsupportedError."""
    if elem_type in IR_DTYPES:
        return IR_DTYPES[elem_type]
    if elem_type in CARRIERS:
        return CARRIERS[elem_type].ir
    raise UnsupportedError(f"{what} has element type {type_name(elem_type)}, which Cuvil does not support")


def sanitize(name: str, fallback: str = "v") -> str:
    """An identifier made from an ONNX name (symbols, constant and value names must be identifiers)."""
    ident = _NOT_IDENT.sub("_", name) or fallback
    return ident if not ident[0].isdigit() else f"{fallback}_{ident}"


# -- tensors as arrays -------------------------------------------------------------------------------------
def tensor_to_array(t: TensorProto, base_dir: str | None = None) -> np.ndarray:
    """The elements of an initializer or Constant tensor. raw_data and external files are viewed, not copied
    (types the IR only carries are unpacked by ONNX's helper and converted)."""
    if t.data_type in CARRIERS:
        return to_carrier(numpy_helper.to_array(t), t.data_type)
    dtype = ir_dtype(t.data_type, f"tensor {t.name!r}").numpy.newbyteorder("<")
    shape = tuple(t.dims)
    if any(d < 0 for d in shape):
        raise SerializationError(f"tensor {t.name!r} has negative dims {list(shape)}")
    count = math.prod(shape)
    if t.data_location == TensorProto.EXTERNAL:
        return _external(t, base_dir, dtype, shape)
    if t.HasField("raw_data"):
        return _view(t.raw_data, dtype, shape, t.name)
    field = getattr(t, _TYPED_FIELDS[t.data_type])
    if len(field) != count:
        raise SerializationError(f"tensor {t.name!r} of shape {list(shape)} holds {len(field)} elements")
    if t.data_type in _BITS_AS_INT32:
        return np.asarray(field, np.uint16).view(dtype).reshape(shape)
    return np.asarray(field).astype(dtype).reshape(shape)


def _view(buf, dtype: np.dtype, shape: tuple, name: str) -> np.ndarray:
    want = math.prod(shape) * dtype.itemsize
    if len(buf) != want:
        raise SerializationError(f"tensor {name!r} of shape {list(shape)} needs {want} bytes, has {len(buf)}")
    return np.frombuffer(buf, dtype).reshape(shape)


def _external(t: TensorProto, base_dir: str | None, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """Memory-map the tensor's slice of its external data file (resolved next to the model, never outside), or of
    a private copy of that slice (see snapshot.py)."""
    info = {e.key: e.value for e in t.external_data}
    if base_dir is None:
        raise UnsupportedError(f"tensor {t.name!r} keeps its data in an external file; load the model from its path")
    location = info.get("location", "")
    path = os.path.realpath(os.path.join(base_dir, location))
    if not location or os.path.isabs(location) or os.path.commonpath([path, os.path.realpath(base_dir)]) != \
            os.path.realpath(base_dir):
        raise SerializationError(f"tensor {t.name!r} names the external file {location!r} outside the model's folder")
    try:
        offset, size = int(info.get("offset", 0)), os.path.getsize(path)
        length = int(info.get("length", math.prod(shape) * dtype.itemsize))
    except (OSError, ValueError) as e:
        raise SerializationError(f"tensor {t.name!r}: cannot read external data {location!r}: {e}") from None
    if offset < 0 or offset + length > size:
        raise SerializationError(f"tensor {t.name!r}: external data {location!r} is shorter than offset + length")
    if length == 0:
        return np.zeros(shape, dtype)
    if snapshot.KEY in info:  # a model file's own initializer, loaded without `mmap`: a private copy, mapped
        return _view(snapshot.copy(path, offset, length, info[snapshot.KEY], t.name), dtype, shape, t.name)
    return _view(np.memmap(path, np.uint8, "r", offset, (length,)), dtype, shape, t.name)


# -- the record of one ONNX value ----------------------------------------------------------------------------
class Tensor:
    """One ONNX value during conversion: an IR value, and/or its contents when known at conversion time.

    `known` holds constants and shape arithmetic; an object array holds ints and symbolic dims (a shape
    computed from an input's symbolic sizes). The IR value is made from `known` only when an op needs it.
    """

    __slots__ = ("value", "known", "elem", "name", "deps")

    def __init__(self, value=None, known=None, elem: int | None = None, name: str = "c", deps=frozenset()):
        self.value = value
        self.known = known
        self.elem = elem if elem is not None else ONNX_DTYPES[value.type.dtype]
        self.name = name  # a hint for the constant made from `known`
        self.deps = deps  # the graph inputs this value is computed from

    @property
    def dtype(self) -> DType:
        return ir_dtype(self.elem)

    @property
    def type(self) -> TensorType:
        return self.value.type if self.value is not None else TensorType(self.dtype, self.known.shape)

    @property
    def is_concrete(self) -> bool:
        """Known, with no symbolic element."""
        return self.known is not None and self.known.dtype != object

    @staticmethod
    def of_array(arr: np.ndarray, elem: int | None = None, name: str = "c") -> "Tensor":
        return Tensor(known=arr, elem=elem if elem is not None else ONNX_DTYPES[DType.from_numpy(arr.dtype)],
                      name=name)


class Sequence:
    """An ONNX sequence whose length is known at conversion time: a tuple of Tensors. `elem` is the element
    type (an empty sequence has no element to tell it)."""

    __slots__ = ("items", "elem")

    def __init__(self, items, elem: int):
        self.items, self.elem = tuple(items), elem

    def describe(self) -> str:
        return f"a sequence of {len(self.items)} tensors"


class Stacked:
    """A sequence whose length is known only at run time (grown by a Loop): its elements are the rows of one
    tensor of shape [length, *element shape]."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Tensor):
        self.tensor = tensor

    @property
    def elem(self) -> int:
        return self.tensor.elem

    def describe(self) -> str:
        return f"a sequence of run-time length {self.tensor.type.shape[0]}"


class Growing:
    """A sequence carried by a Loop that becomes a `while`, seen from inside the body: it can only be appended to.
    `row` is the element the body appended (None for the body's argument itself)."""

    __slots__ = ("elem", "source", "row")

    def __init__(self, elem: int, source=None, row=None):
        self.elem, self.source, self.row = elem, source, row

    def describe(self) -> str:
        return "a sequence grown by a Loop of run-time trip count"


class OptionalValue:
    """An ONNX optional whose presence is known at conversion time: `item` (a Tensor or Sequence) or None."""

    __slots__ = ("item", "type_proto")

    def __init__(self, item, type_proto=None):
        self.item, self.type_proto = item, type_proto  # type_proto: the element's ONNX type, for an absent one

    def describe(self) -> str:
        return "an absent optional" if self.item is None else "an optional"


def flatten_value(v) -> tuple:
    """(a layout entry, the Tensors) of a Tensor, Sequence, Stacked or OptionalValue: None for a tensor, ("seq",
    length, element type) for a sequence, ("stacked",) for a Stacked one, ("opt", False) for an absent optional,
    ("opt", inner entry) for a present one."""
    if isinstance(v, Tensor):
        return None, [v]
    if isinstance(v, Sequence):
        return ("seq", len(v.items), v.elem), list(v.items)
    if isinstance(v, Stacked):
        return ("stacked",), [v.tensor]
    if v.item is None:
        return ("opt", False), []
    inner, flat = flatten_value(v.item)
    return ("opt", inner), flat


def unflatten_value(entry, tensors):
    """The value `flatten_value` gave this entry for, rebuilt from an iterator of Tensors."""
    if entry is None:
        return next(tensors)
    if entry[0] == "seq":
        return Sequence([next(tensors) for _ in range(entry[1])], entry[2])
    if entry[0] == "stacked":
        return Stacked(next(tensors))
    return OptionalValue(None if entry[1] is False else unflatten_value(entry[1], tensors))


NOT_TENSORS = (Sequence, Stacked, Growing, OptionalValue)  # the records a converter may give besides tensors
