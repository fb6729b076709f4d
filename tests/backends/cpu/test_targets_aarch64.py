"""aarch64: the five test models exported for `aarch64` (a NEON level and an SVE level in one file) with each cross
toolchain, run by the C runtime built for aarch64 under qemu-aarch64; outputs equal to the host's within fp32
tolerances. CI installs qemu-user, gcc-aarch64-linux-gnu and libc6-arm64-cross (.ci/run) and ziglang (the
`test` extra): there a missing tool fails the test instead of skipping it."""
from __future__ import annotations

import json
import re
import os
import subprocess
import zlib

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import targets, toolchain
from cuvil.runtime import build
from cuvil.runtime.container import Container
from tests.backends.cpu import target_models as models

TOOLCHAINS = ("gcc", "zig")
# qemu's CPUs: `max` has SVE (the file's SVE level loads), a Cortex-A57 has NEON only (its NEON level loads).
CPUS = ("max", "cortex-a57")


@pytest.fixture(scope="module", params=TOOLCHAINS)
def toolchain_env(request):
    """CUVIL_TOOLCHAIN for the module's toolchain ("gcc": the Debian cross gcc; "zig": the ziglang wheel)."""
    qemu = models.require("qemu-aarch64", "qemu-user runs aarch64 programs")
    models.require(f"{models.QEMU_SYSROOT}/lib/ld-linux-aarch64.so.1", "libc6-arm64-cross: aarch64's libc for qemu")
    if request.param == "gcc":
        models.require("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu: the Debian cross compiler")
    elif not toolchain._zig_path():
        models.require("ziglang (pip)", "the ziglang wheel: pip install 'cuvil[zig]'")
    saved = os.environ.get("CUVIL_TOOLCHAIN")
    os.environ["CUVIL_TOOLCHAIN"] = "zig" if request.param == "zig" else "system"
    yield request.param, qemu
    os.environ.pop("CUVIL_TOOLCHAIN") if saved is None else os.environ.__setitem__("CUVIL_TOOLCHAIN", saved)


@pytest.fixture(scope="module")
def runtime(toolchain_env, tmp_path_factory):
    """cuvil-run built for aarch64 with the module's toolchain, and the command that runs it under qemu."""
    family, qemu = toolchain_env
    assert toolchain.find_compiler(targets.get("aarch64")).family == family
    built = build.build_runtime(tmp_path_factory.mktemp(f"rt-aarch64-{family}"), target="aarch64")
    assert int.from_bytes(built.cli.read_bytes()[18:20], "little") == 183  # ELF e_machine: EM_AARCH64
    return [qemu, "-L", models.QEMU_SYSROOT, str(built.cli)]


@pytest.mark.parametrize("name", models.NAMES)
def test_model_under_qemu(runtime, name, tmp_path):
    path = tmp_path / f"{name}.cuv"
    calls, expected = models.export(name, "aarch64", path)
    for cpu in CPUS:
        for k, (call, want) in enumerate(zip(calls, expected)):
            outs = models.run_cli(runtime, path, call, tmp_path / f"{cpu}-{k}", env={**os.environ, "QEMU_CPU": cpu})
            np.testing.assert_allclose(outs[0], want, models.RTOL, models.ATOL, err_msg=f"{name} on {cpu}")


def test_cnn_is_blocked_by_neon_width(runtime, tmp_path):
    """The CNN's convolutions are laid out in blocks of 4 channels, one NEON vector (both levels share it)."""
    path = tmp_path / "cnn.cuv"
    models.export("cnn", "aarch64", path)
    assert _section(path, "meta")["levels"] == ["aarch64", "aarch64-sve"]
    with pytest.raises(cuvil.ArtifactError, match="made for aarch64-linux-gnu, this machine is x86_64"):
        cuvil.load(path)
    assert ",4] = conv_nchwc" in _section(path, "ir")["main"]


def _section(path, name: str):
    """A JSON section of a file this machine cannot load (another architecture)."""
    data = bytes(Container.open(path).data(name))
    return json.loads(zlib.decompress(data) if name == "ir" else data)


def test_sve_level_needs_sve(runtime, tmp_path):
    """A file holding only the SVE level runs where qemu's CPU has SVE and is refused, naming it, where not."""
    path = tmp_path / "sve.cuv"
    calls, expected = models.export("mlp", "aarch64-sve", path)
    outs = models.run_cli(runtime, path, calls[0], tmp_path / "max", env={**os.environ, "QEMU_CPU": "max"})
    np.testing.assert_allclose(outs[0], expected[0], models.RTOL, models.ATOL)
    done = subprocess.run([*runtime, str(path), "--info"], capture_output=True, text=True,
                          env={**os.environ, "QEMU_CPU": "cortex-a57"})
    assert done.returncode != 0 and "lacks sve" in done.stderr, done.stderr


def _disassembly(obj) -> str:
    objdump = models.require("aarch64-linux-gnu-objdump", "binutils-aarch64-linux-gnu (with the cross gcc)")
    return subprocess.run([objdump, "-d", str(obj)], capture_output=True, text=True, check=True).stdout


def test_kernels_use_neon_vectors(runtime):
    """The kernel library's vector code (GEMM micro-kernel, convolutions, exp/tanh) lowers to 4-lane NEON
    arithmetic for aarch64, not scalar loops (4-lane `fmul`/`fadd`, fused into `fmla` from -O2 on)."""
    from cuvil.backends.cpu import standalone

    text = "".join(map(_disassembly, standalone.library_objects(1, targets.get("aarch64"))[:-1]))  # the units
    vector = len(re.findall(r"\t(?:fmla|fmul|fadd)\tv\d+\.4s", text))
    scalar = len(re.findall(r"\t(?:fmadd|fmul|fadd)\ts\d+", text))
    assert vector > 1000 and vector > 20 * scalar, (vector, scalar)


def test_sve_level_uses_sve(runtime):
    """The SVE level's code, at the release -O3, uses SVE's scalable vectors (z registers) where the compiler
    vectorises loops itself; the kernels' explicit vectors stay 128-bit NEON."""
    from cuvil.backends.cpu import standalone

    text = "".join(map(_disassembly, standalone.library_objects(3, targets.get("aarch64-sve"))[:-1]))  # the units
    assert re.search(r"\tf(?:mul|add|mla|mad)\tz\d+\.s", text), "no SVE vector arithmetic"
    assert len(re.findall(r"\tfmla\tv\d+\.4s", text)) > 1000
