"""wasm32 `.cuv` files (cuvil.export(..., "wasm32")) run under wasmtime from Python and under Node.js with cuvil.js:
the outputs equal the native x86-64 ones within fp32 tolerances, bad inputs and corrupt files fail clearly."""
import contextlib
import json
import subprocess

import numpy as np
import pytest

import cuvil
from cuvil.errors import ArtifactError, IndexRangeError, ShapeError, UnsupportedError

from . import models, node
from .conftest import require

RTOL, ATOL = 1e-4, 1e-5  # fp32: the wasm kernels sum in another order than AVX-512's (and have no FMA)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (model, wasm32 path, native outputs per call), exported on first use."""
    require("ziglang")
    folder, done = tmp_path_factory.mktemp("wasm"), {}

    def get(name):
        if name not in done:
            m = models.build(name)
            wasm_path, cpu_path = folder / f"{name}.cuv", folder / f"{name}-cpu.cuv"
            cuvil.export(m.obj, wasm_path, "wasm32", example_inputs=m.example)
            cuvil.export(m.obj, cpu_path, example_inputs=m.example)
            with cuvil.load(cpu_path) as native:
                expected = [_tuple(native(*call)) for call in m.calls]
            done[name] = (m, wasm_path, expected)
        return done[name]
    return get


def _tuple(y) -> list:
    return [np.asarray(a) for a in (y if isinstance(y, tuple) else (y,))]


