"""Element types of the IR and their NumPy counterparts."""
from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """An element type. The value is the short name used in the text form (`f32[4,4]`)."""

    f64 = "f64"
    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    i64 = "i64"
    i32 = "i32"
    i16 = "i16"
    i8 = "i8"
    u8 = "u8"
    bool = "bool"
    c64 = "c64"  # complex: interleaved (re, im) pairs of f32, as NumPy and C99's float _Complex store them
    c128 = "c128"
    # Packed 4-bit types are reserved names: no op accepts them yet.
    i4 = "i4"
    u4 = "u4"

    def __repr__(self) -> str:
        return f"DType.{self.value}"

    def __str__(self) -> str:
        return self.value

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_complex(self) -> bool:
        return self in (DType.c64, DType.c128)

    @property
    def real(self) -> "DType":
        """The type of a complex type's parts (the type itself for the others)."""
        return {DType.c64: DType.f32, DType.c128: DType.f64}.get(self, self)

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_signed(self) -> bool:
        return self in _FLOATS or self in (DType.i64, DType.i32, DType.i16, DType.i8, DType.i4)

    @property
    def itemsize(self) -> int:
        return 1 if self in (DType.i4, DType.u4) else self.numpy.itemsize

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype that holds values of this type (bf16 through ml_dtypes, loaded on first use)."""
        if self is DType.bf16:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        if self in (DType.i4, DType.u4):
            raise TypeError(f"{self} is a packed type with no NumPy equivalent yet")
        return np.dtype(_TO_NUMPY[self])

    @staticmethod
    def from_numpy(dtype) -> "DType":
        dt = np.dtype(dtype)
        if dt.name == "bfloat16":
            return DType.bf16
        try:
            return _FROM_NUMPY[dt.name]
        except KeyError:
            raise TypeError(f"cuvil has no element type for NumPy dtype {dt}") from None


_FLOATS = frozenset({DType.f64, DType.f32, DType.f16, DType.bf16})
_INTS = frozenset({DType.i64, DType.i32, DType.i16, DType.i8, DType.u8, DType.i4, DType.u4})
_TO_NUMPY = {DType.f64: "float64", DType.f32: "float32", DType.f16: "float16", DType.i64: "int64",
             DType.i32: "int32", DType.i16: "int16", DType.i8: "int8", DType.u8: "uint8", DType.bool: "bool",
             DType.c64: "complex64", DType.c128: "complex128"}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
