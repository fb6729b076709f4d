"""Build the standalone C runtime (cuvil/runtime/c/) and `cuvil-run` with the system C compiler, or for another
target with its cross toolchain (docs/targets.md).

    cuvil build-runtime --out DIR [--sanitize] [--target aarch64]    (or python -m cuvil.runtime.build --out DIR)

gives DIR/libcuvilrt.so, DIR/libcuvilrt.a, DIR/cuvil-run (linked with the static library, so it runs without
Python or the build folder), DIR/libcuvilcuda.so (the CUDA driver path, which the runtime opens beside itself at
the first `.cuv` for CUDA) and DIR/include/cuvil_runtime.h. The release build is -Os and stripped; `sanitize`
builds everything with AddressSanitizer instead (for the tests and CI).

    >>> import tempfile
    >>> built = build_runtime(tempfile.mkdtemp())
    >>> sorted(built.sizes) == ["cuvil-run", "libcuvilcuda.so", "libcuvilrt.a", "libcuvilrt.so"]
    True
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

from ..backends.cpu import targets, toolchain
from ..errors import CuvilError

SOURCE_DIR = Path(__file__).with_name("c")
LIBRARY_SOURCES = ("cuvil_runtime.c", "cuvil_format.c", "cuvil_hash.c", "cuvil_cuda_load.c")
CUDA_SOURCE = "cuvil_cuda_rt.c"  # libcuvilcuda.so
HEADERS = ("cuvil_runtime.h", "cuvil_internal.h", "cuvil_checks.h", "cuvil_hash.h")
CLI_SOURCE = "cuvil_run.c"
COMMON_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-fPIC", "-ffunction-sections", "-fdata-sections")
RELEASE_FLAGS = ("-Os", "-DNDEBUG")
HASH_FLAGS = ("-O2",)  # weights are hashed at every open: the SHA-256 loop is worth its few hundred bytes of -O2
SANITIZE_FLAGS = ("-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer")
LINK_LIBS = ("-ldl", "-lpthread")


@dataclasses.dataclass(frozen=True)
class RuntimeBuild:
    """What `build_runtime` made: the libraries, the command, the public header, and their sizes in bytes."""
    shared: Path
    static: Path
    cli: Path
    header: Path
    sizes: dict


def sources() -> list[Path]:
    """Every file the runtime is built from (the tests key their cached build on these)."""
    return [SOURCE_DIR / name for name in (*LIBRARY_SOURCES, *HEADERS, CLI_SOURCE, CUDA_SOURCE)]


def build_runtime(out_dir, *, sanitize: bool = False, target: str = "cpu") -> RuntimeBuild:
    """Compile libcuvilrt.so, libcuvilrt.a and cuvil-run into `out_dir` for `target` (a row of targets.py: the
    runtime is plain C99, so only its architecture matters); raises CompileError with the compiler's message
    when a step fails."""
    out = Path(out_dir)
    objects_dir = out / "obj"
    objects_dir.mkdir(parents=True, exist_ok=True)
    row = targets.levels(target)[0]
    compiler = toolchain.find_compiler(None if row.is_host else row)
    cc = compiler.command
    mode = SANITIZE_FLAGS if sanitize else RELEASE_FLAGS
    objects = []
    for name in LIBRARY_SOURCES:
        obj = objects_dir / name.replace(".c", ".o")
        extra = HASH_FLAGS if name == "cuvil_hash.c" and not sanitize else ()
        _run([*cc, *COMMON_FLAGS, *mode, *extra, "-c", str(SOURCE_DIR / name), "-o", str(obj)])
        objects.append(str(obj))
    strip = () if sanitize else ("-s", "-Wl,--gc-sections")
    shared, static, cli = out / "libcuvilrt.so", out / "libcuvilrt.a", out / "cuvil-run"
    _run([*cc, *mode, "-shared", *strip, *objects, "-o", str(shared), *LINK_LIBS])
    static.unlink(missing_ok=True)
    _run([*_archiver(compiler), "rcs", str(static), *objects])
    _run([*cc, *COMMON_FLAGS, *mode, *strip, str(SOURCE_DIR / CLI_SOURCE), str(static), "-o", str(cli), *LINK_LIBS])
    cuda = out / "libcuvilcuda.so"
    _run([*cc, *COMMON_FLAGS, *mode, "-shared", *strip, str(SOURCE_DIR / CUDA_SOURCE), "-o", str(cuda), *LINK_LIBS])
    include = out / "include"
    include.mkdir(exist_ok=True)
    header = Path(shutil.copy(SOURCE_DIR / "cuvil_runtime.h", include / "cuvil_runtime.h"))
    sizes = {p.name: p.stat().st_size for p in (shared, static, cli, cuda)}
    return RuntimeBuild(shared, static, cli, header, sizes)


def _archiver(compiler: toolchain.Compiler) -> list:
    """zig's own `ar`; else the `ar` beside the compiler (gcc and clang name theirs), else the one on PATH."""
    if compiler.family == "zig":
        return [compiler.path, "ar"]
    try:
        named = subprocess.run([compiler.path, "-print-prog-name=ar"], capture_output=True, text=True,
                               timeout=30).stdout.strip()
    except OSError:
        named = ""
    found = shutil.which(named) if named else None
    found = found or shutil.which("ar")
    if not found:
        raise toolchain.CompilerNotFoundError("building libcuvilrt.a needs `ar` (binutils), which is not on PATH")
    return [found]


def _run(cmd: list) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise toolchain.CompileError(f"building the C runtime failed (exit {out.returncode}): {' '.join(cmd)}\n"
                                     f"{out.stderr.strip()}")


def main(argv=None) -> int:
    """`cuvil build-runtime --out DIR [--sanitize]`: build, then print what was made and its size."""
    parser = argparse.ArgumentParser(prog="cuvil build-runtime", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for libcuvilrt.so, libcuvilrt.a, cuvil-run, include/")
    parser.add_argument("--sanitize", action="store_true", help="build with AddressSanitizer (not stripped)")
    parser.add_argument("--target", default="cpu", help="a target of docs/targets.md (default: this machine)")
    args = parser.parse_args(argv)
    try:
        built = build_runtime(args.out, sanitize=args.sanitize, target=args.target)
    except CuvilError as e:
        print(f"cuvil build-runtime: error: {e}", file=sys.stderr)
        return 1
    for name, size in built.sizes.items():
        print(f"{built.shared.with_name(name)}  {size / 1024:.1f} KB")
    print(f"{built.header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
