"""The artifact cache (cuvil/cache): a warm compile loads the saved library without the frontend or the passes,
keys change with the model, entries publish atomically, concurrent writers are safe, corrupt entries are rebuilt."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import cuvil
from cuvil.cache import keys, store
from cuvil.frontends.onnx_cache import CompiledOnnxModel, LazyOnnxModel
from cuvil.runtime import container, host

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from .runtime.models import winograd_conv_onnx  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def compiled_code(tmp_path_factory):
    """The C compiler's cache, shared by this file's tests (each has its own artifact cache)."""
    return tmp_path_factory.mktemp("cpu")


@pytest.fixture
def cache(tmp_path, monkeypatch, compiled_code):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "cpu").symlink_to(compiled_code)
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "1")
    return tmp_path / "cache"


def _onnx_file(folder, seed: int = 0):
    w = np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                              [numpy_helper.from_array(w, "w")])
    path = folder / f"mlp{seed}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, w


def _entries(cache) -> list:
    return sorted((cache / "artifacts").glob("*.cuv"))


def test_onnx_warm_start_runs_no_frontend_and_no_pass(cache, tmp_path, monkeypatch):
    path, w = _onnx_file(tmp_path)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    cold = cuvil.load_onnx(path).optimize()
    assert cold.executable.cache == "miss" and len(_entries(cache)) == 1
    from cuvil.frontends.onnx import loader
    from cuvil.passes import manager

    def fail(*args, **kwargs):
        raise AssertionError("a warm start converted or optimised the model")

    monkeypatch.setattr(loader, "convert_model", fail)
    monkeypatch.setattr(manager.PassManager, "run", fail)
    lazy = cuvil.load_onnx(str(path))
    assert isinstance(lazy, LazyOnnxModel)
    warm = lazy.optimize()
    assert isinstance(warm, CompiledOnnxModel) and warm.executable.cache == "hit"
    np.testing.assert_array_equal(warm(x)[0], cold(x)[0])
    np.testing.assert_allclose(warm(x=x)[0], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
    assert cuvil.inspect_ir(warm) == cuvil.inspect_ir(cold)  # the optimised IR, parsed on demand
    assert [str(s) for s in warm.inputs] == [str(s) for s in cold.inputs]
    with pytest.raises(cuvil.ShapeError, match="shape"):
        warm(np.ones((5, 3), np.float32))


def test_a_warm_model_serves_sizes_its_symbolic_relations_refuse(cache, tmp_path):
    """x[:, :8] of a dynamic T compiles with T >= 8; a warm start converts shorter inputs for their sizes."""
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.int64([v]), n) for n, v in (("s", 0), ("e", 8), ("a", 1))])
    path = tmp_path / "truncate.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    cold = cuvil.load_onnx(path).optimize()
    warm = cuvil.load_onnx(path).optimize()
    assert isinstance(warm, CompiledOnnxModel)
    for m in (cold, warm):
        np.testing.assert_array_equal(m(x)[0], x)
        np.testing.assert_array_equal(m(np.ones((1, 9), np.float32))[0], np.ones((1, 8), np.float32))


def test_the_key_follows_the_model_bytes_and_options(cache, tmp_path):
    path, _ = _onnx_file(tmp_path, seed=0)
    cuvil.load_onnx(path).optimize()
    assert cuvil.load_onnx(path).optimize(enable_fuse=False).executable.cache == "miss"
    other, w = _onnx_file(tmp_path, seed=2)
    os.replace(other, path)  # new contents under the same name: the stat changes, so the file is read again
    x = np.ones((2, 4), np.float32)
    fresh = cuvil.load_onnx(path).optimize()
    assert fresh.executable.cache == "miss"
    np.testing.assert_allclose(fresh(x)[0], np.maximum(x @ w, 0), rtol=1e-6)


def test_the_key_follows_every_piece_of_a_tensor():
    """The torch key hashes parameters in 1 MiB pieces on several threads: a byte changed in the short last piece
    of a multi-piece weight, or two weights' bytes swapped, is another key (docs/reliability.md)."""
    torch = pytest.importorskip("torch")
    from cuvil.frontends.torch.cache_key import module_key

    model = torch.nn.Sequential(torch.nn.Linear(700, 1000), torch.nn.Linear(1000, 700))  # 2.8 MB: 3 pieces each
    x = torch.randn(2, 700)
    base = module_key(model, (x,), {})
    assert module_key(model, (x,), {}) == base
    with torch.no_grad():
        w = model[0].weight.view(-1)
        was = w[-1].item()
        w[-1] = was + 1.0
        changed = module_key(model, (x,), {})
        w[-1] = was
        assert module_key(model, (x,), {}) == base and changed != base
        a, b = model[0].weight.clone(), model[1].weight.clone()
        model[0].weight.copy_(b.reshape(a.shape))
        model[1].weight.copy_(a.reshape(b.shape))
    assert module_key(model, (x,), {}) not in (base, changed)


