"""The C toolchain of the CPU backend: find a compiler for a target, read the host's features, build cached
shared libraries.

    >>> from cuvil.backends.cpu import toolchain
    >>> lib = toolchain.load_library("int twice(int x) { return 2 * x; }", name="demo", opt_level=1)
    >>> lib.twice(21)
    42

Compiled libraries live in an on-disk cache (`CUVIL_CACHE_DIR`, default `~/.cache/cuvil`) keyed by the SHA-256
of the source, the headers it names, the flags, the compiler and its version, the host's CPU and Cuvil's version,
so a second process loads them without compiling. Each entry is a folder (`lib.so` plus `meta.json` with the
library's digest) built in a temporary folder and published with one atomic rename; a lock file keeps two
processes from compiling the same entry twice, and an entry whose library no longer matches its digest or fails
to load is deleted and rebuilt.

Compilers, per target (targets.py): the host takes `CC`, else cc, gcc or clang on PATH; another architecture
takes `CUVIL_CC_<ARCH>` (`CUVIL_CC_AARCH64`), else the Debian cross gcc (`aarch64-linux-gnu-gcc`). Either falls
back to the `ziglang` wheel's clang (`pip install cuvil[zig]`), which needs no system compiler at all;
`CUVIL_TOOLCHAIN=zig` chooses it first. docs/targets.md says why.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ...errors import CuvilError

try:  # POSIX only; without it concurrent builds still publish atomically, they may just compile twice.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

log = logging.getLogger("cuvil.backends.cpu")

COMPILER_CANDIDATES = ("cc", "gcc", "clang")
BASE_FLAGS = ("-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11")
# zig's clang has no OpenMP runtime: `omp simd` still applies, the kernels run one thread (cuvil_omp.h).
ZIG_OPENMP_FLAGS = ("-fopenmp-simd", "-Wno-unknown-pragmas", "-Wno-pass-failed")
# Features read from /proc/cpuinfo under these names, and the predefined macros that imply them otherwise.
FEATURE_MACROS = {"avx512f": "__AVX512F__", "avx2": "__AVX2__", "fma": "__FMA__", "avx": "__AVX__",
                  "neon": "__ARM_NEON", "sse2": "__SSE2__"}
ARM_FEATURE_ALIASES = {"asimd": "neon"}


class CompilerNotFoundError(CuvilError):
    """No C compiler for the target on this machine (the message names what to install)."""


class CompileError(CuvilError):
    """The C compiler rejected a source; the message carries its command line and stderr."""


@dataclasses.dataclass(frozen=True)
class Compiler:
    """A C compiler: its absolute path, the first line of its version, and the arguments that come first (zig's
    `cc -target TRIPLE`); `family` is "gcc" (gcc, clang, a cross gcc) or "zig"."""
    path: str
    version: str
    args: tuple = ()
    family: str = "gcc"

    @property
    def command(self) -> list:
        return [self.path, *self.args]


@dataclasses.dataclass(frozen=True)
class Build:
    """A library in the cache: `compiled` says whether this call compiled it (False: a cache hit)."""
    path: Path
    key: str
    compiled: bool
    seconds: float


def find_compiler(target=None) -> Compiler:
    """The compiler for `target` (a targets.Target; None: the host), by the order in this module's docstring."""
    from ...runtime.host import triple  # not at import: the runtime package loads the backend's executable

    if target is not None and target.triple != triple():
        return _cross_compiler(target)
    path = compiler_path()
    if path == _zig_path():
        return _zig_compiler(triple(), path)
    return _probe_compiler(path, os.stat(path).st_mtime_ns)


def compiler_path() -> str:
    """The resolved path of the host compiler `find_compiler` would use, without running it."""
    explicit = os.environ.get("CC")
    names = [] if _prefer_zig() else [explicit] if explicit else list(COMPILER_CANDIDATES)
    for name in names:
        path = shutil.which(name)
        if path:
            return os.path.realpath(path)
    if not explicit and _zig_path():
        return _zig_path()
    where = f"CC={explicit!r} was not found" if explicit else "none of cc, gcc, clang is on PATH"
    raise CompilerNotFoundError(f"Cuvil's CPU backend needs a C compiler: {where}. Install gcc or clang, "
                                "set CC to a compiler's path, or `pip install 'cuvil[zig]'` (a compiler as a wheel).")


