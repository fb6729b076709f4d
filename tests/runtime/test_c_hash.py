"""The C runtime's SHA-256 (cuvil_hash.c) on every path it has, against hashlib: the CPU's instructions (x86
SHA-NI, two messages interleaved for a pair of pieces), the portable C that CUVIL_DISABLE_CPU_FEATURES forces,
and the ARMv8 SHA2 instructions under qemu where a cross compiler and qemu-aarch64 are installed."""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess

import numpy as np
import pytest

from cuvil.runtime import build

from . import c_build

DATA = np.random.default_rng(3).integers(0, 256, 100_003, np.uint8).tobytes()
FAST = {"x86_64": "sha_ni", "aarch64": "sha2"}


def _expected() -> list:
    half = len(DATA) // 2
    return [hashlib.sha256(DATA[:n]).hexdigest() for n in range(131)] + [hashlib.sha256(DATA).hexdigest()] + \
        [hashlib.sha256(DATA[:half]).hexdigest(), hashlib.sha256(DATA[half:2 * half]).hexdigest()]


def _check(lines: list, paths: set) -> None:
    assert lines[0] in paths, lines[0]
    assert lines[1:] == _expected()


def _cpu_has_instructions() -> bool:
    text = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    return (" sha_ni" in text) if platform.machine() == "x86_64" else (" sha2" in text)


@pytest.mark.parametrize("disabled", ["", "avx2,sha_ni,sha2"], ids=["cpu", "portable"])
def test_every_path_gives_hashlibs_digests(tmp_path, disabled):
    built = c_build.runtime()
    (tmp_path / "data").write_bytes(DATA)
    out = subprocess.run([str(built.driver), "hash", str(tmp_path / "data")], capture_output=True, text=True,
                         env={**built.env(), "CUVIL_DISABLE_CPU_FEATURES": disabled}, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    want = {"portable"} if disabled or not _cpu_has_instructions() else {FAST.get(platform.machine(), "portable")}
    _check(lines, want)


HASH_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cuvil_hash.h"
static void hex(const unsigned char *d) { for (int i = 0; i < 32; i++) printf("%02x", d[i]); printf("\n"); }
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb");
    static unsigned char data[1 << 20];
    size_t size = fread(data, 1, sizeof data, f), half = size / 2;
    unsigned char d[32], e[32];
    printf("%s\n", cuvil_sha256_path());
    for (size_t n = 0; n <= 130; n++) cuvil_sha256(data, n, d), hex(d);
    cuvil_sha256(data, size, d), hex(d);
    cuvil_sha256_pair(data, data + half, half, d, e), hex(d), hex(e);
    return 0;
}
"""


@pytest.mark.skipif(not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")),
                    reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")
@pytest.mark.parametrize("disabled", ["", "sha2"], ids=["sha2", "portable"])
def test_the_armv8_path_under_qemu(tmp_path, disabled):
    (tmp_path / "main.c").write_text(HASH_MAIN)
    (tmp_path / "data").write_bytes(DATA)
    subprocess.run(["aarch64-linux-gnu-gcc", "-static", "-O2", f"-I{build.SOURCE_DIR}", str(tmp_path / "main.c"),
                    str(build.SOURCE_DIR / "cuvil_hash.c"), "-o", str(tmp_path / "hash")], check=True)
    out = subprocess.run(["qemu-aarch64", str(tmp_path / "hash"), str(tmp_path / "data")], capture_output=True,
                         text=True, env={**os.environ, "CUVIL_DISABLE_CPU_FEATURES": disabled}, timeout=120)
    assert out.returncode == 0, out.stderr
    _check(out.stdout.split(), {"portable"} if disabled else {"sha2"})
