"""A model file's initializers mapped from the file with `mmap=True`, not copied (mapped.py), and copied without it
(a model that survives its file's rewrite; snapshot.py): every element type, raw and typed data,
against onnx.numpy_helper; the memory a load takes; files the walk does not read (links, corrupt files); quantized
models whose fused weights are read from the map."""
from __future__ import annotations

import mmap
import os
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

import cuvil
from cuvil.frontends.onnx import mapped
from cuvil.frontends.onnx.tensors import IR_DTYPES

from .helpers import F32, helper, model, rand

BIG = 2 * mapped.INLINE_BYTES  # elements: past the inline size for every element type


def _owner(arr):
    while isinstance(arr, np.ndarray) and arr.base is not None:
        arr = arr.base
    return arr


def _values(elem: int, n: int) -> np.ndarray:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    if elem == TensorProto.BOOL:
        return np.arange(n) % 3 == 0
    if elem == TensorProto.BFLOAT16:
        return (np.arange(n, dtype=np.uint32) * 977 % 65536).astype(np.uint16)
    if np.issubdtype(dtype, np.integer):
        spread = (np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64).astype(dtype)
        spread[:2] = np.iinfo(dtype).min, np.iinfo(dtype).max
        return spread
    return (np.linspace(-3, 3, n) ** 3).astype(dtype)


def _tensor(elem: int, name: str, n: int, raw: bool) -> TensorProto:
    """An initializer of `n` elements, in raw_data or in its typed field (as numpy_helper and make_tensor write)."""
    values = _values(elem, n)
    if raw and elem != TensorProto.BFLOAT16:
        return numpy_helper.from_array(values, name)
    if elem == TensorProto.BFLOAT16:  # bit patterns
        t = onnx.helper.make_tensor(name, elem, [n], values.tobytes(), raw=True)
        if not raw:
            t.ClearField("raw_data")
            t.int32_data.extend(values.astype(np.int32).tolist())
        return t
    return onnx.helper.make_tensor(name, elem, [n], values.tolist())


def _identity_model(tensors: list) -> onnx.ModelProto:
    """A graph whose outputs are its initializers (each through an Identity)."""
    nodes = [helper.make_node("Identity", [t.name], [f"{t.name}_out"]) for t in tensors]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(f"{t.name}_out", t.data_type, list(t.dims))
                                               for t in tensors], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed"])
def test_every_element_type_reads_as_numpy_helper_reads_it(tmp_path, raw):
    tensors = [_tensor(elem, f"t{elem}_{n}", n, raw) for elem in IR_DTYPES for n in (3, BIG)]
    proto = _identity_model(tensors)
    onnx.save(proto, tmp_path / "m.onnx")
    weights = cuvil.load_onnx(tmp_path / "m.onnx", mmap=True).weights
    for t in tensors:
        want, got = numpy_helper.to_array(t), weights[t.name]
        if t.data_type == TensorProto.BFLOAT16:  # numpy_helper widens bfloat16 to float32
            want = want.astype(np.float32)
            got = np.asarray(got).view(np.uint16).astype(np.uint32) << 16
            got = got.view(np.float32)
        np.testing.assert_array_equal(got, want, err_msg=t.name)
        assert got.shape == want.shape, t.name
        mapped_from_file = isinstance(_owner(weights[t.name]), (np.memmap, mmap.mmap))
        assert mapped_from_file == (raw and t.dims[0] == BIG), t.name


def test_a_models_large_initializers_take_no_second_copy_to_load(tmp_path):
    w = rand(1024, 2048, seed=3)  # 8 MiB
    proto = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, [2, 1024])], [("y", F32, [2, 2048])],
                  [("w", w)])
    onnx.save(proto, tmp_path / "m.onnx")
    tracemalloc.start()
    try:
        m = cuvil.load_onnx(tmp_path / "m.onnx", mmap=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < w.nbytes / 8, f"loading allocated {peak / 2**20:.1f} MiB for {w.nbytes / 2**20:.0f} MiB of weights"
    assert isinstance(_owner(m.weights["w"]), (np.memmap, mmap.mmap))
    x = rand(2, 1024, seed=4)
    np.testing.assert_allclose(m(x)[0], x @ w, rtol=1e-5, atol=1e-4)


def test_raw_data_and_external_files_in_one_model(tmp_path):
    a, b = rand(64, 64, seed=5), rand(64, 64, seed=6)
    proto = model([helper.make_node("MatMul", ["x", "a"], ["h"]), helper.make_node("MatMul", ["h", "b"], ["y"])],
                  [("x", F32, [3, 64])], [("y", F32, [3, 64])], [("a", a), ("b", b)])
    onnx.save(proto, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0,
              convert_attribute=False)
    saved = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    inline = saved.graph.initializer[1]  # b back into the file itself, as raw_data
    inline.ClearField("external_data")
    inline.data_location = TensorProto.DEFAULT
    inline.raw_data = b.tobytes()
    onnx.save(saved, tmp_path / "m.onnx")
    x = rand(3, 64, seed=7)
    np.testing.assert_allclose(cuvil.load_onnx(tmp_path / "m.onnx", mmap=True)(x)[0], x @ a @ b, rtol=1e-5, atol=1e-5)


def test_a_model_linked_from_another_folder_loads_as_it_is(tmp_path):
    w = rand(64, 64, seed=8)
    proto = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, [1, 64])], [("y", F32, [1, 64])],
                  [("w", w)])
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    onnx.save(proto, tmp_path / "real" / "m.onnx")
    os.symlink(tmp_path / "real" / "m.onnx", tmp_path / "links" / "m.onnx")
    x = rand(1, 64, seed=9)
    got = cuvil.load_onnx(tmp_path / "links" / "m.onnx", mmap=True)(x)[0]
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_a_truncated_file_is_a_serialization_error(tmp_path, cut):
    proto = model([helper.make_node("Identity", ["w"], ["y"])], [], [("y", F32, [4096])], [("w", rand(4096))])
    data = proto.SerializeToString()
    (tmp_path / "m.onnx").write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(cuvil.SerializationError):
        cuvil.load_onnx(tmp_path / "m.onnx", mmap=True)


