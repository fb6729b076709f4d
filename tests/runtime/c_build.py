"""The C runtime, `cuvil-run` and the test driver, built once per source version (release and AddressSanitizer
builds) into a folder keyed by the SHA-256 of every source and the compiler, shared by the runtime's tests."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cuvil.backends.cpu import toolchain
from cuvil.runtime import build

DRIVER = Path(__file__).with_name("runtime_driver.c")


@dataclass(frozen=True)
class Built:
    folder: Path
    cli: Path
    driver: Path
    shared: Path
    sanitize: bool

    def env(self) -> dict:
        """The environment to run the binaries in (ASan: abort with a report on the first error)."""
        env = dict(os.environ)
        if self.sanitize:
            env["ASAN_OPTIONS"] = "abort_on_error=1:detect_leaks=1:allocator_may_return_null=1"
        return env


def asan_available() -> bool:
    """Whether the compiler links -fsanitize=address programs (gcc needs libasan installed)."""
    return _links(("-fsanitize=address",))


@functools.lru_cache(maxsize=None)
def _links(flags: tuple) -> bool:
    folder = Path(tempfile.mkdtemp(prefix="cuvil-asan-probe-"))
    try:
        (folder / "p.c").write_text("int main(void) { return 0; }\n")
        cc = toolchain.find_compiler().path
        return subprocess.run([cc, *flags, "p.c", "-o", "p"], cwd=folder, capture_output=True).returncode == 0
    except (OSError, toolchain.CompilerNotFoundError):
        return False
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def runtime(sanitize: bool = False) -> Built:
    cc = toolchain.find_compiler()
    h = hashlib.sha256(f"{cc.path}\0{cc.version}\0{sanitize}".encode())
    for path in (*build.sources(), DRIVER, Path(build.__file__)):
        h.update(path.read_bytes())
    folder = Path(tempfile.gettempdir()) / f"cuvil-c-runtime-{h.hexdigest()[:20]}"
    built = Built(folder, folder / "cuvil-run", folder / "runtime_driver", folder / "libcuvilrt.so", sanitize)
    if built.driver.exists():
        return built
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    result = build.build_runtime(work, sanitize=sanitize)
    flags = build.SANITIZE_FLAGS if sanitize else ("-O1",)
    subprocess.run([cc.path, "-std=c99", *flags, f"-I{build.SOURCE_DIR}", str(DRIVER), str(result.static),
                    "-o", str(work / "runtime_driver"), "-ldl", "-lpthread"], check=True, capture_output=True)
    try:
        os.replace(work, folder)
    except OSError:  # another process published it first
        shutil.rmtree(work, ignore_errors=True)
    return built


def run(built: Built, *args, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=built.env(), timeout=timeout)
