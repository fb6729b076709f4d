"""The machine a `.cuv` is loaded on: its target triple and CPU feature bits (docs/artifact.md), and placing a
shared object in memory to `dlopen` it without a file anyone else can change."""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
import tempfile
from pathlib import Path

# The doc's feature bits, by the names /proc/cpuinfo gives them (aarch64's own names where they differ).
FEATURE_BITS = {"sse4_2": 0, "avx": 1, "avx2": 2, "fma": 3, "f16c": 4, "avx512f": 5, "avx512bw": 6, "avx512vl": 7,
                "avx512dq": 8, "avx512_bf16": 9, "avx512_vnni": 10, "amx_bf16": 11, "amx_int8": 12,
                "avx512_fp16": 13, "avx_vnni": 14, "neon": 32, "sve": 33, "bf16": 34, "i8mm": 35, "dotprod": 36,
                "simd128": 48, "threads": 49, "relaxed_simd": 50}
CPUINFO_ALIASES = {"asimd": "neon", "asimddp": "dotprod"}


def triple() -> str:
    """This machine's target triple as the doc spells it (`x86_64-linux-gnu`, `aarch64-linux-gnu`)."""
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    return f"{machine}-{sys.platform}-gnu" if sys.platform == "linux" else f"{machine}-{sys.platform}"


MASK_VARIABLE = "CUVIL_DISABLE_CPU_FEATURES"


def feature_bits() -> int:
    """The host's feature bits, less those `CUVIL_DISABLE_CPU_FEATURES` names (comma-separated, as in
    `host.FEATURE_BITS`: `avx512f` makes a file's AVX-512 level unusable, so its AVX2 level loads). The C runtime
    reads the same variable."""
    return cpuinfo_bits() & ~masked_bits()


def masked_bits() -> int:
    """The features `CUVIL_DISABLE_CPU_FEATURES` names (a wasm32 engine's too: `relaxed_simd`)."""
    return bits(os.environ.get(MASK_VARIABLE, "").replace(",", " ").split())


@functools.lru_cache(maxsize=1)
def cpuinfo_bits() -> int:
    """From /proc/cpuinfo (0 where it cannot be read: only featureless code loads)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return bits(CPUINFO_ALIASES.get(f, f) for f in value.split())
    return 0


def bits(names) -> int:
    return sum(1 << FEATURE_BITS[n] for n in set(names) if n in FEATURE_BITS)


def names(mask: int) -> list:
    return [n for n, b in FEATURE_BITS.items() if mask >> b & 1]


def dlopen(image, name: str) -> ctypes.CDLL:
    """Load a shared object from its bytes with RTLD_LOCAL: through a memfd (never a path another process can
    write), or a private temporary file, unlinked once loaded, where memfd_create is missing. A memfd stays open
    while the process lives: its /proc/self/fd path names the library, and a reused path would make the dynamic
    loader hand back the earlier library."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(f"cuvil-{name}", getattr(os, "MFD_CLOEXEC", 0))
        _write_all(fd, image)
        return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_LOCAL | os.RTLD_NOW)
    fd, path = tempfile.mkstemp(prefix=f"cuvil-{name}-", suffix=".so")
    try:
        _write_all(fd, image)
        return ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    finally:
        os.close(fd)
        os.unlink(path)


def _write_all(fd: int, image) -> None:
    view = memoryview(image)
    while view:
        view = view[os.write(fd, view):]
