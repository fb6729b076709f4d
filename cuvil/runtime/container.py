"""The `.cuv` container (docs/artifact.md): a 128-byte header, a table of sections with their SHA-256, and the
sections, each 64-byte aligned. This module knows bytes only, not models: `write` lays sections out and
`Container` maps a file and checks it in the order the doc lists ("What a loader checks").

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "demo.cuv")
    >>> parts = [Section(name, [b"..."]) for name in REQUIRED] + [Section("note", [b"hello"])]
    >>> write(path, parts, "x86_64-linux-gnu", 0)
    >>> c = Container.open(path)
    >>> bytes(c.data("note"))
    b'hello'
"""
from __future__ import annotations

import hashlib
import itertools
import mmap
import os
import struct
import tempfile
import threading
import zlib
from dataclasses import dataclass

from ..errors import ArtifactError

MAGIC = b"\x89CUV\r\n\x1a\n"
VERSION = 2  # 2: a section's SHA-256 is over its pieces' SHA-256s (1: over its bytes; still read)
HEADER = struct.Struct("<8sIIQIIQQ32s32s12s")  # magic ... zero: the 124 bytes the CRC covers
ROW = struct.Struct("<16sQQ32sIIQ16s")  # one section: name offset size sha256 flags zero features zero; 96 bytes
HEADER_SIZE, ROW_SIZE, ALIGN, MAX_SECTIONS = 128, 96, 64, 64
ZLIB = 1  # section flag bit 0
REQUIRED = ("meta", "entries", "native")
COMPRESSIBLE = ("ir", "csrc")  # the only sections a loader inflates; every other must be stored raw
MAX_THREADS = 16  # as the C runtime: past this, more hashing threads only queue for memory bandwidth
PIECE = 1 << 20  # format 2 hashes sections in pieces of this size, so that threads share a large section


@dataclass
class Section:
    """A section to write: its bytes as a list of buffers (written one after another, never joined in memory)."""
    name: str
    parts: list
    flags: int = 0
    features: int = 0

    @property
    def size(self) -> int:
        return sum(memoryview(p).nbytes for p in self.parts)


@dataclass
class Row:
    """A section as the table describes it."""
    name: str
    offset: int
    size: int
    sha256: bytes
    flags: int
    features: int


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def write(path, sections: list, triple: str, required_features: int) -> None:
    """Write a `.cuv` atomically (a temporary file beside `path`, then one rename)."""
    offset = align(HEADER_SIZE + ROW_SIZE * len(sections))
    rows = []
    for s in sections:
        rows.append(Row(s.name, offset, s.size, _parts_digest(s.parts), s.flags, s.features))
        offset = align(offset + s.size)
    table = b"".join(ROW.pack(_name(r.name), r.offset, r.size, r.sha256, r.flags, 0, r.features, b"") for r in rows)
    end = rows[-1].offset + rows[-1].size if rows else HEADER_SIZE + len(table)
    head = HEADER.pack(MAGIC, VERSION, HEADER_SIZE, end, len(rows), 0, HEADER_SIZE, required_features,
                       triple.encode().ljust(32, b"\0"), hashlib.sha256(table).digest(), b"")
    head += struct.pack("<I", zlib.crc32(head))
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".cuv-", dir=folder)
    try:
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "wb") as f:
            _write_sections(f, head + table, sections, rows)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _file_mode(path) -> int:
    """The mode `open(path, "w")` would give: an existing file's, else 0666 less the umask (mkstemp makes 0600)."""
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        pass
    try:
        with open("/proc/self/status") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)  # no /proc: read it by setting it back at once
        os.umask(umask)
    return 0o666 & ~umask


def _write_sections(f, start: bytes, sections: list, rows: list) -> None:
    f.write(start)
    for s, r in zip(sections, rows):
        f.write(b"\0" * (r.offset - f.tell()))
        for p in s.parts:
            f.write(p)


