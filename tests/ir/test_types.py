import numpy as np
import pytest

from cuvil.ir import DType, TensorType, parse_type, sym


def test_print_and_parse():
    t = TensorType(DType.f32, (sym("batch"), 2 * sym("s0") + 1, 4))
    assert str(t) == "f32[batch,2*s0+1,4]"
    assert parse_type(str(t)) == t
    assert str(TensorType("bool", ())) == "bool[]" and parse_type("bool[]").rank == 0


@pytest.mark.parametrize("dtype", list(DType))
def test_every_dtype_prints(dtype):
    assert parse_type(f"{dtype.value}[2]").dtype is dtype


@pytest.mark.parametrize("name", ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8",
                                  "bool"])
def test_numpy_mapping_round_trips(name):
    assert DType.from_numpy(name).numpy == np.dtype(name)


def test_bfloat16_maps_through_ml_dtypes():
    import ml_dtypes

    assert DType.bf16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert DType.from_numpy(ml_dtypes.bfloat16) is DType.bf16


def test_invalid_types_are_rejected():
    with pytest.raises(ValueError):
        TensorType(DType.f32, (-1,))
    with pytest.raises(ValueError):
        parse_type("f33[2]")
    with pytest.raises(TypeError):
        DType.from_numpy("U3")


def test_complex_types_map_to_numpy_and_parse():
    assert DType.from_numpy("complex64") is DType.c64 and DType.c128.numpy == np.complex128
    assert DType.c64.is_complex and not DType.c64.is_float and DType.c128.real is DType.f64
    assert parse_type("c64[2,3]") == TensorType(DType.c64, (2, 3)) and DType.c64.itemsize == 8


def test_numel_is_symbolic():
    n = sym("n")
    assert TensorType(DType.f32, (n, 4)).numel == 4 * n
    assert TensorType(DType.f32, (3, 4)).static_nbytes() == 48