def _close(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", models.MODELS)
def test_wasmtime_matches_native(exported, name):
    require("wasmtime")
    from cuvil.runtime import wasm

    m, path, expected = exported(name)
    art = wasm.load(path)
    for call, want in zip(m.calls, expected):
        _close(_tuple(art(*call)), want)


@pytest.mark.parametrize("name", models.MODELS)
def test_node_matches_native(exported, name, tmp_path):
    require("node")
    m, path, expected = exported(name)
    for call, want in zip(m.calls, expected):
        result = node.run(path, call, tmp_path)
        assert "error" not in result, result
        _close(result["outputs"], want)


def test_meta_names_the_target(exported):
    from cuvil.runtime.container import Container

    _, path, _ = exported("cnn")
    c = Container.open(path)
    assert c.triple == "wasm32-wasi" and "prepared" not in c.rows  # the module packs its own weights
    assert bytes(c.data("native"))[:4] == b"\0asm"
    meta = json.loads(bytes(c.data("meta")))
    assert meta["target"] == "wasm32" and meta["features"] == ["simd128"] and meta["triple"] == "wasm32-wasi"
    assert c.rows["native"].features == 1 << 48 and all(not e["prepared"] for e in meta["entries"].values())


def test_native_loader_refuses_a_wasm_file(exported):
    _, path, _ = exported("mlp")
    with pytest.raises(ArtifactError, match="wasm32-wasi"):
        cuvil.load(path)


def test_unknown_target_is_refused():
    with pytest.raises(UnsupportedError, match="'riscv64'.*wasm32"):
        cuvil.export(cuvil.jit(models.grow), "/nonexistent.cuv", "riscv64", example_inputs=(np.ones(2, np.float32),))


def test_sizes_that_do_not_fit_fail_in_both_loaders(exported, tmp_path):
    require("wasmtime")
    require("node")
    from cuvil.runtime import wasm

    _, path, _ = exported("dynamic")
    x, w = np.ones((4, 5), np.float32), np.ones((3, 4), np.float32)  # x's 5 columns against w's 3 rows
    with pytest.raises(ShapeError, match="do not fit"):
        wasm.load(path)(x, w)
    result = node.run(path, [x, w], tmp_path)
    assert result["error"]["kind"] == "shape" and "do not fit" in result["error"]["message"]
    result = node.run(path, [x.astype(np.float64), w], tmp_path)
    assert result["error"]["kind"] == "shape" and "Float32Array" in result["error"]["message"]


def test_an_index_out_of_range_is_reported(tmp_path):
    require("ziglang")
    require("wasmtime")
    require("node")
    from cuvil.runtime import wasm

    def pick(x, i):
        return np.take(x, i, axis=0)

    x, i = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([0, 3], np.int64)
    path = tmp_path / "pick.cuv"
    cuvil.export(cuvil.jit(pick), path, "wasm32", example_inputs=(x, i))
    art = wasm.load(path)
    np.testing.assert_array_equal(art(x, i), x[[0, 3]])
    bad = np.array([0, 9], np.int64)
    with pytest.raises(IndexRangeError, match="index 9 is out of bounds for axis 0 with size 4"):
        art(x, bad)
    result = node.run(path, [x, bad], tmp_path)
    assert result["error"]["kind"] == "index" and "index 9 is out of bounds" in result["error"]["message"]


@pytest.mark.parametrize("section", ["consts", "native", "meta"])
def test_a_corrupt_section_is_refused_before_running(exported, tmp_path, section):
    require("wasmtime")
    require("node")
    from cuvil.runtime import wasm
    from cuvil.runtime.container import Container

    _, path, _ = exported("mlp")
    data = bytearray(path.read_bytes())
    row = Container.open(path).rows[section]
    data[row.offset + row.size // 2] ^= 0x40
    bad = tmp_path / "bad.cuv"
    bad.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=f"'{section}' does not match its SHA-256"):
        wasm.load(bad)
    result = node.run(bad, [np.ones((4, 64), np.float32)], tmp_path)
    error = result["error"]
    assert error["kind"] == "artifact" and f"'{section}' does not match its SHA-256" in error["message"]


def test_a_truncated_file_is_refused(exported, tmp_path):
    require("node")
    _, path, _ = exported("mlp")
    bad = tmp_path / "short.cuv"
    bad.write_bytes(path.read_bytes()[:-100])
    result = node.run(bad, [np.ones((4, 64), np.float32)], tmp_path)
    assert result["error"]["kind"] == "artifact" and "truncated" in result["error"]["message"]


@pytest.mark.parametrize("row,lanes,ops", [("wasm32", 4, ("f32x4.mul", "f32x4.add", "f32x4.pmax")),
                                          ("wasm32", 16, ("f32x4.mul", "f32x4.add")),
                                          ("wasm32-relaxed", 4, ("f32x4.relaxed_madd",))])
def test_the_kernel_library_compiles_to_simd128(tmp_path, row, lanes, ops):
    """The kernels' vector code becomes SIMD128 instructions (not scalar code), for SIMD128's own width and for a
    wider host's blocked layout; relaxed-SIMD's row contracts multiply-adds into its FMA."""
    require("ziglang")
    from cuvil.backends.cpu import kernels, targets, wasm

    source = tmp_path / "k.c"
    source.write_text("".join(f'#include "{n}"\n' for n in kernels.SOURCES))
    cmd = [*wasm.COMPILER, "-O2", *wasm.COMPILE_FLAGS, *wasm.machine_flags(targets.get(row), lanes),
           f"-I{wasm.include_dir()}", f"-I{kernels.include_dir()}", "-S", str(source), "-o", str(tmp_path / "k.s")]
    subprocess.run(cmd, check=True, capture_output=True)
    text = (tmp_path / "k.s").read_text(errors="replace")  # debug-info comments quote raw bytes of constants
    for op in ops:
        assert text.count(op) >= 5, op  # each at several sites: the kernels vectorised, not one stray use


@pytest.mark.parametrize("target", ["cpu", "wasm32"])
def test_a_model_from_the_artifact_cache_exports(tmp_path, monkeypatch, target):
    """A second compile of the same model is an artifact-cache hit whose code loads at its first call; export
    used to fail on it with a bare AttributeError."""
    require("ziglang")
    from cuvil.backends.cpu import toolchain

    compiled = toolchain.cache_dir()
    (tmp_path / "cache").mkdir()
    for kind in ("cpu", "wasm"):  # the compiled code stays shared; the artifact cache is this test's own
        (compiled / kind).mkdir(parents=True, exist_ok=True)
        (tmp_path / "cache" / kind).symlink_to(compiled / kind)
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "1")
    models.build("cnn")
    m = models.build("cnn")
    assert m.obj.executable.cache == "hit"
    cuvil.export(m.obj, tmp_path / "again.cuv", target)
    with cuvil.load(tmp_path / "again.cuv") if target == "cpu" else _wasm_load(tmp_path / "again.cuv") as art:
        _close(_tuple(art(*m.calls[0])), _tuple(m.obj(*m.calls[0])))


def _wasm_load(path):
    require("wasmtime")
    from cuvil.runtime import wasm

    return contextlib.nullcontext(wasm.load(path))


def test_entries_that_disagree_with_meta_are_refused(exported, tmp_path):
    """A well-formed file (every checksum right) whose `entries` text says other sizes than `meta`."""
    require("wasmtime")
    require("node")
    from cuvil.runtime import container, wasm

    _, path, _ = exported("mlp")
    c = container.Container.open(path)
    sections = [container.Section(name, [bytes(c.data(name))], row.flags, row.features)
                for name, row in sorted(c.rows.items(), key=lambda kv: kv[1].offset)]
    entries = next(s for s in sections if s.name == "entries")
    entries.parts = [entries.parts[0].replace(b"input x f32 2", b"input x f32 3")]
    bad = tmp_path / "disagree.cuv"
    container.write(bad, sections, c.triple, c.required_features)
    with pytest.raises(ArtifactError, match="disagrees with meta"):
        wasm.load(bad)
    result = node.run(bad, [np.ones((4, 64), np.float32)], tmp_path)
    assert result["error"]["kind"] == "artifact" and "disagrees with meta" in result["error"]["message"]
