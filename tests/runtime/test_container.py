"""The loader's checks (docs/artifact.md, "What a loader checks"): each named failure, and 2,000+ mutated files
(truncations; byte flips in the header, table, meta, entries and each section) that must all give an
ArtifactError in a child process, with no crash and no dlopen for any file that fails a check before it."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

import cuvil
from cuvil.runtime import container, host
from tests.runtime import models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    path = tmp_path_factory.mktemp("cuv") / "mlp.cuv"
    mlp = cuvil.jit(models.mlp)
    mlp(np.ones((2, 256), np.float32))
    cuvil.export(mlp, path, include_c=True)
    return path


def _rewrite(path, out, triple=None, features=None, drop=(), version=None):
    """The same sections written again with another triple, native feature bits or format version."""
    c = container.Container.open(path)
    sections = [container.Section(n, [bytes(c.data(n))], r.flags, features if n == "native" and features else
                                  r.features) for n, r in c.rows.items() if n not in drop]
    container.write(out, sections, triple or c.triple, c.required_features)
    if version is not None:
        data = bytearray(out.read_bytes())
        data[8:12] = struct.pack("<I", version)
        data[124:128] = struct.pack("<I", zlib.crc32(bytes(data[:124])))
        out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("change, message", [
    (dict(version=3), "format version 3 is newer"),
    (dict(triple="riscv64-linux-gnu"), "made for riscv64-linux-gnu"),
    (dict(features=1 << host.FEATURE_BITS["threads"]), "lacks: threads"),
    (dict(drop=("entries",)), "required section"),
])
def test_each_check_names_what_failed(artifact, tmp_path, change, message):
    with pytest.raises(cuvil.ArtifactError, match=message):
        cuvil.load(_rewrite(artifact, tmp_path / "bad.cuv", **change))


def test_short_files_and_wrong_magic(artifact, tmp_path):
    data = artifact.read_bytes()
    with pytest.raises(cuvil.ArtifactError, match="too short"):
        cuvil.load(data[:100])
    with pytest.raises(cuvil.ArtifactError, match="wrong magic"):
        cuvil.load(b"\x7fELF" + data[4:])
    with pytest.raises(cuvil.ArtifactError, match="truncated"):
        cuvil.load(data[:-1])
    (tmp_path / "empty.cuv").write_bytes(b"")
    with pytest.raises(cuvil.ArtifactError, match="too short"):
        cuvil.load(tmp_path / "empty.cuv")
    with pytest.raises(FileNotFoundError):
        cuvil.load(tmp_path / "missing.cuv")


def test_entries_that_disagree_with_meta_are_refused(artifact, tmp_path):
    c = container.Container.open(artifact)
    text = bytes(c.data("entries")).decode().replace("input x f32 2", "input x f64 2")
    sections = [container.Section(n, [text.encode() if n == "entries" else bytes(c.data(n))], r.flags, r.features)
                for n, r in c.rows.items()]
    container.write(tmp_path / "bad.cuv", sections, c.triple, c.required_features)
    with pytest.raises(cuvil.ArtifactError, match="disagrees with meta"):
        cuvil.load(tmp_path / "bad.cuv")


MUTATE = r"""
import json, sys
import numpy as np
import cuvil
from cuvil.runtime import artifact, container, host

data = open(sys.argv[1], "rb").read()
rows = container.Container.from_buffer(memoryview(data)).rows
rng = np.random.default_rng(int(sys.argv[2]))
opened = []
real = host.dlopen
host.dlopen = lambda image, name: opened.append(name) or real(image, name)
counts = {}

def expect_error(kind, blob, lazy=False):
    before = len(opened)
    try:
        art = cuvil.load(blob)
    except cuvil.ArtifactError:
        assert len(opened) == before, f"{kind}: dlopen reached for a file that failed a check"
        counts[kind] = counts.get(kind, 0) + 1
        return
    assert lazy, f"{kind}: a mutated file loaded"
    try:  # a section checked in the background: the first call must fail before any entry runs
        art["main"](np.ones((2, 256), np.float32))
    except cuvil.ArtifactError:
        counts[kind] = counts.get(kind, 0) + 1
        return
    raise AssertionError(f"{kind}: a mutated file ran")

def flipped(lo, hi):
    blob = bytearray(data)
    for at in rng.integers(lo, hi, size=rng.integers(1, 4)):
        blob[at] ^= int(rng.integers(1, 256))
    return bytes(blob)

for n in sorted(set(rng.integers(0, len(data), size=500).tolist()) | {0, 1, 127, 128, 129, len(data) - 1}):
    expect_error("truncated", data[:n])
table_end = 128 + 96 * len(rows)
for kind, lo, hi, count in [("header", 0, 128, 300), ("table", 128, table_end, 300)]:
    for _ in range(count):
        expect_error(kind, flipped(lo, hi))
for name, r in rows.items():
    lazy = name in ("consts", "prepared", "ir", "csrc")
    for _ in range(60 if lazy else 300):
        expect_error(name, flipped(r.offset, r.offset + r.size), lazy)
print(json.dumps(counts))
"""


def test_two_thousand_mutated_files_all_fail_cleanly_and_run_nothing(artifact):
    done = subprocess.run([sys.executable, "-c", MUTATE, str(artifact), "7"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]  # a crash or a mutated file that loaded fails here
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    print("mutated files by kind (seed 7):", counts)
    assert sum(counts.values()) >= 2000
    assert {"truncated", "header", "table", "meta", "entries", "native", "consts", "ir", "csrc"} <= set(counts)


def test_a_written_file_gets_the_umask_mode_or_keeps_the_mode_it_had(tmp_path):
    parts = [container.Section(name, [b"..."]) for name in container.REQUIRED]
    old = os.umask(0o027)
    try:
        container.write(tmp_path / "a.cuv", parts, "x86_64-linux-gnu", 0)
    finally:
        os.umask(old)
    assert (tmp_path / "a.cuv").stat().st_mode & 0o777 == 0o640
    (tmp_path / "a.cuv").chmod(0o604)
    container.write(tmp_path / "a.cuv", parts, "x86_64-linux-gnu", 0)
    assert (tmp_path / "a.cuv").stat().st_mode & 0o777 == 0o604