def _cross_compiler(target) -> Compiler:
    """`CUVIL_CC_<ARCH>`, else the Debian cross gcc, else zig; the error names the packages that provide one."""
    arch = target.triple.split("-")[0]
    variable = f"CUVIL_CC_{arch.upper()}"
    debian_gcc = [f"{target.gcc_prefix}gcc"] if target.gcc_prefix else []
    names = [os.environ[variable]] if os.environ.get(variable) else debian_gcc
    for name in [] if _prefer_zig() else names:
        path = shutil.which(name)
        if path:
            path = os.path.realpath(path)
            return _probe_compiler(path, os.stat(path).st_mtime_ns)
    if _zig_path():
        return _zig_compiler(target.triple, _zig_path())
    debian = f"`apt-get install gcc-{target.gcc_prefix.rstrip('-')}` (Debian, Ubuntu), " if target.gcc_prefix else ""
    raise CompilerNotFoundError(f"compiling for {target.name} ({target.triple}) needs a cross compiler: "
                                f"{debian}or `pip install 'cuvil[zig]'`, or set {variable} to a compiler's path")


def _prefer_zig() -> bool:
    return os.environ.get("CUVIL_TOOLCHAIN", "") == "zig" and bool(_zig_path())


@functools.lru_cache(maxsize=1)
def _zig_path() -> str:
    """The `zig` binary of the `ziglang` wheel, or "" when it is not installed."""
    try:
        import ziglang  # an optional extra (cuvil[zig])
    except ImportError:
        return ""
    path = Path(ziglang.__file__).with_name("zig.exe" if sys.platform == "win32" else "zig")
    return str(path) if path.is_file() else ""


def _zig_compiler(triple: str, path: str) -> Compiler:
    version = _probe_compiler(path, os.stat(path).st_mtime_ns, "version").version
    return Compiler(path, f"zig {version}", ("cc", "-target", triple), "zig")


@functools.lru_cache(maxsize=8)
def _probe_compiler(path: str, mtime_ns: int, ask: str = "--version") -> Compiler:
    """Run `--version` (zig: `version`) once per compiler binary (mtime in the cache key catches an upgrade in
    place); the answer is remembered in the cache folder, so a new process does not start the compiler to ask."""
    memo = cache_dir() / "cpu" / f"compiler-{hashlib.sha1(f'{path}@{mtime_ns}'.encode()).hexdigest()[:20]}.txt"
    try:
        return Compiler(path, memo.read_text())
    except OSError:
        pass
    try:
        out = subprocess.run([path, ask], capture_output=True, text=True, timeout=30)
    except OSError as e:
        raise CompilerNotFoundError(f"the C compiler {path} cannot run: {e}") from e
    if out.returncode != 0:
        raise CompilerNotFoundError(f"the C compiler {path} failed `{ask}`: {out.stderr.strip()}")
    compiler = Compiler(path, (out.stdout.strip().splitlines() or [""])[0])
    write_text_atomic(memo, compiler.version)
    return compiler


def write_text_atomic(path: Path, text: str) -> None:
    """Write a small file by rename (readers see the old or the new text); failures are ignored."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        pass  # only a memo: the next process asks the compiler again


@functools.lru_cache(maxsize=1)
def cpu_features() -> frozenset[str]:
    """Host SIMD features (avx512f, avx2, fma, avx, sse2, neon): /proc/cpuinfo, else the compiler's macros."""
    flags = _cpuinfo_flags()
    if not flags:
        flags = _native_macro_features()
    return frozenset(ARM_FEATURE_ALIASES.get(f, f) for f in flags) & set(FEATURE_MACROS)


def _cpuinfo_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def _native_macro_features() -> set[str]:
    """What `-march=native` turns on, from the predefined macros (macOS, or no /proc)."""
    try:
        cc = find_compiler()
        out = subprocess.run([*cc.command, "-march=native", "-dM", "-E", "-x", "c", os.devnull],
                             capture_output=True, text=True, timeout=30).stdout
    except (CuvilError, OSError):
        return set()
    macros = {line.split()[1] for line in out.splitlines() if line.startswith("#define ")}
    return {feature for feature, macro in FEATURE_MACROS.items() if macro in macros}


