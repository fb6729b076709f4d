"""The self-contained shared object of a `.cuv` (docs/artifact.md, "The native code's ABI"): every entry's
generated C with its own prefix, the kernel library compiled -fPIC into the same link, and a version script
that exports only the entries, `cuvil_abi_version`, `cuvil_last_error`, `cuvil_set_num_threads` and
`cuvil_swap_call_threads` (a thread count for one call).

In-process compilation does not go through here (it links the model against the loaded kernel library, see
backend.py); export and the artifact cache do. Every object file is cached by the toolchain like a library.
"""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from . import backend, kernels, toolchain

ENTRY_SYMBOLS = ("main", "arena_bytes", "packed_count", "packed_bytes", "prepare")
LIBRARY_SYMBOLS = ("cuvil_abi_version", "cuvil_last_error", "cuvil_set_num_threads", "cuvil_swap_call_threads")


def entry_prefix(k: int) -> str:
    return f"cuvil_e{k}_"


def prefixed(source: str, prefix: str) -> str:
    """Generated C whose entry points (`cuvil_main`, ...) are named `PREFIX main`, ...: by macros, so the code
    generator stays as it is."""
    return "".join(f"#define cuvil_{s} {prefix}{s}\n" for s in ENTRY_SYMBOLS) + source


def build(sources: list, opt_level: int | None = None, target=None) -> bytes:
    """The shared object's bytes for the generated C `sources` (entry k gets `entry_prefix(k)`), for `target` (a
    targets.Target; None: the host)."""
    level = backend.opt_level() if opt_level is None else opt_level
    objects = [_object(prefixed(src, entry_prefix(k)), "entry", level, backend.model_flags(target), target)
               for k, src in enumerate(sources)]
    return _link(objects + library_objects(level, target), [entry_prefix(k) for k in range(len(sources))], target)


def library_objects(opt_level: int, target=None) -> list:
    """The objects every exported library links, whatever the model (built once per target and level): the kernel
    library compiled -fPIC and the once-per-library ABI (cuvil_export.c)."""
    kernel_src = "".join(f'#include "{name}"\n' for name in kernels.SOURCES)
    return [_object(kernel_src, "kernels", opt_level, (), target),
            _object((backend.runtime_dir() / "cuvil_export.c").read_text(), "export", opt_level, (), target)]


def _object(source: str, name: str, opt_level: int, extra: tuple, target=None) -> Path:
    """An object file compiled -fPIC from `source`, in the toolchain's cache (its entry calls it lib.so)."""
    compiler = toolchain.find_compiler(target)
    flags = tuple(f for f in toolchain.compile_flags(opt_level, extra, target, compiler) if f != "-shared") + ("-c",)
    folders = [backend.runtime_dir(), kernels.include_dir()]
    depends = [backend.runtime_dir() / "cuvil_rt.h"] + [kernels.include_dir() / h for h in
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
        inputs = [Path(tmp) / f"{k}.o" for k in range(len(objects))]  # the cache names them lib.so: zig's clang
        for link, obj in zip(inputs, objects):  # would take those for shared libraries
            link.symlink_to(obj)
        cmd = [*compiler.command, "-shared", *toolchain.link_flags(compiler), "-pthread", "-o", str(out),
               *map(str, inputs), "-lm", f"-Wl,--version-script={script}", "-Wl,--no-undefined", "-Wl,-z,noexecstack",
               "-Wl,--as-needed"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise toolchain.CompileError(f"linking the exported library failed: {' '.join(cmd)}\n{done.stderr}")
        return out.read_bytes()
