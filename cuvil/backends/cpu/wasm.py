"""The wasm32 rows of the C backend (targets.py: `wasm32`, SIMD128, and `wasm32-relaxed`): the model's generated C
and the kernel library compiled into one WebAssembly module per row (docs/artifact.md, "The wasm32 module's ABI";
docs/targets.md, "wasm32").

The toolchain is the clang inside the `ziglang` wheel (`python -m ziglang cc`): one `pip install`, no system
package, and it ships wasi-libc. Objects are cached like native libraries (by source, headers, flags and the
toolchain's version), under `CUVIL_CACHE_DIR/wasm`.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ...errors import CuvilError, UnsupportedError
from . import backend, kernels, standalone, toolchain

COMPILER = (sys.executable, "-m", "ziglang", "cc")
TRIPLE = "wasm32-wasi"
COMPILE_FLAGS = ("-target", TRIPLE, "-std=gnu11", "-fno-math-errno")  # beside each row's (targets.py)
# The GEMM's register block where the IR was laid out for a wider host (vectors of several v128, see
# `vector_lanes`): 8 v128 accumulators, as a JIT with 16 vector registers (V8 and wasmtime on x86-64) keeps them.
WIDENED_GEMM_BLOCK = {8: (4, 1), 16: (2, 1)}
STACK_BYTES = 1 << 20
MODULE_SYMBOLS = ("cuvil_alloc", "cuvil_free")  # wasm_abi.c: the host's way to place inputs in linear memory
NAMES_VARIABLE = "CUVIL_WASM_NAMES"  # "1": keep the function names, for a profiler (bench/wasm_profile.py)


class WasmToolchainError(CuvilError):
    """The wasm32 toolchain (the `ziglang` pip package) is missing or failed."""


def include_dir() -> Path:
    """The wasm-only headers: a one-thread `omp.h` (OpenMP is off on wasm32) and the module ABI's C."""
    return Path(__file__).with_name("wasm_include")


@functools.lru_cache(maxsize=1)
def compiler_version() -> str:
    """`zig version`, or a WasmToolchainError naming what to install."""
    if importlib.util.find_spec("ziglang") is None:
        raise WasmToolchainError("target 'wasm32' needs the ziglang package (a clang for wasm32-wasi): "
                                 "pip install ziglang  (or pip install 'cuvil[wasm]')")
    done = subprocess.run([sys.executable, "-m", "ziglang", "version"], capture_output=True, text=True)
    if done.returncode != 0:
        raise WasmToolchainError(f"`python -m ziglang version` failed: {done.stderr.strip()}")
    return done.stdout.strip()


def vector_lanes(row, block: int | None) -> int:
    """Lanes of the kernels' vector type: the row's (SIMD128's 4), or the blocked layout's width when the IR was laid
    out for a wider host (its weights are packed in blocks of that many channels; 16 lanes are four v128 each)."""
    lanes = block or row.vector_lanes
    if lanes != row.vector_lanes and lanes not in WIDENED_GEMM_BLOCK:
        raise UnsupportedError(f"target {row.name!r}: convolution blocks of {lanes} channels (compile for {row.name})")
    return lanes


def machine_flags(row, block: int | None = None) -> tuple:
    """The row's flags for zig's clang, its vector width, GEMM register block and convolution strip (a widened
    block and the default strip for a host's layout)."""
    lanes = vector_lanes(row, block)
    if lanes == row.vector_lanes:
        return (*row.flags("zig"), f"-DCUVIL_WASM_VL={lanes}")
    mr, nv = WIDENED_GEMM_BLOCK[lanes]
    return (*row.zig_flags, f"-DCUVIL_WASM_VL={lanes}", f"-DCUVIL_MR={mr}", f"-DCUVIL_NV={nv}")


def build(sources: list, row, block: int | None = None, opt_level: int | None = None) -> bytes:
    """The `.wasm` module of wasm32 row `row` (targets.py) for the generated C `sources` (entry k gets
    `standalone.entry_prefix(k)`)."""
    level = backend.opt_level() if opt_level is None else opt_level
    flags = machine_flags(row, block)
    objects = [_object(standalone.prefixed(src, standalone.entry_prefix(k)), level, flags)
               for k, src in enumerate(sources)]
    kernel_src = "".join(f'#include "{name}"\n' for name in kernels.SOURCES)
    objects.append(_object(kernel_src, level, flags))
    abi_src = (backend.runtime_dir() / "cuvil_export.c").read_text() + '#include "wasm_abi.c"\n'
    objects.append(_object(abi_src, level, flags))
    return _link(objects, [standalone.entry_prefix(k) for k in range(len(sources))])


def _object(source: str, opt_level: int, machine: tuple) -> Path:
    """A wasm32 object compiled from `source`, from the cache when its key is there."""
    flags = (f"-O{opt_level}", *COMPILE_FLAGS, *machine,
             *(f"-I{d}" for d in (include_dir(), backend.runtime_dir(), kernels.include_dir())))
    headers = sorted(p for d in (include_dir(), backend.runtime_dir(), kernels.include_dir()) for p in d.iterdir()
                     if p.suffix in (".h", ".c"))
    key = hashlib.sha256("\0".join([source, *flags, compiler_version(), *(p.read_text() for p in headers)])
                         .encode()).hexdigest()[:32]
    path = toolchain.cache_dir() / "wasm" / f"obj-{key}.o"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cuvil-wasm-") as tmp:
        (Path(tmp) / "source.c").write_text(source)
        _run([*COMPILER, *flags, "-c", "source.c", "-o", "out.o"], tmp, "compiling for wasm32")
        os.replace(Path(tmp) / "out.o", path)
    return path


def _link(objects: list, prefixes: list) -> bytes:
    """Link a WASI reactor that exports its memory, the entries and the module ABI, and nothing else (stripped of its
    names unless CUVIL_WASM_NAMES=1)."""
    exported = [f"{p}{s}" for p in prefixes for s in standalone.ENTRY_SYMBOLS]
    exported += [*standalone.LIBRARY_SYMBOLS, *MODULE_SYMBOLS]
    with tempfile.TemporaryDirectory(prefix="cuvil-wasm-link-") as tmp:
        strip = () if os.environ.get(NAMES_VARIABLE) == "1" else ("-s",)
        cmd = [*COMPILER, "-target", TRIPLE, "-mexec-model=reactor", "-o", "model.wasm",
               *map(str, objects), "-lm", *strip, f"-Wl,-z,stack-size={STACK_BYTES}",
               *(f"-Wl,--export={s}" for s in exported)]
        _run(cmd, tmp, "linking the wasm32 module")
        return (Path(tmp) / "model.wasm").read_bytes()


def _run(cmd: list, cwd: str, what: str) -> None:
    compiler_version()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise toolchain.CompileError(f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n{done.stderr.strip()}")
