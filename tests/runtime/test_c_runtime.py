"""The standalone C runtime (cuvil/runtime/c/) and `cuvil-run`: round trips of exported models against Python,
the C API (memory, signatures, caller buffers, 8 threads), the same under AddressSanitizer, and its errors."""
from __future__ import annotations

import platform
import re
import sys

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu.fastcall import OP, check_program
from cuvil.ir import sym
from cuvil.ir.types import TensorType

from . import c_build, cuv_writer
from .c_models import MODELS, export_model

needs_asan = pytest.mark.skipif(not c_build.asan_available(), reason="the C compiler cannot link -fsanitize=address")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    return {name: export_model(name, folder) for name in MODELS}


def _cuvil_run(built, model, tmp_path, *extra):
    inputs = []
    for k, x in enumerate(model.inputs):
        inputs.append(tmp_path / f"in{k}.npy")
        np.save(inputs[-1], x)
    out = c_build.run(built, built.cli, model.path, *inputs, "-o", tmp_path / "out", *extra)
    assert out.returncode == 0, out.stderr
    return [np.load(tmp_path / "out" / f"output_{k}.npy") for k in range(len(model.expected))]


@pytest.mark.parametrize("sanitize", [False, pytest.param(True, marks=needs_asan)], ids=["release", "asan"])
@pytest.mark.parametrize("name", MODELS)
def test_cuvil_run_gives_what_python_gives(exported, name, sanitize, tmp_path):
    """cuvil-run's outputs equal the in-process compiled function's (bit for bit: the same code) and the
    original's (PyTorch, NumPy), for an MLP, a CNN, control flow and a dynamic dimension."""
    model = exported[name]
    outs = _cuvil_run(c_build.runtime(sanitize), model, tmp_path)
    for got, want, ref in zip(outs, model.expected, model.reference):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_info_prints_the_signature_with_its_symbolic_sizes(exported):
    built = c_build.runtime()
    out = c_build.run(built, built.cli, exported["mlp"].path, "--info")
    assert out.returncode == 0, out.stderr
    assert "input  x: f32[batch, 784]" in out.stdout and "f32[batch, 10]" in out.stdout
    assert "symbols batch" in out.stdout


def test_bench_prints_latency_percentiles(exported, tmp_path):
    built, model = c_build.runtime(), exported["mlp"]
    np.save(tmp_path / "x.npy", model.inputs[0])
    out = c_build.run(built, built.cli, model.path, tmp_path / "x.npy", "--bench", "20", "--warmup", "2")
    assert out.returncode == 0, out.stderr
    assert "20 runs (2 warm-up): mean" in out.stdout and "p50" in out.stdout and "p99" in out.stdout


@pytest.mark.parametrize("sanitize", [False, pytest.param(True, marks=needs_asan)], ids=["release", "asan"])
def test_c_api_memory_signatures_caller_buffers_and_eight_threads(exported, sanitize, tmp_path):
    """runtime_driver api: open from memory (aligned and not), list the signature, run into the caller's
    buffer, 8 threads at once with and without workspaces, all equal."""
    built, model = c_build.runtime(sanitize), exported["mlp"]
    x = model.inputs[0]
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    out = c_build.run(built, built.driver, "api", model.path, tmp_path / "x.bin", *x.shape, tmp_path / "y.bin")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "entry main: in x f32[batch,784] out output_0 f32[batch,10]" in out.stdout
    assert "threads ok" in out.stdout
    y = np.frombuffer((tmp_path / "y.bin").read_bytes(), np.float32).reshape(model.expected[0].shape)
    np.testing.assert_array_equal(y, model.expected[0])


def _fails(built, *args, message: str):
    out = c_build.run(built, built.cli, *args)
    assert out.returncode != 0 and "cuvil-run: " in out.stderr, out.stdout + out.stderr
    assert message in out.stderr, out.stderr
    return out


