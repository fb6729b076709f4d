import mmap
import os
import random
import struct

import numpy as np
import pytest

from cuvil.errors import SerializationError
from cuvil.ir import Builder, DType, Location, Module, TensorType, serialize, sym
from cuvil.ir.fingerprint import fingerprint
from cuvil.ir.printer import print_module
from cuvil.ir.serialize import from_bytes, load, save, to_bytes

from .programs import control_flow_program

SHAPES = [(), (0, 3), (2, 3), (5, 7)]  # 0-d, empty, inline (6 elements), in the table (35 elements)


def _random_constant(rng, dtype: DType, shape) -> np.ndarray:
    """Random bit patterns (NaN payloads, -0.0, infinities included), except bool, which must be 0 or 1."""
    size = int(np.prod(shape))
    if dtype is DType.bool:
        return rng.integers(0, 2, size).astype(bool).reshape(shape)
    raw = rng.integers(0, 256, size * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype.numpy).reshape(shape)


def many_dtypes_program() -> Module:
    """Every NumPy-backed dtype in every size class, symbolic dims with a relation, all kinds of location."""
    m = Module()
    m.metadata.update({"producer": "test", "model": "ünïcode \"quoted\""})
    n, k = sym("n"), sym("k")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 4)), TensorType("f32", (k, 4)),
                                         TensorType("bf16", (2 * n + 1,))], ["x", "y", "z"])
    x, y, z = b.args
    outs = [b.add(x, y, loc=Location("model.py", 3)), b.neg(z, loc=Location("model.py", 4, 2))]  # n == k
    rng = np.random.default_rng(0)
    for dtype in DType:
        if dtype in (DType.i4, DType.u4):
            continue
        for i, shape in enumerate(SHAPES):
            arr = _random_constant(rng, dtype, shape)
            outs.append(b.constant(arr, f"c_{dtype}_{i}", loc=Location(node=f"onnx:Const_{dtype}_{i}")))
    outs.append(b.constant(np.asfortranarray(np.arange(60, dtype=np.int16).reshape(6, 10)), "fortran"))
    b.ret(*outs)
    h = Builder.new_function(m, "helper", [TensorType("i32", (sym("m"),))], ["v"])
    h.ret(h.abs(h.args[0]))
    return m


def fuzz_program() -> Module:
    """Small, with table constants whose padding the fuzzer can hit."""
    m = control_flow_program()
    b = Builder(m, m.main)
    m.main.body.ops.pop()  # drop the return and give it more results
    w, acc = m.main.body.ops[0].result, m.main.body.ops[-1].results[1]
    b.ret(acc, w, b.constant(np.arange(20, dtype=np.float32), "big"), b.constant(np.ones(30, bool), "flags"))
    m.metadata["name"] = "fuzz"
    return m


def assert_same(a: Module, b: Module) -> None:
    assert print_module(a) == print_module(b)
    assert fingerprint(a) == fingerprint(b)
    assert a.metadata == b.metadata
    assert list(a.constants) == list(b.constants)
    for name, x in a.constants.items():
        y = b.constants[name]
        assert (x.dtype, x.shape) == (y.dtype, y.shape), name
        assert np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes(), name


def _mapping_of(arr):
    """The mmap an array's memory belongs to, following `.base` and memoryview `.obj`."""
    obj = arr
    while obj is not None and not isinstance(obj, mmap.mmap):
        obj = obj.base if isinstance(obj, np.ndarray) else getattr(obj, "obj", None)
    return obj


PROGRAMS = [control_flow_program, many_dtypes_program, fuzz_program, Module]


@pytest.mark.parametrize("program", PROGRAMS)
def test_bytes_round_trip_is_exact(program):
    m = program()
    data = to_bytes(m)
    again = from_bytes(data)
    assert_same(m, again)
    assert to_bytes(again) == data


@pytest.mark.parametrize("use_mmap", [True, False])
@pytest.mark.parametrize("program", PROGRAMS)
def test_file_round_trip_is_exact(tmp_path, program, use_mmap):
    m = program()
    save(m, tmp_path / "m.cvir")
    assert_same(m, load(tmp_path / "m.cvir", mmap=use_mmap))
    assert os.listdir(tmp_path) == ["m.cvir"]


def test_round_trip_keeps_relations_dtypes_and_locations():
    again = from_bytes(to_bytes(many_dtypes_program()))
    assert again.main.constraints and "where [" in print_module(again)
    assert again.constants["c_bf16_3"].dtype == DType.bf16.numpy
    assert again.constants["c_bool_3"].dtype == np.bool_ and again.constants["c_f64_0"].shape == ()
    assert again.constants["c_u8_1"].shape == (0, 3)
    locs = {op.loc for op in again.main.walk()}
    assert {Location("model.py", 3), Location("model.py", 4, 2), Location(node="onnx:Const_i8_2")} <= locs


