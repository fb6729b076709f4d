"""Mutated `.cuv` files against the C runtime under AddressSanitizer: truncations and bit flips in the header, the
table and every section each give an error and never reach dlopen; re-signed mutations (checksums recomputed, so
the parser sees the damage) never crash it, and those it refuses as malformed never reach dlopen either."""
from __future__ import annotations

import random

import numpy as np
import pytest

from . import c_build, cuv_writer
from .c_models import export_model
from .test_c_runtime import _own_file, natives  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(not c_build.asan_available(), reason="the C compiler cannot link -fsanitize=address")

FLIPS_PER_PART = 250
TRUNCATIONS = 120
REFUSED_BEFORE_LOADING = {1, 2, 3, 4, 5}  # io, format, version, checksum, target: all decided before dlopen


@pytest.fixture(scope="module")
def bases(tmp_path_factory, natives):  # noqa: F811 (the fixture)
    """An exported function (meta, entries, native, ir) and a file of the tests' writer (with consts, prepared)."""
    folder = tmp_path_factory.mktemp("bases")
    exported = export_model("dynamic", folder).path
    own = folder / "own.cuv"
    own.write_bytes(_own_file(natives))
    return [exported, own]


def mutations(data: bytes, rng: random.Random) -> list:
    """`T length` and `F offset xor` lines: every header byte, then random bytes of the table and each section,
    then truncations (every boundary and random lengths). Padding between sections is never read, so not flipped."""
    specs = [f"F {k} {rng.randrange(1, 256)}" for k in range(cuv_writer.HEADER)]
    for part in cuv_writer.parts(data)[1:]:
        offsets = range(part.offset, part.offset + part.size)
        specs += [f"F {k} {rng.randrange(1, 256)}" for k in rng.sample(offsets, min(FLIPS_PER_PART, part.size))]
    edges = {e for p in cuv_writer.parts(data) for e in (p.offset, p.offset + p.size // 2, p.offset + p.size - 1)}
    lengths = sorted(edges | {0, 1, 127, len(data) - 1} | {rng.randrange(len(data)) for _ in range(TRUNCATIONS)})
    return specs + [f"T {n}" for n in lengths if n < len(data)]


def test_every_mutated_file_is_refused_before_its_code_is_loaded(bases, tmp_path):
    built, rng, total = c_build.runtime(sanitize=True), random.Random(0), 0
    for base in bases:
        specs = mutations(base.read_bytes(), rng)
        (tmp_path / "specs.txt").write_text("\n".join(specs) + "\n")
        out = c_build.run(built, built.driver, "mutate", base, tmp_path / "specs.txt", timeout=300)
        assert out.returncode == 0 and f"ok {len(specs)}" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
        total += len(specs)
    assert total >= 2000


def _damage(text: bytes, rng: random.Random) -> bytes:
    """One edit a broken writer could make: a digit changed, a byte dropped or doubled, a space or newline put in."""
    k = rng.randrange(len(text))
    kind = rng.randrange(4)
    if kind == 0:
        digits = [i for i, c in enumerate(text) if chr(c).isdigit()]
        k = rng.choice(digits) if digits else k
        return text[:k] + str(rng.randrange(10)).encode() + text[k + 1:]
    if kind == 1:
        return text[:k] + text[k + 1:]
    if kind == 2:
        return text[:k] + text[k:k + 1] * 2 + text[k + 1:]
    return text[:k] + rng.choice([b" ", b"\n", b"-", b"9999999999999999999"]) + text[k + 1:]


def _with_section(data: bytes, name: str, content: bytes) -> bytes:
    """`data` with section `name` replaced by `content` (the same length or shorter, zero-padded: the layout stays)."""
    part = next(p for p in cuv_writer.parts(data) if p.name == name)
    out = bytearray(data)
    if len(content) > part.size:
        content = content[:part.size]
    out[part.offset:part.offset + part.size] = content.ljust(part.size, b" ")
    return bytes(out)


def test_resigned_mutations_never_crash_the_parser(bases, tmp_path):
    """Damage in `entries`, `meta` and header fields behind valid checksums: under ASan the runtime either opens
    the file or refuses it with a message; what it refuses as malformed it refuses before dlopen."""
    built, rng, paths = c_build.runtime(sanitize=True), random.Random(1), []
    for b, base in enumerate(bases):
        data = base.read_bytes()
        for k in range(120):
            name = "entries" if k % 3 else "meta"
            damaged = _with_section(data, name, _damage(cuv_writer.section(data, name), rng))
            paths.append(tmp_path / f"m{b}_{k}.cuv")
            paths[-1].write_bytes(cuv_writer.resign(damaged))
        for k in range(40):  # header fields: counts, offsets, features, version
            out = bytearray(data)
            at = rng.choice([8, 12, 24, 28, 32, 40, 48, 112])
            out[at + rng.randrange(4)] ^= 1 << rng.randrange(8)
            paths.append(tmp_path / f"h{b}_{k}.cuv")
            paths[-1].write_bytes(cuv_writer.resign(bytes(out)))
    out = c_build.run(built, built.driver, "files", *paths, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = out.stdout.splitlines()
    assert len(lines) == len(paths)
    refused = 0
    for line in lines:
        path, code, loaded, *message = line.split(" ")
        if int(code) in REFUSED_BEFORE_LOADING:
            refused += 1
            assert loaded == "0" and message, line
    assert refused > len(paths) // 2  # most damage is caught by the parser, not by luck


def test_a_mutated_file_gives_cuvil_run_a_message_and_a_nonzero_exit(bases, tmp_path):
    built = c_build.runtime(sanitize=True)
    data = bytearray(bases[0].read_bytes())
    entries = next(p for p in cuv_writer.parts(bytes(data)) if p.name == "entries")
    data[entries.offset + 3] ^= 0x20
    (tmp_path / "bad.cuv").write_bytes(bytes(data))
    out = c_build.run(built, built.cli, tmp_path / "bad.cuv", "--info")
    assert out.returncode == 1 and "section 'entries' does not match its SHA-256" in out.stderr, out.stderr
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    out = c_build.run(built, built.cli, tmp_path / "bad.cuv", tmp_path / "x.npy")
    assert out.returncode == 1 and "cuvil-run: " in out.stderr