def test_inputs_that_break_the_signature_are_refused_with_the_input_named(exported, tmp_path):
    built, path = c_build.runtime(), exported["mlp"].path
    np.save(tmp_path / "narrow.npy", np.zeros((3, 783), np.float32))
    _fails(built, path, tmp_path / "narrow.npy", message="input 'x' has size 783 in axis 1, but the signature "
                                                         "needs 784")
    np.save(tmp_path / "f64.npy", np.zeros((3, 784)))
    _fails(built, path, tmp_path / "f64.npy", message="dtype '<f8', but the entry takes f32")
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.zeros((3, 784), np.float32)))
    _fails(built, path, tmp_path / "fortran.npy", message="Fortran-order")
    np.save(tmp_path / "big.npy", np.zeros((3, 784), ">f4"))
    _fails(built, path, tmp_path / "big.npy", message="little-endian only")
    _fails(built, path, message="takes 1 inputs, got 0")
    _fails(built, path, tmp_path / "missing.npy", message="missing.npy")
    _fails(built, tmp_path / "none.cuv", "--info", message="none.cuv: cannot open")
    (tmp_path / "text.cuv").write_text("hello")
    _fails(built, tmp_path / "text.cuv", "--info", message="too short for a .cuv file")
    _fails(built, path, "--entry", "other", tmp_path / "f64.npy", message="no entry named 'other'")


def test_a_relation_between_sizes_is_checked(exported, tmp_path):
    """The dynamic model's `x @ w` needs x's columns to equal w's rows: the message gives the relation, the
    values and the input sizes the symbols come from."""
    built, model = c_build.runtime(), exported["dynamic"]
    x, w = model.inputs
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w[:-1])
    out = _fails(built, model.path, tmp_path / "x.npy", tmp_path / "w.npy", message="entry 'main' needs ")
    assert f"but the inputs give {w.shape[0] - 1} and {x.shape[1]}" in out.stderr or \
        f"but the inputs give {x.shape[1]} and {w.shape[0] - 1}" in out.stderr, out.stderr
    assert "(w.shape[0])" in out.stderr and "(x.shape[1])" in out.stderr, out.stderr


# --- files from the tests' own writer: prepared buffers, native levels, target checks, the error channel ----------

