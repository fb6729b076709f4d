"""A second, independent reading of docs/artifact.md for the C runtime's tests: it lays out `.cuv` files from
sections, finds their parts, and re-signs a mutated file (fresh SHA-256s and CRC) so a test reaches the parser
behind the checksums. Kept apart from cuvil/runtime/container.py on purpose: two writers cross-check the doc."""
from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass

MAGIC = b"\x89CUV\r\n\x1a\n"
HEADER, ROW = 128, 96
PIECE = 1 << 20


@dataclass
class Part:
    """A stretch of a file: the header, the table, or a section (by name)."""
    name: str
    offset: int
    size: int


def digest(data: bytes, version: int) -> bytes:
    """A section's SHA-256 as its row holds it: format 1 over the bytes, format 2 over the SHA-256s of its 1 MiB
    pieces."""
    if version < 2:
        return hashlib.sha256(data).digest()
    return hashlib.sha256(b"".join(hashlib.sha256(data[k:k + PIECE]).digest()
                                   for k in range(0, len(data), PIECE))).digest()


def pack(sections: list, triple: str = "x86_64-linux-gnu", features: int = 0, version: int = 1) -> bytes:
    """A .cuv of `sections`, each (name, bytes) or (name, bytes, flags, features), 64-byte aligned after the table."""
    rows, body, at = [], b"", _align(HEADER + ROW * len(sections))
    start = at
    for s in sections:
        name, data, flags, feats = (*s, 0, 0)[:4]
        body += b"\0" * (at - start - len(body)) + data
        rows.append(struct.pack("<16sQQ32sIIQ16s", name.encode(), at, len(data), digest(data, version),
                                flags, 0, feats, b""))
        at = _align(at + len(data))
    table = b"".join(rows)
    pad = b"\0" * (start - HEADER - len(table))
    size = start + len(body)
    head = struct.pack("<8sIIQIIQQ32s32s12s", MAGIC, version, HEADER, size, len(rows), 0, HEADER, features,
                       triple.encode().ljust(32, b"\0"), hashlib.sha256(table).digest(), b"")
    return head + struct.pack("<I", zlib.crc32(head)) + table + pad + body


def parts(data: bytes) -> list:
    """The header, the table and every section of a well-formed file, in file order."""
    count = struct.unpack_from("<I", data, 24)[0]
    found = [Part("header", 0, HEADER), Part("table", HEADER, ROW * count)]
    for k in range(count):
        name, offset, size = struct.unpack_from("<16sQQ", data, HEADER + ROW * k)
        found.append(Part(name.rstrip(b"\0").decode(), offset, size))
    return found


def section(data: bytes, name: str) -> bytes:
    p = next(p for p in parts(data) if p.name == name)
    return data[p.offset:p.offset + p.size]


def resign(data: bytes) -> bytes:
    """`data` with every section's SHA-256, the table's and the header's CRC recomputed: the checksums pass, so
    whatever was changed reaches the parser. Only sections that still lie inside the file are re-hashed."""
    out = bytearray(data)
    count = min(struct.unpack_from("<I", out, 24)[0], (len(out) - HEADER) // ROW)
    version = struct.unpack_from("<I", out, 8)[0]
    for k in range(count):
        row = HEADER + ROW * k
        offset, size = struct.unpack_from("<QQ", out, row + 16)
        if offset + size <= len(out):
            out[row + 32:row + 64] = digest(bytes(out[offset:offset + size]), version)
    out[80:112] = hashlib.sha256(out[HEADER:HEADER + ROW * count]).digest()
    out[124:128] = struct.pack("<I", zlib.crc32(out[:124]))
    return bytes(out)


def entries_text(entries: list) -> bytes:
    """The `entries` section of entries given as dicts (name, prefix, inputs, outputs: [(name, dtype, rank)], symbols,
    consts: [(offset, nbytes), or None for a constant left out as `derived`], prepared: [(index, offset, nbytes)],
    checks)."""
    lines = ["cuvil-entries 1"]
    for e in entries:
        lines.append(f"entry {e['name']} {e['prefix']} {len(e['inputs'])} {len(e['outputs'])} {len(e['symbols'])} "
                     f"{len(e['consts'])} {len(e['prepared'])}")
        lines += [f"symbol {s}" for s in e["symbols"]]
        lines += [f"input {n} {d} {r}" for n, d, r in e["inputs"]] + [f"output {n} {d} {r}" for n, d, r in e["outputs"]]
        lines += [f"derived {k}" if c is None else f"const {k} {c[0]} {c[1]}" for k, c in enumerate(e["consts"])]
        lines += [f"prepared {j} {o} {n}" for j, o, n in e["prepared"]]
        lines += ["checks " + " ".join(map(str, [len(e["checks"]), *e["checks"]])), "end"]
    return ("\n".join(lines) + "\n").encode()


def _align(n: int) -> int:
    return -(-n // 64) * 64
