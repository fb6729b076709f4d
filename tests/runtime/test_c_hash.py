"""The C runtime's SHA-256 (cuvil_hash.c) on every path it has, against hashlib: the CPU's instructions (x86
AVX-512 for sixteen pieces, SHA-NI with two interleaved for a pair), the portable C that
CUVIL_DISABLE_CPU_FEATURES forces, and the ARMv8 SHA2 instructions under qemu where a cross compiler and
qemu-aarch64 are installed."""
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
    half, q = len(DATA) // 2, len(DATA) // 16
    return [hashlib.sha256(DATA[:n]).hexdigest() for n in range(131)] + [hashlib.sha256(DATA).hexdigest()] + \
        [hashlib.sha256(DATA[k * q:(k + 1) * q]).hexdigest() for k in range(16)] + \
        [hashlib.sha256(DATA[at:at + half]).hexdigest() for at in (0, half, 2 * q)]


def _check(lines: list, paths: set, widths: set) -> None:
    """The driver's lines: the path, the digests of 131 prefixes and the whole, the batch width, then the digests
    of a batch of 16 pieces and of one of 3 (a pair and one)."""
    assert lines[0] in paths, lines[0]
    assert int(lines[133]) in widths, lines[133]
    assert lines[1:133] + lines[134:] == _expected()


def _cpu_has_instructions() -> bool:
    text = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    return (" sha_ni" in text) if platform.machine() == "x86_64" else (" sha2" in text)


def _has_avx512() -> bool:
    return platform.machine() == "x86_64" and " avx512f" in open("/proc/cpuinfo").read()


@pytest.mark.parametrize("disabled", ["", "avx512f", "avx512f,sha_ni,sha2"], ids=["cpu", "pairs", "portable"])
def test_every_path_gives_hashlibs_digests(tmp_path, disabled):
    """Sixteen pieces at once in AVX-512 lanes (with tails of a partial block), SHA-NI pairs, one at a time."""
    built = c_build.runtime()
    (tmp_path / "data").write_bytes(DATA)
    out = subprocess.run([str(built.driver), "hash", str(tmp_path / "data")], capture_output=True, text=True,
                         env={**built.env(), "CUVIL_DISABLE_CPU_FEATURES": disabled}, timeout=60)
    assert out.returncode == 0, out.stderr
    fast = _cpu_has_instructions() and "sha_ni" not in disabled
    paths = {FAST.get(platform.machine(), "portable")} if fast else {"portable"}
    widths = {16} if _has_avx512() and not disabled else {2} if fast and platform.machine() == "x86_64" else {1}
    _check(out.stdout.split(), paths, widths)


HASH_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cuvil_hash.h"
static void hex(const unsigned char *d) { for (int i = 0; i < 32; i++) printf("%02x", d[i]); printf("\n"); }
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb");
    static unsigned char data[1 << 20];
    size_t size = fread(data, 1, sizeof data, f), half = size / 2;
    unsigned char d[32], digests[16][32];
    const unsigned char *pieces[16];
    printf("%s\n", cuvil_sha256_path());
    for (size_t n = 0; n <= 130; n++) cuvil_sha256(data, n, d), hex(d);
    cuvil_sha256(data, size, d), hex(d);
    printf("%d\n", cuvil_sha256_width());
    for (int k = 0; k < 16; k++) pieces[k] = data + k * (size / 16);
    cuvil_sha256_batch(pieces, 16, size / 16, digests);
    for (int k = 0; k < 16; k++) hex(digests[k]);
    pieces[1] = data + half;
    cuvil_sha256_batch(pieces, 3, half, digests);
    for (int k = 0; k < 3; k++) hex(digests[k]);
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
    _check(out.stdout.split(), {"portable"} if disabled else {"sha2"}, {1})