def test_torch_warm_start_runs_no_export(cache, monkeypatch):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    x = torch.randn(2, 4)
    cold = cuvil.compile(model, (x,))
    assert cold.executable.cache == "miss"
    from cuvil.frontends.torch import exporter

    monkeypatch.setattr(exporter, "export_program", lambda *a, **k: pytest.fail("a warm start ran torch.export"))
    warm = cuvil.compile(model, (x,))
    assert warm.executable.cache == "hit"
    torch.testing.assert_close(warm(x), model(x))
    with torch.no_grad():
        model[0].weight[0, 0] += 1  # other weights: another key
    monkeypatch.undo()
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(cache))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "1")
    changed = cuvil.compile(model, (x,))
    assert changed.executable.cache == "miss"
    torch.testing.assert_close(changed(x), model(x))


@pytest.mark.parametrize("write", ["numpy", "data"])
def test_a_weight_written_past_torch_version_counter_is_a_miss(cache, write):
    """Writes through a NumPy view or `.data` leave `Tensor._version` as it was, so neither a version nor a storage
    pointer witnesses the weights: the key reads every byte, and one changed element is another key."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    x = torch.randn(2, 4)
    assert cuvil.compile(model, (x,)).executable.cache == "miss"
    assert cuvil.compile(model, (x,)).executable.cache == "hit"
    version = model[0].weight._version
    if write == "numpy":
        model[0].weight.detach().numpy()[1, 2] += 1.0
    else:
        model[0].weight.data[1, 2] += 1.0
    assert model[0].weight._version == version
    changed = cuvil.compile(model, (x,))
    assert changed.executable.cache == "miss"
    torch.testing.assert_close(changed(x), model(x))


def test_modules_without_a_stable_key_are_compiled_uncached(cache):
    torch = pytest.importorskip("torch")
    from cuvil.frontends.torch.cache_key import module_key

    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    model.hook = lambda t: t  # its text names an address: no key rather than a wrong hit
    x = torch.randn(2, 4)
    assert module_key(model, (x,), {}) is None
    assert cuvil.compile(model, (x,)).executable.cache is None
    assert module_key(torch.nn.Linear(4, 3), (x,), {}) != module_key(torch.nn.Linear(4, 3), (x,), {})


def test_forward_defaults_and_closures_are_in_the_key(cache):
    """One class source made in a loop with other values bound to `forward` is another program, not a hit."""
    torch = pytest.importorskip("torch")

    def scaled(factor, by_default):
        class Scale(torch.nn.Module):
            if by_default:
                def forward(self, x, factor=factor):
                    return x * factor
            else:
                def forward(self, x):
                    return x * factor
        return Scale()

    x = torch.randn(3)
    for by_default in (True, False):
        assert cuvil.compile(scaled(2.0, by_default), (x,)).executable.cache == "miss"
        compiled = cuvil.compile(scaled(3.0, by_default), (x,))
        assert compiled.executable.cache == "miss"
        torch.testing.assert_close(compiled(x), x * 3.0)
        assert cuvil.compile(scaled(3.0, by_default), (x,)).executable.cache == "hit"


def test_the_key_of_a_set_attribute_is_the_same_in_every_process():
    """A set's order follows the process's string hash seed (GPT-2's `_keys_to_ignore_on_load_unexpected`): the key
    sorts it, so a warm process hits whatever its seed."""
    pytest.importorskip("torch")
    code = ("import torch; from cuvil.frontends.torch.cache_key import module_key; m = torch.nn.Linear(2, 2); "
            "torch.nn.init.ones_(m.weight); torch.nn.init.zeros_(m.bias); "
            "m.names = {'attn.bias', 'crossattention.bias', 'a', 'b', 'c', 'd'}; "
            "print(module_key(m, (torch.ones(1, 2),), {}))")
    keys_seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                                env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout.strip() for seed in range(3)}
    assert len(keys_seen) == 1 and "None" not in keys_seen


def _flip(path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["header", "table", "meta", "entries", "native", "consts", "ir"])
def test_flipped_bytes_in_any_part_of_an_entry_are_a_miss_that_is_rebuilt(cache, tmp_path, where):
    path, w = _onnx_file(tmp_path)
    cuvil.load_onnx(path).optimize()
    (entry,) = _entries(cache)
    rows = container.Container.open(entry).rows
    at = {"header": 40, "table": 128 + 20}.get(where) or rows[where].offset + rows[where].size // 2
    _flip(entry, at)
    again = cuvil.load_onnx(path).optimize()
    x = np.ones((3, 4), np.float32)
    np.testing.assert_allclose(again(x)[0], np.maximum(x @ w, 0), rtol=1e-6)  # never the corrupt entry's answer
    # detected at load (a miss), or for the constants and the IR at the first call (rebuilt there)
    assert again.executable.cache == "miss" and "func" in cuvil.inspect_ir(again)
    assert cuvil.load_onnx(path).optimize().executable.cache == "hit"


def test_swapped_stat_records_give_each_model_its_own_code(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(keys, "RACY_S", -1.0)  # record the digests of files written just now
    (path_a, w_a), (path_b, w_b) = _onnx_file(tmp_path, 0), _onnx_file(tmp_path, 1)
    for p in (path_a, path_b):
        cuvil.load_onnx(p).optimize()
        cuvil.load_onnx(p).optimize()
    records = sorted((cache / "artifacts" / "stat").glob("*.digest"))
    assert len(records) == 2
    texts = [r.read_text() for r in records]
    records[0].write_text(texts[1])
    records[1].write_text(texts[0])
    x = np.ones((2, 4), np.float32)
    for p, w in ((path_a, w_a), (path_b, w_b)):
        model = cuvil.load_onnx(p).optimize()
        np.testing.assert_allclose(model(x)[0], np.maximum(x @ w, 0), rtol=1e-6)


def test_a_passing_load_error_keeps_the_entry(cache, tmp_path, monkeypatch):
    path, w = _onnx_file(tmp_path)
    seen, real_load = [], store.load
    monkeypatch.setattr(store, "load", lambda key, rebuild=None: seen.append(key) or real_load(key))
    cuvil.load_onnx(path).optimize()
    (entry,) = _entries(cache)
    def busy(*args):
        raise OSError(24, "Too many open files")

    with monkeypatch.context() as m:
        m.setattr(host, "dlopen", busy)
        assert real_load(seen[0]) is None
    assert _entries(cache) == [entry]
    assert cuvil.load_onnx(path).optimize().executable.cache == "hit"


def test_a_failed_save_publishes_nothing(cache, tmp_path, monkeypatch):
    path, _ = _onnx_file(tmp_path)
    def disk_full(f, *args):
        f.write(b"half an entry")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(container, "_write_sections", disk_full)
    assert cuvil.load_onnx(path).optimize().executable.cache == "miss"
    assert not _entries(cache) and not list((cache / "artifacts").glob(".*"))


def test_concurrent_writers_publish_one_valid_entry(cache, tmp_path):
    # Every process here runs a snapshot of Cuvil's sources: the key holds their digest, which this process
    # memoised earlier in the session, and the checkout may be edited while the suite runs. Checking the hit in
    # this process once failed that way (a miss: two digests, two keys), not through the cache's own publishing.
    shutil.copytree(os.path.join(ROOT, "cuvil"), tmp_path / "src" / "cuvil",
                    ignore=shutil.ignore_patterns("__pycache__"))
    path, w = _onnx_file(tmp_path)
    code = ("import sys, numpy as np, cuvil\n"
            "m = cuvil.load_onnx(sys.argv[1]).optimize()\n"
            "print(m.executable.cache, float(m(np.ones((2, 4), np.float32))[0].sum()))\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}

    def start():
        return subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, env=env)

    procs = [start() for _ in range(3)]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    want = float(np.maximum(np.ones((2, 4), np.float32) @ w, 0).sum())
    assert all(abs(float(total) - want) < 1e-4 for _, total in outs)
    assert len(_entries(cache)) == 1
    assert start().communicate(timeout=300)[0].split()[0] == "hit"


def test_verify_checks_the_constants_and_deletes_corrupt_entries(cache, tmp_path):
    path, w = _onnx_file(tmp_path)
    cuvil.load_onnx(path).optimize()
    (entry,) = _entries(cache)
    assert cuvil.cache.verify() == []
    data = bytearray(entry.read_bytes())
    data[data.index(w.tobytes()) + 5] ^= 0xFF  # inside the constant's bytes: only the consts SHA-256 covers them
    entry.write_bytes(bytes(data))
    assert cuvil.cache.verify() == [entry] and not _entries(cache)
    again = cuvil.load_onnx(path).optimize()
    assert again.executable.cache == "miss"
    np.testing.assert_allclose(again(np.ones((3, 4), np.float32))[0], np.maximum(np.ones((3, 4)) @ w, 0), rtol=1e-6)


def test_file_digests_are_remembered_by_stat_but_never_for_fresh_files(tmp_path, monkeypatch):
    memo = tmp_path / "memo"
    path = tmp_path / "f.bin"
    path.write_bytes(b"one")
    first = keys.file_digest(path, memo)
    assert not memo.exists()  # changed within the last second: it may change again with the same stat
    monkeypatch.setattr(keys, "RACY_S", -1.0)
    assert keys.file_digest(path, memo) == first and len(list(memo.glob("*"))) == 1
    assert keys.file_digest(path, memo) == first  # from the memo
    path.write_bytes(b"two")  # same size: the stat's times tell the versions apart
    assert keys.file_digest(path, memo) != first


def test_winograd_weights_are_saved_and_mapped_on_a_hit(cache, tmp_path):
    """What cuvil_prepare derives from weights is kept with the entry when remaking it costs more than mapping
    it: a hit maps the Winograd-transformed weights read-only, while it packs the GEMM panels again (a
    repacking as large as the weights themselves); buffers of the wrong size make the entry unusable."""
    from cuvil.backends.cpu.executable import CpuFunction
    rng = np.random.default_rng(3)
    model, _ = winograd_conv_onnx(rng, 5)
    path = tmp_path / "winograd.onnx"
    onnx.save(model, path)
    cold = cuvil.load_onnx(path).optimize()
    assert 'algorithm = "winograd"' in cuvil.inspect_ir(cold)
    assert cold.executable._run.program.prepared_saved.count(True) == 1
    warm = cuvil.load_onnx(path).optimize()
    assert warm.executable.cache == "hit"
    for saved, a, b in zip(cold.executable._run.program.prepared_saved, cold.executable._run.prepared,
                           warm.executable._run.prepared):
        assert a.ctypes.data % 64 == 0 and b.ctypes.data % 64 == 0
        assert b.flags.writeable is not saved  # saved: a view of the entry's file; else packed again at load
        np.testing.assert_array_equal(a, b)
    x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    np.testing.assert_array_equal(warm(x)[0], cold(x)[0])
    (entry,) = _entries(cache)
    lib = cuvil.load(entry)._lib
    with pytest.raises(ValueError, match="prepared buffers"):
        CpuFunction._prepared_buffers(lib.cuvil_packed_count, lib.cuvil_packed_bytes, {0: np.zeros(64, np.uint8)})


def _conv_fc_file(tmp_path, rng, width: int = 64):
    """A Winograd convolution, then a fully connected layer at least 64 wide: weights only cuvil_prepare reads."""
    model, weight_bytes = winograd_conv_onnx(rng, width)
    path = tmp_path / "conv_fc.onnx"
    onnx.save(model, path)
    return path, weight_bytes


def test_packed_forms_replace_the_weights_they_were_made_from(cache, tmp_path):
    """The entry stores the Winograd transform and the GEMM panels in place of the two weights (each weight once),
    a hit maps them and never the originals, and asking a hit for its IR compiles the model again."""
    rng = np.random.default_rng(4)
    path, weight_bytes = _conv_fc_file(tmp_path, rng)
    cold = cuvil.load_onnx(path).optimize()
    (entry,) = _entries(cache)
    meta = cuvil.load(entry).metadata["entries"]["main"]
    derived = [c["name"] for c in meta["constants"] if c.get("derived")]
    assert len(derived) == 2 and len(meta["prepared"]) == 2
    rows = container.Container.open(entry).rows
    assert rows["consts"].size < 1024  # the bias-free model keeps only small constants, if any
    assert rows["prepared"].size == sum(a.nbytes for a in cold.executable._run.prepared)
    warm = cuvil.load_onnx(path).optimize()
    x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    np.testing.assert_array_equal(warm(x)[0], cold(x)[0])
    assert warm.executable.cache == "hit" and sum(c is None for c in warm.executable._run._consts) == 2
    assert 'algorithm = "winograd"' in cuvil.inspect_ir(warm)  # compiled again for the IR's weights
    np.testing.assert_array_equal(warm(x)[0], cold(x)[0])


def test_a_cold_onnx_compile_serves_its_entry_and_frees_its_private_weights(cache, tmp_path, monkeypatch):
    """A cold compile loads the entry it saved as a warm start does, so the compiled function holding the converted
    initializers and their packed forms is freed (BERT-base kept 1.85x its weights); its IR is compiled again."""
    import gc
    import weakref

    from cuvil.backends.cpu import executable as cpu

    made, init = [], cpu.CpuFunction.__init__
    monkeypatch.setattr(cpu.CpuFunction, "__init__", lambda self, *a, **k: init(self, *a, **k) or
                        made.append(weakref.ref(self)))
    rng = np.random.default_rng(5)
    path, _ = _conv_fc_file(tmp_path, rng)
    x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    cold = cuvil.load_onnx(path).optimize()
    got = cold(x)[0]
    gc.collect()
    assert cold.executable.cache == "miss" and len(made) == 2  # compiled, then loaded from the entry
    assert made[0]() is None and made[1]() is not None
    np.testing.assert_allclose(got, cuvil.load_onnx(path)(x)[0], rtol=1e-4, atol=1e-4)
    assert 'algorithm = "winograd"' in cuvil.inspect_ir(cold)
    np.testing.assert_array_equal(cold(x)[0], got)


def test_a_miss_compiles_the_model_once(cache, tmp_path, monkeypatch):
    """The object compiled for this process is the one the cache entry links: the generated C compiles once."""
    from cuvil.backends.cpu import toolchain

    built = []
    build_entry = toolchain._build_entry
    monkeypatch.setattr(toolchain, "_build_entry", lambda prepare, compiler, entry, key: (
        built.append(entry.name), build_entry(prepare, compiler, entry, key))[1])
    path, _ = _conv_fc_file(tmp_path, np.random.default_rng(5), width=72)  # C no other test compiled
    cuvil.load_onnx(path).optimize()
    assert len(_entries(cache)) == 1
    models = [n for n in built if not n.startswith(("obj-kernels", "obj-export", "cuvil-kernels", "fastcall"))]
    assert len(models) == 1 and models[0].startswith("obj-entry"), built


def test_a_verified_record_skips_the_weights_hash_until_the_entry_is_written_to(cache, tmp_path, monkeypatch):
    """After a warm start whose every SHA-256 passed, the entry's record (its stat and section table) lets the next
    ones skip hashing the weights; a byte flipped in the packed weights afterwards, even with the old mtime put
    back, changes the file's ctime: that load hashes everything again, finds the flip and rebuilds."""
    monkeypatch.setattr(store, "RACY_S", -1.0)  # the entry was written just now: record it anyway
    checked = []
    check_all = container.Container.check_all
    monkeypatch.setattr(container.Container, "check_all",
                        lambda self, names, threads=1: (checked.extend(names), check_all(self, names, threads)))
    rng = np.random.default_rng(6)
    path, _ = _conv_fc_file(tmp_path, rng)
    cold = cuvil.load_onnx(path).optimize()
    x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    want = cold(x)[0]
    (entry,) = _entries(cache)
    for expect_hash in (True, False):
        checked.clear()
        warm = cuvil.load_onnx(path).optimize()
        np.testing.assert_array_equal(warm(x)[0], want)
        assert warm.executable.cache == "hit" and ("prepared" in checked) is expect_hash, checked
    assert store._record_path(entry).exists()
    st = entry.stat()
    _flip(entry, container.Container.open(entry).rows["prepared"].offset + 100)
    os.utime(entry, ns=(st.st_atime_ns, st.st_mtime_ns))
    checked.clear()
    again = cuvil.load_onnx(path).optimize()
    np.testing.assert_array_equal(again(x)[0], want)  # never the flipped weights' answer
    assert "prepared" in checked and again.executable.cache == "miss"


def test_a_record_made_for_another_file_is_not_trusted(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(store, "RACY_S", -1.0)
    path_a, _ = _onnx_file(tmp_path, 1)
    path_b, _ = _onnx_file(tmp_path, 2)
    for p in (path_a, path_b, path_a, path_b):
        cuvil.load_onnx(p).optimize()(np.ones((2, 4), np.float32))
    a, b = _entries(cache)
    store._record_path(a).write_text(store._record_path(b).read_text())
    assert not store._was_verified(a, container.Container.open(a))


def _export_of(model, path):
    cuvil.export(model, path)
    return cuvil.load(path)


def _weights_file(tmp_path, rng, width: int):
    """An MLP whose wide weight (64 or more outputs) is stored as packed panels the size of the weight itself."""
    w = rng.standard_normal((16, width)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
                              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "wide.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, w


def _cuvil_run_gives(cuv, x, want, folder) -> None:
    """`cuvil-run` (the C runtime, no Python) on `cuv` with input `x` writes exactly `want`."""
    from .runtime import c_build

    built = c_build.runtime()
    np.save(folder / "x.npy", x)
    run = c_build.run(built, built.cli, cuv, folder / "x.npy", "-o", folder / "out")
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.load(folder / "out" / "output_0.npy"), want)


def _sections(cuv) -> dict:
    return {n: r.size for n, r in container.Container.open(cuv).rows.items() if n in ("consts", "prepared")}


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_exporting_a_cache_hit_whose_entry_stores_the_weights_once_copies_it(cache, tmp_path, monkeypatch, warm):
    """A model served from its entry (a warm hit, or a cold compile that maps what it saved) whose entry holds each
    weight once (here as GEMM panels the weight's size) is exported by copying the entry, compiling nothing, and the
    file runs as a fresh export (cache off) does, in Python and in cuvil-run; its metadata names the model's inputs."""
    rng = np.random.default_rng(6)
    path, w = _weights_file(tmp_path, rng, 128)
    x = rng.standard_normal((1, 16)).astype(np.float32)
    model = cuvil.load_onnx(path).optimize()
    if warm:
        model = cuvil.load_onnx(path).optimize()
    assert model.executable.cache == ("hit" if warm else "miss") and model.executable.cache_entry is not None
    monkeypatch.setattr(LazyOnnxModel, "_compile", lambda *a, **k: pytest.fail("compiled again to export"))
    copied = _export_of(model, tmp_path / "copied.cuv")
    monkeypatch.undo()
    assert any(c.get("derived") for c in copied.metadata["entries"]["main"]["constants"])
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "0")
    fresh_model = cuvil.load_onnx(path).optimize()
    assert fresh_model.executable.cache_entry is None
    fresh = _export_of(fresh_model, tmp_path / "fresh.cuv")
    for key in ("inputs", "outputs", "route", "symbols", "fingerprint"):
        assert copied.metadata["entries"]["main"][key] == fresh.metadata["entries"]["main"][key], key
    assert _sections(tmp_path / "copied.cuv") == _sections(tmp_path / "fresh.cuv")
    want = fresh(x=x)
    np.testing.assert_array_equal(copied(x=x), want)
    np.testing.assert_array_equal(model(x)[0], want)
    _cuvil_run_gives(tmp_path / "copied.cuv", x, want, tmp_path)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_an_export_stores_the_weights_not_the_winograd_transforms_a_cache_entry_holds(cache, tmp_path, monkeypatch,
                                                                                       warm):
    """An entry keeps the Winograd-transformed weights in place of the weights (larger, but not transformed again
    at a warm start); an export of a model served from it stores the weights once, as an export with the cache off
    does (the weights compiled again: the entry lacks them), and gives the same outputs, in Python and cuvil-run."""
    rng = np.random.default_rng(6)
    path, weight_bytes = _conv_fc_file(tmp_path, rng)
    x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    model = cuvil.load_onnx(path).optimize()
    if warm:
        model = cuvil.load_onnx(path).optimize()
    (entry,) = _entries(cache)
    assert model.executable.cache_entry is not None and _sections(entry)["prepared"] > 1.5 * weight_bytes
    cuvil.export(model, tmp_path / "from_hit.cuv")
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "0")
    cuvil.export(cuvil.load_onnx(path).optimize(), tmp_path / "fresh.cuv")
    stored = _sections(tmp_path / "from_hit.cuv")
    assert stored == _sections(tmp_path / "fresh.cuv")
    assert sum(stored.values()) <= weight_bytes * 1.02 + 256, (stored, weight_bytes)
    want = cuvil.load(tmp_path / "fresh.cuv")(x=x)
    np.testing.assert_array_equal(cuvil.load(tmp_path / "from_hit.cuv")(x=x), want)
    np.testing.assert_array_equal(model(x)[0], want)
    _cuvil_run_gives(tmp_path / "from_hit.cuv", x, want, tmp_path)