def physical_cores() -> int:
    """Distinct (package, core) pairs in /proc/cpuinfo that this process may run on; else the CPU count."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        blocks = Path("/proc/cpuinfo").read_text().split("\n\n")
    except OSError:
        blocks = []
    cores = set()
    for block in blocks:
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "core id" in fields and (allowed is None or int(fields.get("processor", -1)) in allowed):
            cores.add((fields.get("physical id"), fields["core id"]))
    return len(cores) or len(allowed or ()) or os.cpu_count() or 1


def compile_flags(opt_level: int = 3, extra=(), target=None, compiler=None) -> tuple[str, ...]:
    """The default flags: `-O<level> -march=native -fopenmp -fPIC -shared` (another target: its row's machine
    flags; zig: no OpenMP runtime), then `extra`, then the user's `CUVIL_EXTRA_CFLAGS` (for example
    `-fsanitize=address` to check generated code)."""
    family = compiler.family if compiler is not None else "gcc"
    base = BASE_FLAGS if target is None else (*target.flags(family), *BASE_FLAGS[1:])
    if family == "zig":
        base = tuple(f for f in base if f != "-fopenmp") + ZIG_OPENMP_FLAGS
    return (f"-O{opt_level}", *base, *extra, *shlex.split(os.environ.get("CUVIL_EXTRA_CFLAGS", "")))


def link_flags(compiler: Compiler) -> tuple:
    """Flags for linking what `compile_flags` compiled: OpenMP's runtime where the toolchain has one."""
    return () if compiler.family == "zig" else ("-fopenmp",)


