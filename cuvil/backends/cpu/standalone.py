"""The self-contained shared object of a `.cuv` (docs/artifact.md, "The native code's ABI"): every entry's
generated C with its own prefix, the kernel library compiled -fPIC into the same link, and a version script
that exports only the entries, `cuvil_abi_version`, `cuvil_last_error` and `cuvil_set_num_threads`.

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
LIBRARY_SYMBOLS = ("cuvil_abi_version", "cuvil_last_error", "cuvil_set_num_threads")


def entry_prefix(k: int) -> str:
    """Entry 0 keeps the generated names (`cuvil_main`), so its object is the one in-process code loads."""
    return "cuvil_" if k == 0 else f"cuvil_e{k}_"


def prefixed(source: str, prefix: str) -> str:
    """Generated C whose entry points (`cuvil_main`, ...) are named `PREFIX main`, ...: by macros, so the code
    generator stays as it is."""
    if prefix == "cuvil_":
        return source
    return "".join(f"#define cuvil_{s} {prefix}{s}\n" for s in ENTRY_SYMBOLS) + source


def build(sources: list, level: int | None = None) -> bytes:
    """The shared object's bytes for the generated C `sources` (entry k gets `entry_prefix(k)`)."""
    level = opt_level() if level is None else level
    objects = [_object(prefixed(src, entry_prefix(k)), "entry", level, model_flags()) for k, src in enumerate(sources)]
    return _link(objects + library_objects(level), [entry_prefix(k) for k in range(len(sources))])


def library_objects(level: int) -> list:
    """The objects every exported library links, whatever the model (built once per machine and level): the kernel
    library compiled -fPIC and the once-per-library ABI (cuvil_export.c)."""
    kernel_src = "".join(f'#include "{name}"\n' for name in kernels.SOURCES)
    return [_object(kernel_src, "kernels", level, ()),
            _object((runtime_dir() / "cuvil_export.c").read_text(), "export", level, ())]


def load_entry(source: str, level: int) -> ctypes.CDLL:
    """Generated C loaded in this process (its kernels resolved against the loaded kernel library): its object is
    compiled as `build` compiles entry 0, so saving it to the artifact cache or a .cuv compiles nothing again."""
    obj = _object(source, "entry", level, model_flags())
    lib = obj.with_name("model.so")
    if not lib.exists():
        fd, tmp = tempfile.mkstemp(prefix=".model-", suffix=".so", dir=obj.parent)
        os.close(fd)
        try:
            extra = shlex.split(os.environ.get("CUVIL_EXTRA_CFLAGS", ""))  # as compiled (-fsanitize=address)
            _run_linker([toolchain.find_compiler().path, "-shared", "-fopenmp", *extra, "-o", tmp, str(obj), "-lm"])
            os.replace(tmp, lib)  # published whole: another process may be linking the same object
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return ctypes.CDLL(str(lib), mode=ctypes.RTLD_LOCAL)


def _object(source: str, name: str, level: int, extra: tuple) -> Path:
    """An object file compiled -fPIC from `source`, in the toolchain's cache (its entry calls it lib.so)."""
    flags = tuple(f for f in toolchain.compile_flags(level, extra) if f != "-shared") + ("-c",)
    folders = [runtime_dir(), kernels.include_dir()]
    depends = [runtime_dir() / "cuvil_rt.h"] + [kernels.include_dir() / h for h in
                                                        kernels.SOURCES + kernels.HEADERS]
    return toolchain.build_library(source, name=f"obj-{name}", flags=flags, include_dirs=folders,
                                   depends=depends).path


def _link(objects: list, prefixes: list) -> bytes:
    """Link with `--no-undefined` (anything not in the objects, libc, libm or libgomp fails here, not at load)."""
    compiler = toolchain.find_compiler()
    exported = "".join(f"{p}{s};" for p in prefixes for s in ENTRY_SYMBOLS) + "".join(f"{s};" for s in LIBRARY_SYMBOLS)
    with tempfile.TemporaryDirectory(prefix="cuvil-link-") as tmp:
        script, out = Path(tmp) / "exports.map", Path(tmp) / "model.so"
        script.write_text(f"{{ global: {exported} local: *; }};\n")
        cmd = [compiler.path, "-shared", "-fopenmp", "-o", str(out), *map(str, objects), "-lm",
               f"-Wl,--version-script={script}", "-Wl,--no-undefined", "-Wl,-z,noexecstack", "-Wl,--as-needed"]
        _run_linker(cmd)
        return out.read_bytes()


def _run_linker(cmd: list) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise toolchain.CompileError(f"linking a model library failed: {' '.join(cmd)}\n{done.stderr}")