def test_mmap_constants_are_read_only_views_of_the_aligned_file(tmp_path):
    m = many_dtypes_program()
    path = tmp_path / "m.cvir"
    save(m, path)
    file_bytes = path.read_bytes()
    again = load(path)
    large = {name: a for name, a in again.constants.items() if a.size > 8}
    assert len(large) >= 8
    mappings = {id(_mapping_of(a)) for a in large.values()}
    assert len(mappings) == 1 and None not in {_mapping_of(a) for a in large.values()}
    start = np.frombuffer(_mapping_of(next(iter(large.values()))), np.uint8).ctypes.data
    for name, a in large.items():
        assert not a.flags.writeable, name
        offset = a.ctypes.data - start
        assert offset % 64 == 0, name
        assert file_bytes[offset:offset + a.nbytes] == np.ascontiguousarray(m.constants[name]).tobytes(), name
        with pytest.raises(ValueError):
            a.reshape(-1)[0] = a.reshape(-1)[1]
    assert _mapping_of(again.constants["c_f32_0"]) is None  # small constants are parsed from the text


def test_bytes_loaded_constants_are_read_only_too():
    again = from_bytes(bytearray(to_bytes(many_dtypes_program())))
    assert not any(a.flags.writeable for a in again.constants.values() if a.nbytes > 64)


def test_saving_over_a_mapped_file_leaves_the_mapped_module_intact(tmp_path):
    path = tmp_path / "m.cvir"
    save(control_flow_program(0), path)
    first = load(path)
    before = first.constants["w"].copy()
    save(control_flow_program(1), path)
    assert np.array_equal(first.constants["w"], before)
    assert not np.array_equal(load(path).constants["w"], before)


def test_failed_save_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "m.cvir"
    save(control_flow_program(), path)
    old = path.read_bytes()

    def half_written(module):
        yield old[: len(old) // 2]
        raise OSError("disk full")

    monkeypatch.setattr(serialize, "_chunks", half_written)
    with pytest.raises(OSError, match="disk full"):
        save(fuzz_program(), path)
    assert path.read_bytes() == old and os.listdir(tmp_path) == ["m.cvir"]
    monkeypatch.undo()
    assert_same(load(path), control_flow_program())


@pytest.mark.parametrize("data, message", [
    (b"", "not a Cuvil IR file"),
    (b"PK\x03\x04 a zip file, not ours", "not a Cuvil IR file"),
    (print_module(control_flow_program()).encode(), "not a Cuvil IR file"),
    (b"CUVILIR\0\x01\0", "truncated"),
    (bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8)), "not a Cuvil IR file"),
])
def test_foreign_and_tiny_inputs_are_rejected(data, message):
    with pytest.raises(SerializationError, match=message):
        from_bytes(data)


def _patched(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new):]


def test_errors_name_the_problem(tmp_path):
    data = to_bytes(fuzz_program())
    meta_len, body_len = struct.unpack_from("<QQ", data, 16)
    body_at, data_at = 64 + meta_len, data.index(np.arange(20, dtype=np.float32).tobytes())
    cases = [
        (_patched(data, 8, struct.pack("<I", 2)), "format version 2 is newer.*upgrade cuvil"),
        (_patched(data, 8, struct.pack("<I", 0)), "unknown format version 0"),
        (_patched(data, 12, b"\x01"), "header is corrupted"),
        (data[:-1], r"truncated: \d+ of \d+ bytes"),
        (data + b"\0", "1 unexpected bytes after the end"),
        (_patched(data, 64, b"\xff"), "metadata section is corrupted"),
        (_patched(data, body_at + body_len // 2, b"\xff"), "body section is corrupted"),
        (_patched(data, data_at + 4, b"\xff"), "constant @big is corrupted"),
    ]
    for bad, message in cases:
        with pytest.raises(SerializationError, match=message):
            from_bytes(bad)
    (tmp_path / "bad.cvir").write_bytes(data[:100])
    with pytest.raises(SerializationError, match="truncated") as e:
        load(tmp_path / "bad.cvir")
    assert str(tmp_path / "bad.cvir") in str(e.value)


def test_text_from_an_incompatible_cuvil_is_an_error(monkeypatch):
    monkeypatch.setattr(serialize, "_text", lambda m: "module {\n  func @main() -> () {\n    frobnicate\n  }\n}\n")
    with pytest.raises(SerializationError, match="does not parse.*unknown op"):
        from_bytes(to_bytes(Module()))


def _check_mutation(m: Module, bad: bytes) -> str:
    """'error' or 'same'; anything else (another exception, a different module) fails the test."""
    try:
        again = from_bytes(bad)
    except SerializationError:
        return "error"
    assert_same(m, again)
    return "same"


def test_fuzz_truncations_and_bit_flips():
    m = fuzz_program()
    data = to_bytes(m)
    for n in range(len(data)):
        assert _check_mutation(m, data[:n]) == "error", n
    rng = random.Random(1234)
    outcomes = []
    for _ in range(400):
        bad = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 3])):
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        outcomes.append(_check_mutation(m, bytes(bad)))
    assert outcomes.count("error") > 300
