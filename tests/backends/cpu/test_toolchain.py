"""The C toolchain: compiler discovery, the on-disk cache across processes, corruption and concurrency."""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cuvil.backends.cpu import toolchain
from cuvil.errors import CuvilError

ROOT = Path(__file__).resolve().parents[3]
SOURCE = "int twice(int x) { return 2 * x; }\n"

pytestmark = pytest.mark.skipif(not any(map(shutil.which, toolchain.COMPILER_CANDIDATES)), reason="no C compiler")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def run_python(code: str, cache: Path) -> subprocess.Popen:
    """Start `code` in a new interpreter that shares the cache folder."""
    env = dict(os.environ, CUVIL_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


BUILD_IN_CHILD = """
    import ctypes, json
    from cuvil.backends.cpu import toolchain
    build = toolchain.build_library({source!r}, name="t", opt_level=0)
    print(json.dumps({{"compiled": build.compiled, "value": ctypes.CDLL(str(build.path)).twice(21)}}))
"""


def child_result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_second_process_hits_the_cache(cache):
    first = toolchain.build_library(SOURCE, name="t", opt_level=0)
    assert first.compiled and first.path.is_file()
    assert child_result(run_python(BUILD_IN_CHILD.format(source=SOURCE), cache)) == {"compiled": False, "value": 42}
    assert not toolchain.build_library(SOURCE, name="t", opt_level=0).compiled


def test_a_build_records_its_cpu_time_and_a_link_is_cached():
    """meta.json holds the compiler's CPU seconds beside its wall seconds (a loaded machine inflates only the wall);
    objects link once into a cached library."""
    obj = toolchain.build_library(SOURCE, name="o", flags=toolchain.object_flags(0))
    meta = json.loads((obj.path.parent / "meta.json").read_text())
    assert isinstance(meta["cpu_seconds"], float) and 0 < meta["cpu_seconds"] <= meta["seconds"] * 4
    first = toolchain.link_library([obj.path], name="linked")
    assert first.compiled and not toolchain.link_library([obj.path], name="linked").compiled
    assert ctypes.CDLL(str(first.path)).twice(5) == 10


def test_a_failed_compile_names_the_command_and_the_error():
    with pytest.raises(toolchain.CompileError, match=r"(?s)C compilation failed.*source\.c.*error"):
        toolchain.build_library("int broken( {", name="bad", opt_level=0)


def test_cache_key_covers_source_and_flags():
    compiler = toolchain.find_compiler()
    base = toolchain.cache_key(SOURCE, ("-O1",), compiler)
    assert base == toolchain.cache_key(SOURCE, ("-O1",), compiler)
    assert base != toolchain.cache_key(SOURCE, ("-O2",), compiler)
    assert base != toolchain.cache_key(SOURCE + " ", ("-O1",), compiler)


def test_truncated_library_is_rebuilt():
    build = toolchain.build_library(SOURCE, name="t", opt_level=0)
    data = build.path.read_bytes()
    build.path.write_bytes(data[: len(data) // 2])
    rebuilt = toolchain.build_library(SOURCE, name="t", opt_level=0)
    assert rebuilt.compiled and rebuilt.path.stat().st_size == len(data)
    assert toolchain.load_library(SOURCE, name="t", opt_level=0).twice(4) == 8


def test_library_that_fails_to_load_is_rebuilt(caplog):
    build = toolchain.build_library("int thrice(int x) { return 3 * x; }", name="t", opt_level=0)
    garbage = b"\x7fELF not really a library" * 10  # digest made to match: only dlopen can tell
    build.path.write_bytes(garbage)
    meta = json.loads((build.path.parent / "meta.json").read_text())
    meta.update(size=len(garbage), sha256=hashlib.sha256(garbage).hexdigest())
    (build.path.parent / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="cuvil.backends.cpu"):
        lib = toolchain.load_library("int thrice(int x) { return 3 * x; }", name="t", opt_level=0)
    assert lib.thrice(5) == 15
    assert "rebuilding" in caplog.text


def test_missing_meta_is_rebuilt():
    build = toolchain.build_library(SOURCE, name="t", opt_level=0)
    (build.path.parent / "meta.json").unlink()
    assert toolchain.build_library(SOURCE, name="t", opt_level=0).compiled


def test_two_processes_compiling_at_once(cache):
    source = "int twice(int x) { return x + x; }\n"
    procs = [run_python(BUILD_IN_CHILD.format(source=source), cache) for _ in range(3)]
    results = [child_result(p) for p in procs]
    assert all(r["value"] == 42 for r in results)
    assert sum(r["compiled"] for r in results) == 1  # the lock: one compiles, the others wait and load
    entries = [p for p in (cache / "cpu").iterdir() if p.is_dir()]
    assert [p.name.startswith("t-") for p in entries] == [True]  # no temporary or trash folders left


def test_missing_compiler(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(toolchain.CompilerNotFoundError, match="needs a C compiler.*CC='/nonexistent/cc'"):
        toolchain.build_library(SOURCE, name="t")
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(toolchain, "_zig_path", lambda: "")  # no `cuvil[zig]` either (with it, zig is the fallback)
    with pytest.raises(CuvilError, match=r"none of cc, gcc, clang.*pip install 'cuvil\[zig\]'"):
        toolchain.find_compiler()


def test_compile_error_carries_stderr():
    with pytest.raises(toolchain.CompileError, match=r"(?s)C compilation failed.*source\.c.*error"):
        toolchain.build_library("int broken( {", name="t", opt_level=0)


def test_compile_is_logged(caplog):
    with caplog.at_level(logging.INFO, logger="cuvil.backends.cpu"):
        toolchain.build_library("int logged(void) { return 1; }", name="t", opt_level=0)
    assert any("compiled t-" in r.message and "-O0" in r.message for r in caplog.records)


def test_default_flags_and_cache_dir(monkeypatch, tmp_path):
    assert toolchain.compile_flags()[:3] == ("-O3", "-march=native", "-fopenmp")
    assert toolchain.compile_flags(1)[0] == "-O1"
    monkeypatch.delenv("CUVIL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert toolchain.cache_dir() == tmp_path / "cuvil"


def test_host_description():
    features = toolchain.cpu_features()
    assert features <= set(toolchain.FEATURE_MACROS)
    if os.uname().machine == "x86_64":
        assert "sse2" in features
    assert toolchain.physical_cores() >= 1