NATIVE = r"""
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdint.h>
#include <sys/mman.h>
#ifndef PREPARED_BYTES
#define PREPARED_BYTES 16
#endif
static __thread const char *message = "";
int cuvil_abi_version(void) { return 1; }
const char *cuvil_last_error(void) { return message; }
void cuvil_set_num_threads(int n) { (void)n; }
int64_t t_arena_bytes(const int64_t *dims) { return dims[0] * 16; }
int64_t t_packed_count(void) { return 2; }
int64_t t_packed_bytes(int64_t j) { (void)j; return PREPARED_BYTES; }
int64_t t_packed_source(int64_t j) { (void)j; return 0; }
/* Whether all of [p, p + n) is in memory already (mincore): a buffer of huge pages is faulted in before prepare. */
static int resident(void *p, size_t n)
{
    static unsigned char pages[PREPARED_BYTES / 4096 + 2];
    uintptr_t at = (uintptr_t)p / 4096 * 4096;
    size_t count = ((uintptr_t)p + n - at + 4095) / 4096;
    if (mincore((void *)at, count * 4096, pages) != 0) return 0;
    for (size_t k = 0; k < count; k++)
        if (!(pages[k] & 1)) return 0;
    return 1;
}
void t_prepare(void *const *consts, int64_t j)
{
    float *dst = consts[1 + j];
    float scale = PREPARED_BYTES >= (2 << 20) && !resident(dst, PREPARED_BYTES) ? -1.0f : 1.0f;
    for (int k = 0; k < 4; k++) dst[k] = scale * ((const float *)consts[0])[k] * (float)(j + 2);
    if (PREPARED_BYTES > 16) dst[PREPARED_BYTES / 4 - 1] = 0; /* its last float: inside the block (ASan) */
}
/* y = x * c + 2c (saved prepared buffer 0) + 3c (buffer 1, made by prepare) + LEVEL; a NaN is an error. */
int t_main(void *const *args, void *const *outs, const int64_t *dims, uint8_t *arena, const void *const *consts)
{
    const float *x = args[0], *c = consts[0], *p0 = consts[1], *p1 = consts[2];
    float *y = outs[0], *tmp = (float *)arena;
    for (int64_t i = 0; i < dims[0] * 4; i++) {
        if (isnan(x[i])) { message = "a NaN in x"; return 3; }
        tmp[i] = x[i] * c[i % 4];
        y[i] = tmp[i] + p0[i % 4] + p1[i % 4] + LEVEL;
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def natives(tmp_path_factory):
    """The hand-written native code above at two levels (LEVEL 0 and 100) as shared objects, and at level 0 with
    prepared buffers of 3 MiB ("big")."""
    import subprocess

    from cuvil.backends.cpu import toolchain

    folder = tmp_path_factory.mktemp("native")
    (folder / "native.c").write_text(NATIVE)
    images = {}
    builds = ((0, ["-DLEVEL=0"]), (100, ["-DLEVEL=100"]), ("big", ["-DLEVEL=0", f"-DPREPARED_BYTES={3 << 20}"]))
    for key, flags in builds:
        so = folder / f"native{key}.so"
        subprocess.run([toolchain.find_compiler().path, "-O1", "-shared", "-fPIC", *flags, str(folder / "native.c"),
                        "-o", str(so), "-lm"], check=True)
        images[key] = so.read_bytes()
    return images


def _own_file(natives, *, levels=((0, 0),), triple="x86_64-linux-gnu", version=1, features=0, extra=(),
              meta=b'{"format": 1, "entries": {"main": {}}}', more_checks=(), consts=((0, 16),),
              prepared=((0, 0, 16),)):
    """A .cuv from the tests' writer: entry `main` (x f32[n, 4] -> y f32[n, 4]), one constant, prepared buffer 0
    saved (`prepared`: (index, offset, bytes) of the saved ones) and 1 made at load; `levels` = (LEVEL, feature
    bits) of each native section."""
    n = sym("n")
    t = TensorType("f32", (n, 4))
    c = np.array([1, 2, 3, 4], np.float32)
    checks = check_program([t], [t], ["n"], [(0, 0)], []) + list(more_checks)
    entries = cuv_writer.entries_text([{"name": "main", "prefix": "t_", "inputs": [("x", "f32", 2)],
                                        "outputs": [("y", "f32", 2)], "symbols": ["n"], "consts": list(consts),
                                        "prepared": list(prepared), "checks": checks}])
    sections = [("meta", meta), ("entries", entries)]
    sections += [("native" if k == 0 else f"native.{k}", natives[level], 0, bits)
                 for k, (level, bits) in enumerate(levels)]
    sections += [("consts", c.tobytes()), ("prepared", (2 * c).tobytes()), *extra]
    return cuv_writer.pack(sections, triple=triple, features=features, version=version)


def _run_own(tmp_path, data, x):
    built = c_build.runtime()
    (tmp_path / "m.cuv").write_bytes(data)
    np.save(tmp_path / "x.npy", x)
    return c_build.run(built, built.cli, tmp_path / "m.cuv", tmp_path / "x.npy", "-o", tmp_path / "out")


def test_own_writer_file_with_saved_and_made_prepared_buffers(natives, tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = _run_own(tmp_path, _own_file(natives, extra=[("future", b"ignored section")]), x)
    assert out.returncode == 0, out.stderr
    c = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "output_0.npy"), x * c + 2 * c + 3 * c)


@pytest.mark.parametrize("sanitize", [False, pytest.param(True, marks=needs_asan)], ids=["release", "asan"])
def test_prepared_buffers_made_at_load_share_one_block_without_overlapping(natives, tmp_path, sanitize):
    """With none saved, both prepared buffers are made at load, in one block: each its own 16 bytes (the second
    one's 3c is not the first one's 2c), none past the block's end (AddressSanitizer)."""
    built = c_build.runtime(sanitize=sanitize)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (tmp_path / "m.cuv").write_bytes(_own_file(natives, prepared=()))
    np.save(tmp_path / "x.npy", x)
    out = c_build.run(built, built.cli, tmp_path / "m.cuv", tmp_path / "x.npy", "-o", tmp_path / "out")
    assert out.returncode == 0, out.stderr
    c = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "output_0.npy"), x * c + 2 * c + 3 * c)


