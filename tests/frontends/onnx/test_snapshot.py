"""`load_onnx(path)` without `mmap`: a model file's large initializers are mapped from private, unlinked copies in
the cache folder (snapshot.py): no second copy in memory to load or compile, the copies freed with the model, a
rewrite of the model file refused rather than read, and reading into memory where no copy can be written. After
the compile the model still exports, prints its IR and runs at a second input size."""
from __future__ import annotations

import gc
import mmap
import os
import tracemalloc

import numpy as np
import onnx
import pytest

import cuvil
from cuvil.frontends.onnx import loader, mapped, snapshot

from .helpers import F32, helper, model, rand

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the mappings through /proc")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "0")
    return tmp_path / "cache"


def _owner(arr):
    while isinstance(arr, np.ndarray) and arr.base is not None:
        arr = arr.base
    return arr


def _copies_mapped(cache) -> int:
    """How many of this process's mappings are copies of weights (unlinked files of the cache's weights folder)."""
    folder = os.path.realpath(cache / "weights")
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if folder in line)


def _matmul_file(path, w: np.ndarray, batch="n") -> None:
    onnx.save(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, [batch, w.shape[0]])],
                    [("y", F32, [batch, w.shape[1]])], [("w", w)]), path)


def test_large_initializers_are_mapped_from_a_private_copy_and_freed_with_the_model(cache, tmp_path):
    w, small = rand(256, 64, seed=1), rand(4, 4, seed=2)  # 64 KiB: copied; 64 bytes: stays in the message
    onnx.save(model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "h"], ["y"])],
                    [("x", F32, [3, 256])], [("y", F32, [3, 64])], [("w", w), ("s", small)]), tmp_path / "m.onnx")
    m = cuvil.load_onnx(tmp_path / "m.onnx")
    got = m.weights["w"]
    np.testing.assert_array_equal(got, w)
    assert isinstance(_owner(got), (np.memmap, mmap.mmap)) and not got.flags.writeable
    assert _copies_mapped(cache) == 1
    x = rand(3, 256, seed=3)
    np.testing.assert_allclose(m.optimize()(x)[0], 2 * (x @ w), rtol=1e-5, atol=1e-4)
    del m, got
    gc.collect()
    assert _copies_mapped(cache) == 0


def test_loading_allocates_no_copy_of_the_weights(cache, tmp_path):
    w = rand(1024, 2048, seed=4)  # 8 MiB
    _matmul_file(tmp_path / "m.onnx", w)
    tracemalloc.start()
    try:
        m = cuvil.load_onnx(tmp_path / "m.onnx")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < w.nbytes / 8, f"loading allocated {peak / 2**20:.1f} MiB for {w.nbytes / 2**20:.0f} MiB of weights"
    x = rand(2, 1024, seed=5)
    np.testing.assert_allclose(m(x)[0], x @ w, rtol=1e-5, atol=1e-4)


def test_a_conversion_after_the_file_changed_is_refused(cache, tmp_path):
    """A later conversion (a new input size, a value-specialized graph) copies again: from a rewritten file that
    would be other weights than the model's, so it is an error, not a silent mix."""
    path = tmp_path / "m.onnx"
    _matmul_file(path, rand(64, 64, seed=6))
    proto, base = loader.read_model(path)
    _matmul_file(path, rand(64, 64, seed=7))
    with pytest.raises(cuvil.SerializationError, match="changed since it was read"):
        loader.load_proto(proto, base)


def test_without_a_writable_cache_folder_the_weights_are_read_into_memory(cache, tmp_path, monkeypatch):
    w = rand(128, 64, seed=8)
    _matmul_file(tmp_path / "m.onnx", w)
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(snapshot, "_folder", lambda: tmp_path / "file" / "weights")  # mkdir under a file fails
    got = cuvil.load_onnx(tmp_path / "m.onnx").weights["w"]
    np.testing.assert_array_equal(got, w)
    assert not isinstance(_owner(got), (np.memmap, mmap.mmap)) and not got.flags.writeable


def test_the_copy_without_copy_file_range(cache, tmp_path, monkeypatch):
    w = rand(4 * mapped.INLINE_BYTES, seed=9)
    onnx.save(model([helper.make_node("Identity", ["w"], ["y"])], [], [("y", F32, list(w.shape))], [("w", w)]),
              tmp_path / "m.onnx")
    monkeypatch.setattr(snapshot, "_CHUNK", 4096)  # several chunks
    monkeypatch.delattr(os, "copy_file_range", raising=False)
    got = cuvil.load_onnx(tmp_path / "m.onnx").weights["w"]
    assert isinstance(_owner(got), (np.memmap, mmap.mmap))
    np.testing.assert_array_equal(got, w)


def test_a_compiled_model_exports_prints_and_runs_at_a_second_size(cache, tmp_path):
    w = rand(512, 256, seed=10)  # packed for the GEMM: its pages leave the resident set
    _matmul_file(tmp_path / "m.onnx", w)
    compiled = cuvil.load_onnx(tmp_path / "m.onnx").optimize()
    for n in (3, 17):
        x = rand(n, 512, seed=n)
        np.testing.assert_allclose(compiled(x)[0], x @ w, rtol=1e-4, atol=1e-4)
    assert "matmul" in cuvil.inspect_ir(compiled)
    cuvil.export(compiled, tmp_path / "m.cuv")
    x = rand(5, 512, seed=11)
    np.testing.assert_array_equal(cuvil.load(tmp_path / "m.cuv")(x), compiled(x)[0])  # one output: the array