def test_a_hit_exported_under_another_name_or_for_another_target_is_written_anew(cache, tmp_path):
    """Only a host export of one entry copies the cache entry; an entry name is kept, and `include_c` (C the entry
    does not hold) writes it the ordinary way."""
    path, w = _onnx_file(tmp_path, seed=3)
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    cuvil.load_onnx(path).optimize()
    warm = cuvil.load_onnx(path).optimize()
    assert warm.executable.cache == "hit"
    cuvil.export({"mlp": warm}, tmp_path / "named.cuv")
    named = cuvil.load(tmp_path / "named.cuv")
    assert named.entries == ["mlp"]
    np.testing.assert_allclose(named.function("mlp")(x=x), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
    cuvil.export(warm, tmp_path / "with_c.cuv", include_c=True)
    assert "cuvil" in cuvil.load(tmp_path / "with_c.cuv").c_text()


def test_exporting_a_torch_hit_copies_its_entry(cache, tmp_path, monkeypatch):
    """The torch route's warm hit, its wide weight stored as packed panels, exports without compiling again, and the
    file gives the module's outputs under the route a fresh export writes."""
    torch = pytest.importorskip("torch")
    from cuvil.frontends.torch import compile as torch_compile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).eval()
    x = torch.randn(3, 64)
    cuvil.compile(model, (x,))
    warm = cuvil.compile(model, (x,))
    assert warm.executable.cache == "hit"
    monkeypatch.setattr(torch_compile, "_compile", lambda *a, **k: pytest.fail("compiled again to export"))
    loaded = _export_of(warm, tmp_path / "torch.cuv")
    assert loaded.metadata["entries"]["main"]["route"] == {"kind": "torch", "torch": True, "single": True}
    torch.testing.assert_close(torch.as_tensor(np.asarray(loaded(x.numpy()))), model(x), rtol=1e-5, atol=1e-5)


def test_exporting_a_torch_hit_with_winograd_weights_stores_the_weights(cache, tmp_path):
    """The torch route's warm hit of a 3x3 convolution (its entry holds the Winograd transform in place of the
    weight) exports the weight itself, once, as an export with the cache off does, with the module's outputs."""
    torch = pytest.importorskip("torch")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1, bias=False), torch.nn.ReLU()).eval()
    x = torch.randn(1, 16, 20, 20)
    cuvil.compile(model, (x,))
    warm = cuvil.compile(model, (x,))
    (entry,) = _entries(cache)
    weight_bytes = model[0].weight.numel() * 4
    assert warm.executable.cache == "hit" and _sections(entry)["prepared"] > 1.5 * weight_bytes
    cuvil.export(warm, tmp_path / "from_hit.cuv")
    stored = _sections(tmp_path / "from_hit.cuv")
    assert sum(stored.values()) <= weight_bytes * 1.02 + 256, stored
    loaded = cuvil.load(tmp_path / "from_hit.cuv")
    torch.testing.assert_close(torch.as_tensor(np.asarray(loaded(x.numpy()))), model(x), rtol=1e-4, atol=1e-4)