@pytest.mark.skipif(sys.platform != "linux" or tuple(map(int, re.findall(r"\d+", platform.release())[:2])) < (5, 14),
                    reason="MADV_POPULATE_WRITE is Linux 5.14's")
@pytest.mark.parametrize("sanitize", [False, pytest.param(True, marks=needs_asan)], ids=["release", "asan"])
def test_prepared_buffers_of_huge_pages_are_in_memory_before_prepare_writes_them(natives, tmp_path, sanitize):
    """Two 3 MiB prepared buffers (one block of three huge pages, shared out to the threads that fault it in):
    each one's pages are all resident when its prepare runs (it negates what it writes if not), and the writes
    stay in the block (AddressSanitizer)."""
    built = c_build.runtime(sanitize=sanitize)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (tmp_path / "m.cuv").write_bytes(_own_file({0: natives["big"]}, prepared=()))
    np.save(tmp_path / "x.npy", x)
    out = c_build.run(built, built.cli, tmp_path / "m.cuv", tmp_path / "x.npy", "-o", tmp_path / "out")
    assert out.returncode == 0, out.stderr
    c = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "output_0.npy"), x * c + 2 * c + 3 * c)


def test_a_file_with_the_winograd_transforms_saved_runs_as_one_that_makes_them(tmp_path):
    """The artifact cache's files save the transformed weights (`save_transforms`), exported ones make them at
    load: cuvil-run gives the same outputs for both, bit for bit, and the saved transform is 4x its weight."""
    pytest.importorskip("onnx")
    from cuvil.backends.cpu import export
    from cuvil.runtime import container

    from .models import winograd_conv_onnx

    model, weights = winograd_conv_onnx(np.random.default_rng(8), 64)
    exe = cuvil.load_onnx(model.SerializeToString()).optimize().executable
    x = np.random.default_rng(9).standard_normal((1, 16, 20, 20)).astype(np.float32)
    built, outs, sizes = c_build.runtime(), [], []
    np.save(tmp_path / "x.npy", x)
    for saved in (False, True):
        path = tmp_path / f"saved{saved}.cuv"
        export.write(path, {"main": (exe, {"kind": "ir"})}, save_transforms=saved)
        run = c_build.run(built, built.cli, path, tmp_path / "x.npy", "-o", tmp_path / f"out{saved}")
        assert run.returncode == 0, run.stderr
        outs.append(np.load(tmp_path / f"out{saved}" / "output_0.npy"))
        rows = container.Container.open(path).rows
        sizes.append(rows["consts"].size + rows["prepared"].size)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], exe(x)[0])
    assert sizes[0] <= weights * 1.02 and sizes[1] - sizes[0] >= 3 * 16 * 16 * 9 * 4  # the transform: 36 for 9


def test_a_left_out_constant_that_prepare_would_read_is_refused_before_any_prepare(natives, tmp_path):
    """Constant 0 is `derived` (left out), but prepared buffer 1, made from it, is not saved: the runtime refuses
    the file (asking `packed_source`) instead of running prepare on a NULL constant."""
    out = _run_own(tmp_path, _own_file(natives, consts=[None]), np.ones((2, 4), np.float32))
    assert out.returncode != 0 and "prepared buffer 1 is neither saved nor made from a stored constant" in out.stderr, \
        out.stderr


def test_the_best_native_level_the_cpu_has_is_loaded(natives, tmp_path):
    """native.1 needs bit 0 (sse4_2, on every x86-64 that runs the tests) and wins over the featureless native;
    native.2 needs sve (an aarch64 bit) and is passed over."""
    x = np.ones((2, 4), np.float32)
    out = _run_own(tmp_path, _own_file(natives, levels=((0, 0), (100, 1), (0, 1 << 33))), x)
    assert out.returncode == 0, out.stderr
    c = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "output_0.npy"), x * c + 5 * c + 100)


