"""The self-contained shared object of a `.cuv` (docs/artifact.md, "The native code's ABI"): every entry's
generated C with its own prefix, the kernel library compiled -fPIC into the same link, and a version script
that exports only the entries, `cuvil_abi_version`, `cuvil_last_error`, `cuvil_set_num_threads` and
`cuvil_swap_call_threads` (a thread count for one call).

In-process compilation does not go through here (it links the model against the loaded kernel library, see
backend.py); export and the artifact cache do. Every object file is cached by the toolchain like a library.
"""
from __future__ import annotations

import ctypes
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from . import kernels, toolchain
from .flags import model_flags, opt_level, runtime_dir

ENTRY_SYMBOLS = ("main", "arena_bytes", "packed_count", "packed_bytes", "packed_source", "prepare")
LIBRARY_SYMBOLS = ("cuvil_abi_version", "cuvil_last_error", "cuvil_set_num_threads", "cuvil_swap_call_threads",
                   "cuvil_pool_waits", "cuvil_pool_idle")  # the pool's counters: bench.overhead and bench.ray --trace


def entry_prefix(k: int) -> str:
    """Entry 0 keeps the generated names (`cuvil_main`), so its object is the one in-process code loads."""
    return "cuvil_" if k == 0 else f"cuvil_e{k}_"


def prefixed(source: str, prefix: str) -> str:
    """Generated C whose entry points (`cuvil_main`, ...) are named `PREFIX main`, ...: by macros, so the code
    generator stays as it is."""
    if prefix == "cuvil_":
        return source
    return "".join(f"#define cuvil_{s} {prefix}{s}\n" for s in ENTRY_SYMBOLS) + source


def build(sources: list, level: int | None = None, target=None) -> bytes:
    """The shared object's bytes for the generated C `sources` (entry k gets `entry_prefix(k)`), for `target` (a
    targets.Target; None: the host); it links the kernel units the sources call."""
    level = opt_level() if level is None else level
    objects = [_object(prefixed(src, entry_prefix(k)), "entry", level, model_flags(target), target)
               for k, src in enumerate(sources)]
    units = sorted({u for src in sources for u in kernels.units_for(src)})
    return _link(objects + library_objects(level, target, units), [entry_prefix(k) for k in range(len(sources))],
                 target)


def library_objects(level: int, target=None, units=None) -> list:
    """The objects an exported library links besides its entries (built once per target and level): the kernel
    library's `units` (default: all of them), the objects the in-process library links too, and the
    once-per-library ABI (cuvil_export.c)."""
    return [*kernels.unit_objects(tuple(kernels.UNITS) if units is None else units, level, target),
            _object((runtime_dir() / "cuvil_export.c").read_text(), "export", level, (), target)]


def entry_object(source: str, level: int) -> Path:
    """The host object of generated C, compiled as `build` compiles entry 0."""
    return _object(source, "entry", level, model_flags())


def load_entry(obj: Path) -> ctypes.CDLL:
    """An entry object loaded in this process (its kernels resolved against the loaded kernel library): saving it to
    the artifact cache or a .cuv then compiles nothing again."""
    lib = obj.with_name("model.so")
    if not lib.exists():
        fd, tmp = tempfile.mkstemp(prefix=".model-", suffix=".so", dir=obj.parent)
        os.close(fd)
        try:
            compiler = toolchain.find_compiler()
            extra = shlex.split(os.environ.get("CUVIL_EXTRA_CFLAGS", ""))  # as compiled (-fsanitize=address)
            with tempfile.TemporaryDirectory(prefix="cuvil-link-") as folder:
                _run_linker([*compiler.command, "-shared", *toolchain.link_flags(compiler), "-pthread", *extra, "-o",
                             tmp, *map(str, toolchain.named_objects([obj], folder)), "-lm"])
            os.replace(tmp, lib)  # published whole: another process may be linking the same object
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return ctypes.CDLL(str(lib), mode=ctypes.RTLD_LOCAL)


def _object(source: str, name: str, level: int, extra: tuple, target=None) -> Path:
    """An object file compiled -fPIC from `source`, in the toolchain's cache (its entry calls it lib.so)."""
    flags = toolchain.object_flags(level, extra, target, toolchain.find_compiler(target))
    folders = [runtime_dir(), kernels.include_dir()]
    depends = [runtime_dir() / "cuvil_rt.h"] + [kernels.include_dir() / h for h in
                                                        kernels.SOURCES + kernels.HEADERS]
    return toolchain.build_library(source, name=f"obj-{name}", flags=flags, include_dirs=folders,
                                   depends=depends, target=target).path


def _link(objects: list, prefixes: list, target=None) -> bytes:
    """Link with `--no-undefined` (anything not in the objects, libc, libm or libgomp fails here, not at load)."""
    compiler = toolchain.find_compiler(target)
    exported = "".join(f"{p}{s};" for p in prefixes for s in ENTRY_SYMBOLS) + "".join(f"{s};" for s in LIBRARY_SYMBOLS)
    with tempfile.TemporaryDirectory(prefix="cuvil-link-") as tmp:
        script, out = Path(tmp) / "exports.map", Path(tmp) / "model.so"
        script.write_text(f"{{ global: {exported} local: *; }};\n")
        _run_linker([*compiler.command, "-shared", *toolchain.link_flags(compiler), "-pthread", "-o", str(out),
                     *map(str, toolchain.named_objects(objects, tmp)), "-lm", f"-Wl,--version-script={script}",
                     "-Wl,--no-undefined", "-Wl,-z,noexecstack", "-Wl,--as-needed"])
        return out.read_bytes()


def _run_linker(cmd: list) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise toolchain.CompileError(f"linking a model library failed: {' '.join(cmd)}\n{done.stderr}")