def cache_dir() -> Path:
    """`CUVIL_CACHE_DIR`, else `$XDG_CACHE_HOME/cuvil`, else `~/.cache/cuvil`."""
    if os.environ.get("CUVIL_CACHE_DIR"):
        return Path(os.environ["CUVIL_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cuvil"


def cache_key(source: str, flags, compiler: Compiler, depends=()) -> str:
    """SHA-256 over everything that changes the library: source, headers, flags, compiler, host CPU, Cuvil."""
    h = hashlib.sha256(b"cuvil-cpu-library-v1\n")
    parts = [source, "\0".join(flags), compiler.path, *compiler.args, compiler.version, platform.machine(),
             ",".join(sorted(_cpuinfo_flags())), _cuvil_version()]
    parts += [Path(p).read_text() for p in depends]
    for part in parts:
        h.update(len(part.encode()).to_bytes(8, "little") + part.encode())
    return h.hexdigest()


def _cuvil_version() -> str:
    from ...version import __version__

    return __version__


def build_library(source: str, *, name: str = "lib", opt_level: int = 3, extra_flags=(), include_dirs=(),
                  depends=(), flags=None, target=None) -> Build:
    """Compile `source` to a shared library in the cache, or find it there; returns where it lies.

    `depends` lists files (headers) whose contents join the cache key; `flags` replaces the default flags;
    `target` (a targets.Target) compiles for it instead of the host.
    """
    compiler = find_compiler(target)
    flags = tuple(flags) if flags is not None else compile_flags(opt_level, extra_flags, target, compiler)
    flags += tuple(f"-I{d}" for d in include_dirs)
    key = cache_key(source, flags, compiler, depends)

    def compile_source(tmp: Path) -> list:
        (tmp / "source.c").write_text(source)
        return [*compiler.command, *flags, "source.c", "-o", "lib.so"]

    return _cached_entry(cache_dir() / "cpu" / f"{name}-{key[:32]}", key, compiler, compile_source)


def object_flags(opt_level: int, extra=(), target=None, compiler=None) -> tuple:
    """`compile_flags` for an object file (-c, not -shared): what the kernel units and exported entries compile with."""
    return tuple(f for f in compile_flags(opt_level, extra, target, compiler) if f != "-shared") + ("-c",)


def link_library(objects: list, *, name: str = "lib", target=None) -> Build:
    """Link cached object files (`build_library` entries compiled with `object_flags`) into a shared library, cached
    by the objects' keys; symbols it leaves undefined resolve when it is loaded (against RTLD_GLOBAL libraries)."""
    compiler = find_compiler(target)
    extra = tuple(shlex.split(os.environ.get("CUVIL_EXTRA_CFLAGS", "")))  # as compiled (-fsanitize=address)
    flags = ("-shared", *link_flags(compiler), "-pthread", *extra)
    key = hashlib.sha256("\0".join([*flags, *compiler.command, compiler.version,
                                     *(Path(o).parent.name for o in objects)]).encode()).hexdigest()

    def link(tmp: Path) -> list:
        return [*compiler.command, *flags, "-o", "lib.so", *map(str, named_objects(objects, tmp)), "-lm"]

    return _cached_entry(cache_dir() / "cpu" / f"{name}-{key[:32]}", key, compiler, link)


def named_objects(objects: list, folder) -> list:
    """The objects under `.o` names in `folder` (links): the cache names them lib.so, which zig's clang would take
    for shared libraries."""
    links = [Path(folder) / f"{k}.o" for k in range(len(objects))]
    for link, obj in zip(links, objects):
        link.symlink_to(obj)
    return links


def _cached_entry(entry: Path, key: str, compiler: Compiler, prepare) -> Build:
    """The cache entry `entry`, built by the command `prepare(folder)` writes the inputs for and returns if missing."""
    if _valid_entry(entry):
        return Build(entry / "lib.so", key, False, 0.0)
    entry.parent.mkdir(parents=True, exist_ok=True)
    with _locked(entry.with_suffix(".lock")):
        if _valid_entry(entry):  # another process built it while we waited for the lock
            return Build(entry / "lib.so", key, False, 0.0)
        discard_entry(entry)
        seconds = _build_entry(prepare, compiler, entry, key)
    return Build(entry / "lib.so", key, True, seconds)


def load_library(source: str, **kwargs) -> ctypes.CDLL:
    """`build_library`, then dlopen; an entry that fails to load is deleted and rebuilt once."""
    mode = kwargs.pop("mode", ctypes.DEFAULT_MODE)
    build = build_library(source, **kwargs)
    try:
        return ctypes.CDLL(str(build.path), mode=mode)
    except OSError as e:
        log.warning("cached library %s fails to load (%s): rebuilding it", build.path, e)
        discard_entry(build.path.parent)
        return ctypes.CDLL(str(build_library(source, **kwargs).path), mode=mode)


def _valid_entry(entry: Path) -> bool:
    """The entry exists and its library has the size and digest recorded when it was built."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
        data = (entry / "lib.so").read_bytes()
    except (OSError, ValueError):
        return False
    if len(data) == meta.get("size") and hashlib.sha256(data).hexdigest() == meta.get("sha256"):
        return True
    log.warning("cache entry %s is corrupt (library does not match its digest): rebuilding it", entry)
    return False


def _build_entry(prepare, compiler: Compiler, entry: Path, key: str) -> float:
    """Build into a temporary folder beside the entry, then publish the folder with one rename."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        cmd = prepare(tmp)
        start = time.perf_counter()
        returncode, stderr, cpu_seconds = _run_compiler(cmd, tmp)
        seconds = time.perf_counter() - start
        if returncode != 0:
            raise CompileError(f"C compilation failed (exit {returncode}): {' '.join(cmd)}\n{stderr.strip()}")
        log.info("compiled %s in %.3f s: %s (in %s)", entry.name, seconds, " ".join(cmd), entry.parent)
        data = (tmp / "lib.so").read_bytes()
        meta = {"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "command": cmd,
                "compiler": compiler.version, "seconds": seconds, "cpu_seconds": cpu_seconds}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, entry)
        except OSError:  # only without fcntl: another process published the same entry first
            if not _valid_entry(entry):
                raise
        return seconds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_compiler(cmd: list, cwd: Path) -> tuple:
    """(exit status, stderr, CPU seconds of the compiler and its children or None): the CPU time is what a build
    costs whatever else the machine runs, where its wall time is not."""
    if not hasattr(os, "wait4"):  # pragma: no cover (not POSIX)
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        return out.returncode, out.stderr, None
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return proc.returncode, err.read(), usage.ru_utime + usage.ru_stime


def discard_entry(entry: Path) -> None:
    """Move a cache entry aside (atomic), then delete it: readers never see a half-deleted folder, and
    processes that mapped its files keep them. The artifact cache uses it too."""
    if not entry.exists():
        return
    trash = Path(tempfile.mkdtemp(prefix=f".trash-{entry.name}.", dir=entry.parent))
    try:
        os.replace(entry, trash / "entry")
    except OSError:
        pass
    shutil.rmtree(trash, ignore_errors=True)


class _locked:
    """An exclusive `flock` on `path` for the duration of a `with` block (a no-op without fcntl)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.file = open(self.path, "a")
        if fcntl is not None:
            fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.file.close()  # closing releases the lock