@pytest.mark.parametrize("kwargs, message", [
    ({"triple": "aarch64-linux-gnu"}, "made for aarch64-linux-gnu"),
    ({"features": 1 << 33}, "this CPU lacks sve"),
    ({"levels": ((0, 1 << 33),)}, "this CPU lacks sve"),
    ({"version": 3}, "format version 3 is newer than this runtime's (2)"),
])
def test_files_for_another_machine_or_format_are_refused(natives, tmp_path, kwargs, message):
    out = _run_own(tmp_path, _own_file(natives, **kwargs), np.ones((2, 4), np.float32))
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_the_native_codes_error_message_is_the_runtimes(natives, tmp_path):
    """The model's cuvil_last_error() becomes the runtime's message when its entry returns non-zero."""
    x = np.ones((2, 4), np.float32)
    x[1, 2] = np.nan
    out = _run_own(tmp_path, _own_file(natives), x)
    assert out.returncode != 0 and "entry 'main' failed (code 3): a NaN in x" in out.stderr, out.stderr


def test_a_compressed_section_the_runtime_reads_is_refused(natives, tmp_path):
    data = _own_file(natives)
    rows = cuv_writer.parts(data)
    k = [p.name for p in rows[2:]].index("entries")
    flipped = bytearray(data)
    flipped[128 + 96 * k + 64] = 1  # the zlib flag of `entries`
    out = _run_own(tmp_path, cuv_writer.resign(bytes(flipped)), np.ones((2, 4), np.float32))
    assert out.returncode != 0 and "section 'entries' has bad flags" in out.stderr, out.stderr


def test_the_python_loader_reads_the_same_file(natives, tmp_path):
    """A file of the tests' writer passes the Python container's checks too (one format, two writers)."""
    from cuvil.runtime.container import Container

    (tmp_path / "m.cuv").write_bytes(_own_file(natives))
    c = Container.open(tmp_path / "m.cuv")
    assert bytes(c.data("consts")) == np.array([1, 2, 3, 4], np.float32).tobytes()


@pytest.mark.parametrize("meta, valid", [
    (b'{"a": [1, -0.5e+3, 0, true, false, null, "\\u00e9\\n\xc3\xa9"], "b": {}}', True),
    (b' [ ] ', True),
    (b'{"a": 01}', False), (b'{"a": 1,}', False), (b'{"a" 1}', False), (b'[1e]', False), (b'[-]', False),
    (b'"\xff"', False), (b'{}x', False), (b'{"a": "\x01"}', False), (b'[' * 100 + b']' * 100, False), (b'', False),
])
def test_meta_must_be_valid_json(natives, tmp_path, meta, valid):
    built = c_build.runtime()
    (tmp_path / "m.cuv").write_bytes(_own_file(natives, meta=meta))
    out = c_build.run(built, built.driver, "files", tmp_path / "m.cuv")
    _, code, loaded, *message = out.stdout.split(" ")
    assert (code == "0") == valid, out.stdout
    if not valid:
        assert loaded == "0" and "section 'meta' is not valid JSON" in out.stdout, out.stdout


GE = 10  # cuvil_checks.h's CUVIL_OP_GE: `a b ge` holds when a >= b


def test_a_ge_relation_names_its_sides_and_values(natives, tmp_path):
    """A window check `n >= 2` (sym 0, const 2, ge) appended to the program: n = 1 is refused with both sides."""
    data = _own_file(natives, more_checks=[OP["sym"], 0, OP["const"], 2, GE])
    built = c_build.runtime()
    (tmp_path / "m.cuv").write_bytes(data)
    info = c_build.run(built, built.cli, tmp_path / "m.cuv", "--info")
    assert "needs n >= 2" in info.stdout, info.stdout + info.stderr
    out = _run_own(tmp_path, data, np.ones((1, 4), np.float32))
    assert out.returncode == 1 and "entry 'main' needs n >= 2, but the inputs give 1 and 2; n = 1 (x.shape[0])" \
        in out.stderr, out.stderr
    assert _run_own(tmp_path, data, np.ones((2, 4), np.float32)).returncode == 0