def test_a_file_that_is_not_protobuf_is_a_serialization_error(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"\x0b\xff" * 100)  # wire type 3 (a group) and garbage
    with pytest.raises(cuvil.SerializationError):
        cuvil.load_onnx(tmp_path / "m.onnx", mmap=True)


def test_dynamically_quantized_weights_are_read_from_the_map(tmp_path):
    quantization = pytest.importorskip("onnxruntime.quantization")
    w = rand(128, 64, seed=10)
    proto = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, [5, 128])], [("y", F32, [5, 64])],
                  [("w", w)])
    onnx.save(proto, tmp_path / "fp32.onnx")
    quantization.quantize_dynamic(str(tmp_path / "fp32.onnx"), str(tmp_path / "q.onnx"),
                                  weight_type=quantization.QuantType.QInt8)
    from_file = cuvil.load_onnx(tmp_path / "q.onnx", mmap=True)
    from_proto = cuvil.load_onnx(onnx.load(tmp_path / "q.onnx"))
    assert "qlinear_i8" in {op.name for op in from_file.module.main.walk()}
    x = rand(5, 128, seed=11)
    np.testing.assert_array_equal(from_file(x)[0], from_proto(x)[0])


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="resets the peak through /proc (Linux)")
@pytest.mark.parametrize("cached", ["0", "1"], ids=["uncached", "cold-cache"])
@pytest.mark.parametrize("mmap", [True, False], ids=["mapped", "copied"])
def test_compiling_a_model_file_holds_its_weights_about_once(tmp_path, monkeypatch, cached, mmap):
    """A mapped weight's pages leave the resident set once it is packed and fingerprinted: the peak is the packed
    copies and one weight in packing, not the packed copies and the mapped originals (2x). Mapped from the model
    file (`mmap=True`) or from a private copy of it (the default, snapshot.py)."""
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", cached)
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    ws = [rand(2048, 512, seed=20 + k) for k in range(8)]  # 32 MiB in eight weights: each packed in turn
    nodes = [helper.make_node("MatMul", ["x", f"w{k}"], [f"y{k}"]) for k in range(8)]
    onnx.save(model(nodes, [("x", F32, [8, 2048])], [(f"y{k}", F32, [8, 512]) for k in range(8)],
                    [(f"w{k}", w) for k, w in enumerate(ws)]), tmp_path / "m.onnx")
    x = rand(8, 2048, seed=13)
    want = [x @ w for w in ws]
    small = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, [8, 64])], [("y", F32, [8, 64])],
                  [("w", rand(64, 64))])
    cuvil.load_onnx(small).optimize()(x[:, :64])  # the kernel library and call path loaded before the measure
    del ws
    base = _status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    compiled = cuvil.load_onnx(tmp_path / "m.onnx", mmap=mmap).optimize()
    peak = _status_mb("VmHWM") - base
    assert peak < 1.5 * 32, f"the compile's peak added {peak:.0f} MiB for 32 MiB of weights"
    for got, expected in zip(compiled(x), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_a_mapped_initializer_of_the_wrong_size_is_named(tmp_path):
    proto = model([helper.make_node("Identity", ["w"], ["y"])], [], [("y", F32, [4096])], [("w", rand(4096))])
    proto.graph.initializer[0].raw_data = rand(4095).tobytes()  # one element short
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(cuvil.SerializationError, match="'w'.*16384 bytes, has 16380"):
        cuvil.load_onnx(tmp_path / "m.onnx", mmap=True)


_REWRITTEN = """
import sys, numpy as np, onnx, cuvil
path, x = sys.argv[1], np.ones((3, 64), np.float32)
m = cuvil.load_onnx(path)
compiled = m.optimize()
want, want_compiled = m(x)[0], compiled(x)[0]
open(path, "wb").close()  # rewritten in place: onnx.save truncates the file it writes to
np.testing.assert_array_equal(m(x)[0], want)
np.testing.assert_array_equal(compiled(x)[0], want_compiled)
print("ok")
"""


@pytest.mark.parametrize("cached", ["0", "1"], ids=["uncached", "cached"])
def test_a_model_loaded_by_default_survives_its_file_rewritten_in_place(tmp_path, cached):
    """Without `mmap` nothing of the model reads its file after the load: truncating it (as `onnx.save` to the same
    path does) kills no process with SIGBUS and changes no result, for the model and for its compiled form."""
    import subprocess
    import sys

    path = tmp_path / "m.onnx"
    onnx.save(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, [3, 64])], [("y", F32, [3, 64])],
                    [("w", rand(64, 64))]), path)
    env = {**os.environ, "CUVIL_ARTIFACT_CACHE": cached, "CUVIL_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", _REWRITTEN, str(path)], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(cuvil.__file__)), timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])