def _name(name: str) -> bytes:
    raw = name.encode("ascii")
    if not raw or len(raw) > 16 or b"\0" in raw:
        raise ValueError(f"section name {name!r} must be 1-16 ASCII characters")
    return raw.ljust(16, b"\0")


class Container:
    """A mapped `.cuv` whose header and table passed checks 1 and 2 (`open`); sections are checked on request."""

    stat = None  # the mapped file's os.fstat (None for bytes)

    def __init__(self, buf, path: str, rows: dict, triple: str, required_features: int, table_sha: bytes = b"",
                 version: int = VERSION):
        self.buf, self.path, self.rows, self.version = buf, path, rows, version
        self.triple, self.required_features, self.table_sha = triple, required_features, table_sha

    @classmethod
    def open(cls, path) -> "Container":
        """Map and check the file at `path` (a file that cannot be opened raises its OSError)."""
        path = os.fspath(path)
        with open(path, "rb") as f:
            stat = os.fstat(f.fileno())
            if stat.st_size < HEADER_SIZE:
                raise ArtifactError(f"{path}: {stat.st_size} bytes is too short for a .cuv file (the header is 128)")
            buf = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        container = cls.from_buffer(buf, path)
        container.stat = stat
        return container

    @classmethod
    def from_buffer(cls, buf, path: str = "<memory>") -> "Container":
        if len(buf) < HEADER_SIZE:
            raise ArtifactError(f"{path}: {len(buf)} bytes is too short for a .cuv file (the header is 128)")
        fields = HEADER.unpack_from(buf, 0)
        magic, version, header_size, file_size, count, flags, table_at, features, triple, table_sha = fields[:10]
        if magic != MAGIC:
            raise ArtifactError(f"{path}: not a .cuv file (wrong magic {bytes(magic)!r})")
        if version > VERSION:
            raise ArtifactError(f"{path}: format version {version} is newer than this loader's ({VERSION})")
        (crc,) = struct.unpack_from("<I", buf, 124)
        if crc != zlib.crc32(buf[:124]):
            raise ArtifactError(f"{path}: the header's CRC does not match (a corrupt header)")
        if file_size != len(buf):
            raise ArtifactError(f"{path}: the header says {file_size} bytes, the file has {len(buf)} (truncated?)")
        if version < 1 or header_size != HEADER_SIZE or flags or count > MAX_SECTIONS or any(fields[10]):
            raise ArtifactError(f"{path}: a malformed header (version {version}, size {header_size}, flags {flags}, "
                                f"{count} sections)")
        rows = _rows(buf, path, table_at, count, table_sha)
        return cls(buf, path, rows, _ascii(triple, path, "target triple"), features, bytes(table_sha), version)

    def data(self, name: str, check: bool = True) -> memoryview:
        """A section's stored bytes (a view of the mapping), its SHA-256 checked unless `check=False`."""
        row = self.rows[name]
        view = self.buf[row.offset:row.offset + row.size]
        if check:
            self.check(name)
        return view

    def check(self, name: str, threads: int = 1) -> None:
        """Check 3 or 5 for one section (its pieces hashed on `threads` threads)."""
        self.check_all([name], threads)

    def check_all(self, names: list, threads: int = 1) -> None:
        """Every named section's SHA-256, their pieces shared out to `threads` threads (this one among them)."""
        views = [self.buf[r.offset:r.offset + r.size] for r in (self.rows[n] for n in names)]
        cut = [list(pieces(v)) if self.version >= 2 else [v] for v in views]
        digests = iter(hash_views([p for ps in cut for p in ps], threads))
        for name, ps in zip(names, cut):
            got = [next(digests) for _ in ps]
            if (hashlib.sha256(b"".join(got)).digest() if self.version >= 2 else got[0]) != self.rows[name].sha256:
                raise ArtifactError(f"{self.path}: section {name!r} does not match its SHA-256 (corrupt)")

    def inflated(self, name: str) -> bytes:
        """A compressed section's content."""
        try:
            return zlib.decompress(self.data(name))
        except zlib.error as e:
            raise ArtifactError(f"{self.path}: section {name!r} does not decompress: {e}") from e