# A section of several 1 MiB pieces (format 2 hashes them on threads, two at a time) with an odd-sized last one.
BIG = np.random.default_rng(7).integers(0, 256, (3 << 20) + 4097, np.uint8).tobytes()


@pytest.mark.parametrize("disabled", ["", "sha_ni,sha2"], ids=["cpu", "portable"])
@pytest.mark.parametrize("version", [1, 2])
def test_both_format_versions_load_and_a_flip_in_any_piece_is_refused(natives, tmp_path, version, disabled,
                                                                      monkeypatch):
    """Format 1 (a section's SHA-256 over its bytes) is still read; format 2's pieces are each checked: a byte
    flipped in the middle piece or in the short last one is refused before anything loads, by the instructions'
    path and by the portable code (CUVIL_DISABLE_CPU_FEATURES)."""
    from cuvil.runtime.container import Container

    monkeypatch.setenv("CUVIL_DISABLE_CPU_FEATURES", disabled)
    data = _own_file(natives, version=version, extra=[("future", BIG)])
    x = np.ones((2, 4), np.float32)
    assert _run_own(tmp_path, data, x).returncode == 0
    (tmp_path / "m.cuv").write_bytes(data)
    Container.open(tmp_path / "m.cuv").check("future")
    big = next(p for p in cuv_writer.parts(data) if p.name == "future")
    for at in (big.offset + (3 << 19), big.offset + big.size - 1):
        flipped = bytearray(data)
        flipped[at] ^= 0x10
        out = _run_own(tmp_path, bytes(flipped), x)
        assert out.returncode != 0 and "section 'future' does not match its SHA-256" in out.stderr, out.stderr
        (tmp_path / "bad.cuv").write_bytes(bytes(flipped))
        with pytest.raises(cuvil.ArtifactError, match="section 'future' does not match its SHA-256"):
            Container.open(tmp_path / "bad.cuv").check("future", threads=3)


# Sections whose full pieces the C runtime hashes side by side, sixteen in AVX-512 lanes: 9 full pieces and a
# short last one, 9 full pieces and none short, an empty one (no piece), so a batch holds pieces of two sections.
SIDE_BY_SIDE = [("many", BIG[:1 << 20] * 9 + BIG[:4096]), ("exact", BIG[1:(1 << 20) + 1] * 9), ("empty", b"")]


@pytest.mark.parametrize("disabled", ["", "avx512f", "avx512f,sha_ni,sha2"], ids=["cpu", "pairs", "portable"])
def test_full_pieces_of_several_sections_hashed_together_are_each_checked(natives, tmp_path, disabled, monkeypatch):
    """The full pieces of every section are hashed first, side by side, then the short last ones: each section's
    digest is still over its own pieces in order. A flip in the first or last full piece of either section, or in
    the short one, is refused, on every hashing path."""
    monkeypatch.setenv("CUVIL_DISABLE_CPU_FEATURES", disabled)
    data = _own_file(natives, version=2, extra=SIDE_BY_SIDE)
    x = np.ones((2, 4), np.float32)
    assert _run_own(tmp_path, data, x).returncode == 0
    found = {p.name: p for p in cuv_writer.parts(data)}
    many, exact = found["many"], found["exact"]
    for name, at in (("many", many.offset), ("many", many.offset + (9 << 20) - 1), ("many", many.offset + (9 << 20)),
                     ("exact", exact.offset + 7), ("exact", exact.offset + exact.size - 1)):
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        out = _run_own(tmp_path, bytes(flipped), x)
        assert out.returncode != 0 and f"section '{name}' does not match its SHA-256" in out.stderr, out.stderr
