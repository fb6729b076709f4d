"""The target table, x86-64 levels in one `.cuv` and the CPU-feature override of both loaders (docs/targets.md)."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import targets, toolchain
from cuvil.errors import ArtifactError, UnsupportedError
from cuvil.runtime import host
from tests.backends.cpu import target_models as models
from tests.runtime import c_build

on_x86 = pytest.mark.skipif(host.triple() != "x86_64-linux-gnu", reason="x86-64 levels run on x86-64 Linux")
# Features masked off: none (v4 on an AVX-512 CPU), AVX-512 (v3), AVX2 (v2).
MASKS = ("", "avx512f", "avx2")


def best_level(masked: str):
    """(section, row) the loaders should pick from an x86_64 file under `masked`: the widest level that fits."""
    have = set(host.names(host.cpuinfo_bits())) - set(masked.split(","))
    fitting = [k for k, row in enumerate(targets.levels("x86_64")) if set(row.features) <= have]
    if not fitting:
        pytest.skip(f"this CPU has no x86-64 level once {masked or 'nothing'} is masked")
    return ("native" if fitting[-1] == 0 else f"native.{fitting[-1]}"), targets.levels("x86_64")[fitting[-1]].name


def test_table_rows_and_families():
    assert [t.name for t in targets.levels("x86_64")] == ["x86_64-v2", "x86_64-v3", "x86_64-v4"]
    assert [t.vector_lanes for t in targets.levels("x86_64")] == [4, 8, 16]
    assert targets.get("aarch64").simd == "neon" and targets.get("aarch64").gcc_prefix == "aarch64-linux-gnu-"
    assert targets.get("cpu").is_host and targets.get("cpu").triple == host.triple()
    assert set(targets.get("x86_64-v3").features) <= set(targets.get("x86_64-v4").features)
    for row in targets.TABLE.values():  # every row names features the loaders know
        assert set(row.features) <= set(host.FEATURE_BITS), row.name


def test_unknown_and_mixed_targets_are_refused():
    with pytest.raises(UnsupportedError, match="unknown target 'riscv64'.*x86_64-v3"):
        targets.levels("riscv64")
    with pytest.raises(UnsupportedError, match="mixes aarch64-linux-gnu, x86_64-linux-gnu"):
        targets.levels(["x86_64-v3", "aarch64"])
    with pytest.raises(UnsupportedError, match="unknown target"):
        cuvil.export(cuvil.jit(models.branchy), "unused.cuv", target="armv7", example_inputs=(np.ones(3, np.float32),))


def test_flags_per_toolchain_family():
    v3 = targets.get("x86_64-v3")
    gcc = toolchain.compile_flags(1, (), v3, toolchain.Compiler("/usr/bin/gcc", "gcc"))
    zig = toolchain.compile_flags(1, (), v3, toolchain.Compiler("/zig", "zig", ("cc",), "zig"))
    assert "-march=x86-64-v3" in gcc and "-fopenmp" in gcc and "-DCUVIL_MR=6" in gcc
    assert "-mcpu=x86_64_v3" in zig and "-fopenmp" not in zig and "-fopenmp-simd" in zig
    assert "-march=native" in toolchain.compile_flags(1)


def test_compiled_for_another_target_does_not_run_in_process():
    fn = cuvil.jit(models.branchy, target="aarch64")
    with pytest.raises(UnsupportedError, match="compiled for target 'aarch64'.*cuvil.export"):
        fn(np.ones(4, np.float32))


def test_missing_cross_compiler_names_what_to_install(monkeypatch):
    monkeypatch.setattr(toolchain, "_zig_path", lambda: "")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CUVIL_CC_AARCH64", raising=False)
    with pytest.raises(toolchain.CompilerNotFoundError,
                       match=r"aarch64.*apt-get install gcc-aarch64-linux-gnu.*pip install 'cuvil\[zig\]'"):
        toolchain.find_compiler(targets.get("aarch64"))


@pytest.fixture(scope="module")
def x86_files(tmp_path_factory):
    """Every model exported once with the three x86-64 levels in one file."""
    folder = tmp_path_factory.mktemp("x86_64")
    return {name: (folder / f"{name}.cuv", *models.export(name, "x86_64", folder / f"{name}.cuv"))
            for name in models.NAMES}


@on_x86
@pytest.mark.parametrize("name", models.NAMES)
@pytest.mark.parametrize("masked", MASKS)
def test_each_level_runs_the_model(x86_files, name, masked, monkeypatch):
    """The Python loader picks the best level the (masked) CPU has, and every level gives the host's outputs."""
    section, row = best_level(masked)
    monkeypatch.setenv(host.MASK_VARIABLE, masked)
    path, calls, expected = x86_files[name]
    art = cuvil.load(path)
    assert art.native == section and art.metadata["levels"][int(section.partition(".")[2] or 0)] == row
    for call, want in zip(calls, expected):
        np.testing.assert_allclose(np.asarray(art(*call)), want, models.RTOL, models.ATOL)


@on_x86
def test_c_runtime_honours_the_mask(x86_files, tmp_path):
    """cuvil-run: the same masks pick the same levels (a v4-only file then fails, naming the missing feature)."""
    built = c_build.runtime()
    path, calls, expected = x86_files["transformer"]
    for masked in MASKS:
        outs = models.run_cli([built.cli], path, calls[0], tmp_path / masked, env={**built.env(),
                                                                                 host.MASK_VARIABLE: masked})
        np.testing.assert_allclose(outs[0], expected[0], models.RTOL, models.ATOL)
    v4 = tmp_path / "v4.cuv"
    models.export("mlp", "x86_64-v4", v4)
    env = {**built.env(), host.MASK_VARIABLE: "avx512f"}
    done = subprocess.run([str(built.cli), str(v4), "--info"], capture_output=True, text=True, env=env)
    assert done.returncode != 0 and "lacks avx" in done.stderr, done.stderr


@on_x86
def test_python_loader_refuses_a_level_the_cpu_lacks(tmp_path, monkeypatch):
    path = tmp_path / "v3.cuv"
    models.export("control_flow", "x86_64-v3", path)
    monkeypatch.setenv(host.MASK_VARIABLE, "avx2,fma")
    with pytest.raises(ArtifactError, match="lacks: avx2, fma"):
        cuvil.load(path)


@on_x86
def test_single_level_keeps_the_blocked_layout(tmp_path, x86_files):
    """One level: convolutions are blocked by its vector width (v3: 8 channels) and the file runs here; a file of
    levels of several widths shares one unblocked IR."""
    path = tmp_path / "cnn.cuv"
    calls, expected = models.export("cnn", "x86_64-v3", path)
    art = cuvil.load(path)
    assert ",8] = conv_nchwc" in art.ir_text()
    np.testing.assert_allclose(np.asarray(art(*calls[0])), expected[0], models.RTOL, models.ATOL)
    assert "conv_nchwc" not in cuvil.load(x86_files["cnn"][0]).ir_text()


def test_host_layout_is_refused_for_a_narrower_target(tmp_path):
    """A CNN compiled for this host (blocks of its width) cannot be exported for a level of another width: the
    error says to compile it for the target."""
    import torch

    if targets.host_target().vector_lanes == 4:
        pytest.skip("the host's blocks are 4 wide, as aarch64's")
    model, inputs = models.TORCH["cnn"]()
    compiled = cuvil.compile(model, (torch.from_numpy(inputs[0]),))
    with pytest.raises(UnsupportedError, match="packs .* channels per block.*Compile it for this one"):
        cuvil.export(compiled, tmp_path / "a.cuv", target="aarch64")