def cpu_count() -> int:
    """The CPUs this process may run on: the threads a check (or a cache key) hashes on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pieces(view):
    """The PIECE-byte pieces of a view (views themselves, no copy)."""
    return (view[k:k + PIECE] for k in range(0, len(view), PIECE))


def hash_views(views: list, threads: int) -> list:
    """The SHA-256 of each view, on `threads` threads (hashlib releases the GIL while it hashes): the loaders'
    check and the torch route's cache key (cuvil/cache/keys.py) share it."""
    out, order = [None] * len(views), itertools.count()

    def work():
        while (k := next(order)) < len(views):
            out[k] = hashlib.sha256(views[k]).digest()

    helpers = [threading.Thread(target=work, daemon=True) for _ in range(min(threads, len(views), MAX_THREADS) - 1)]
    for t in helpers:
        t.start()
    work()
    for t in helpers:
        t.join()
    return out


def _parts_digest(parts: list) -> bytes:
    """What a format-2 section's row holds for the bytes of `parts` one after another (not joined): the SHA-256
    of the SHA-256s of its PIECE-byte pieces (the last one shorter; none for an empty section)."""
    digests, h, left = [], hashlib.sha256(), PIECE
    for p in parts:
        view = memoryview(p).cast("B")
        while len(view):
            h.update(view[:left])
            taken = min(left, len(view))
            view, left = view[taken:], left - taken
            if not left:
                digests.append(h.digest())
                h, left = hashlib.sha256(), PIECE
    if left < PIECE:
        digests.append(h.digest())
    return hashlib.sha256(b"".join(digests)).digest()


def _rows(buf, path: str, table_at: int, count: int, table_sha: bytes) -> dict:
    """Check 2: the table inside the file and matching its SHA-256, each section inside, aligned, apart."""
    end = table_at + ROW_SIZE * count
    if table_at < HEADER_SIZE or end > len(buf):
        raise ArtifactError(f"{path}: the section table ({count} rows at {table_at}) lies outside the file")
    if hashlib.sha256(buf[table_at:end]).digest() != table_sha:
        raise ArtifactError(f"{path}: the section table does not match its SHA-256 (corrupt)")
    rows: dict = {}
    for k in range(count):
        raw, offset, size, digest, flags, zero, features, rest = ROW.unpack_from(buf, table_at + k * ROW_SIZE)
        name = _ascii(raw, path, f"section {k}'s name")
        if not name or name in rows or zero or any(rest) or flags & ~ZLIB:
            raise ArtifactError(f"{path}: section {k} ({name!r}) is malformed (empty or repeated name, bad flags)")
        if offset % ALIGN or offset < end or offset + size > len(buf):
            raise ArtifactError(f"{path}: section {name!r} ({size} bytes at {offset}) is not 64-byte aligned inside "
                                "the file after the table")
        if flags & ZLIB and name not in COMPRESSIBLE:
            raise ArtifactError(f"{path}: section {name!r} must not be compressed")
        rows[name] = Row(name, offset, size, bytes(digest), flags, features)
    spans = sorted((r.offset, r.offset + r.size, r.name) for r in rows.values())
    for (_, a_end, a), (b_start, _, b) in zip(spans, spans[1:]):
        if b_start < a_end:
            raise ArtifactError(f"{path}: sections {a!r} and {b!r} overlap")
    missing = [n for n in REQUIRED if n not in rows]
    if missing:
        raise ArtifactError(f"{path}: required section(s) {', '.join(missing)} missing")
    return rows


def _ascii(raw: bytes, path: str, what: str) -> str:
    text = bytes(raw).rstrip(b"\0")
    if b"\0" in text or any(c < 0x20 or c > 0x7e for c in text):
        raise ArtifactError(f"{path}: the {what} is not ASCII text")
    return text.decode()
