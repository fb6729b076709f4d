"""The binary form of a module: quick to load, with large constants memory-mapped, not parsed or copied.

    >>> import numpy as np
    >>> from cuvil.ir import Builder, Module, TensorType
    >>> from cuvil.ir.serialize import from_bytes, to_bytes
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType("f32", (16,))], ["x"])
    >>> b.ret(b.add(b.args[0], b.constant(np.arange(16, dtype=np.float32), "w")))
    >>> str(from_bytes(to_bytes(m))) == str(m)
    True

Layout (little-endian; offsets count from the start of the file):

    0     header, 64 bytes: magic b"CUVILIR\\0", format version u32, flags u32, the lengths of the metadata,
          body and index sections and of the whole file (u64 each), the CRC32s of the three sections and
          of the header's first 60 bytes (u32 each)
    64    metadata: JSON {"cuvil_version": ..., "metadata": module.metadata}
          body: the zlib-compressed module text (`print_module`, without metadata), constants of more than
          8 elements printed as `elided`
          index: JSON [[name, offset, nbytes, crc32], ...] of those constants, offsets from the data start
          zero padding to a multiple of 64
    data  the elided constants, raw and uncompressed, each at a multiple of 64, zero padding between them

Every section and every constant has a CRC32, so a truncated, corrupted or foreign file raises
SerializationError. Only the padding is unchecked: no byte of it is ever read.
"""
from __future__ import annotations

import json
import mmap as _mmap
import os
import secrets
import struct
import zlib

import numpy as np

from ..errors import CuvilError, SerializationError
from .core import Module
from .dtypes import DType
from .parser import _Parser
from .printer import print_module

MAGIC = b"CUVILIR\0"
FORMAT_VERSION = 1
ALIGN = 64
_FIELDS = struct.Struct("<8sII4Q3I")  # magic, version, flags, 3 section lengths, file length, 3 section CRCs
_HEADER_SIZE = _FIELDS.size + 4  # then the CRC of the fields
# Constants of more than 8 elements (over 64 bytes for all but the 16-byte c128) go to the table; the printer's
# own elision option picks exactly those constants.
_INLINE_MAX_ELEMENTS = 8
_SECTIONS = ("metadata", "body", "index")


def to_bytes(module: Module) -> bytes:
    """The module's binary form (layout in this module's docstring)."""
    return b"".join(_chunks(module))


def save(module: Module, path) -> None:
    """Write `module` to `path` atomically: a temp file in the same directory, fsync, then os.replace.

    A failure leaves `path` as it was, and modules mapped from the old file keep their data.
    """
    path = os.fspath(path)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "xb") as f:
            for chunk in _chunks(module):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def from_bytes(data) -> Module:
    """Read a module written by `to_bytes`. Its large constants are read-only views into `data`."""
    return _Reader(memoryview(data).toreadonly().cast("B"), None).module()


def load(path, mmap: bool = True) -> Module:
    """Read a module saved by `save`. With `mmap`, large constants are read-only views of the mapped file.

    Every checksum is verified, so the whole file is read once (into the page cache, not copied).
    """
    where = os.fspath(path)
    with open(path, "rb") as f:
        if not mmap:
            return _Reader(memoryview(f.read()).toreadonly(), where).module()
        if os.fstat(f.fileno()).st_size == 0:
            raise SerializationError("the file is empty, not a Cuvil IR file", where)
        mapped = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ)
    return _Reader(memoryview(mapped), where).module()


# -- writing ---------------------------------------------------------------------------------------------
def _chunks(module: Module):
    """The file's pieces in order; constants come as byte views of their arrays, not copies."""
    table = {name: _raw(arr) for name, arr in module.constants.items() if arr.size > _INLINE_MAX_ELEMENTS}
    index, end = [], 0
    for name, raw in table.items():
        offset = _align(end)
        index.append([name, offset, raw.nbytes, zlib.crc32(raw)])
        end = offset + raw.nbytes
    sections = [_metadata_json(module), zlib.compress(_text(module).encode()), json.dumps(index).encode()]
    data_start = _align(_HEADER_SIZE + sum(map(len, sections)))
    fields = _FIELDS.pack(MAGIC, FORMAT_VERSION, 0, *map(len, sections), data_start + end,
                          *map(zlib.crc32, sections))
    yield fields + struct.pack("<I", zlib.crc32(fields))
    yield from sections
    yield bytes(data_start - _HEADER_SIZE - sum(map(len, sections)))
    pos = 0
    for (_, offset, _, _), raw in zip(index, table.values()):
        yield bytes(offset - pos)
        yield raw
        pos = offset + raw.nbytes


def _raw(arr: np.ndarray) -> np.ndarray:
    """The constant's bytes as a flat uint8 array, in the dtype's native layout (a view when it already is)."""
    return np.ascontiguousarray(arr, DType.from_numpy(arr.dtype).numpy).reshape(-1).view(np.uint8)


def _metadata_json(module: Module) -> bytes:
    from ..version import __version__

    return json.dumps({"cuvil_version": __version__, "metadata": module.metadata}).encode()


def _text(module: Module) -> str:
    """The printed module without its metadata, which the metadata section holds instead."""
    view = Module()
    view.functions, view.constants = module.functions, module.constants
    return print_module(view, elide_constants_over=_INLINE_MAX_ELEMENTS)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# -- reading ---------------------------------------------------------------------------------------------
class _Reader:
    """Checks a buffer section by section and rebuilds the module; every failure names what is wrong."""

    def __init__(self, buf: memoryview, where):
        self.buf, self.where = buf, where

    def fail(self, message: str) -> SerializationError:
        return SerializationError(message, self.where)

    def module(self) -> Module:
        lengths, crcs = self.header()
        sections, pos = {}, _HEADER_SIZE
        for what, n, crc in zip(_SECTIONS, lengths, crcs):
            sections[what] = self.checked(pos, n, crc, f"{what} section")
            pos += n
        meta = self.decode(sections["metadata"], "metadata", json.loads)
        text = self.decode(sections["body"], "body", lambda b: zlib.decompress(b).decode())
        index = self.decode(sections["index"], "index", json.loads)
        if not isinstance(meta, dict) or not isinstance(meta.get("metadata"), dict) or not isinstance(index, list):
            raise self.fail("the metadata or index section has the wrong structure")
        table = self.table(index, _align(pos))
        m = self.parse(text, table)
        m.metadata = meta["metadata"]
        return m

    def header(self) -> tuple:
        buf, n = self.buf, len(self.buf)
        if n == 0 or bytes(buf[:8]) != MAGIC[:n]:
            raise self.fail(f"not a Cuvil IR file: it does not start with {MAGIC!r}")
        if n >= 12 and struct.unpack_from("<I", buf, 8)[0] != FORMAT_VERSION:
            raise self.fail(_version_problem(struct.unpack_from("<I", buf, 8)[0]))
        if n < _HEADER_SIZE:
            raise self.fail(f"truncated: {n} bytes, shorter than the {_HEADER_SIZE}-byte header")
        fields = _FIELDS.unpack_from(buf)
        if zlib.crc32(buf[:_FIELDS.size]) != struct.unpack_from("<I", buf, _FIELDS.size)[0]:
            raise self.fail("the header is corrupted (checksum mismatch)")
        if fields[2]:
            raise self.fail(f"unknown flags {fields[2]:#x}: written by a newer cuvil")
        file_len = fields[6]
        if n != file_len:
            raise self.fail(f"truncated: {n} of {file_len} bytes" if n < file_len
                            else f"{n - file_len} unexpected bytes after the end of the module")
        if _HEADER_SIZE + sum(fields[3:6]) > n:
            raise self.fail("the header's section lengths run past the end of the file")
        return fields[3:6], fields[7:10]

    def checked(self, offset: int, nbytes: int, crc: int, what: str) -> np.ndarray:
        """The bytes at offset as a uint8 view, after checking their place and CRC32."""
        if offset < 0 or offset + nbytes > len(self.buf):
            raise self.fail(f"{what} runs past the end of the file")
        raw = np.frombuffer(self.buf, np.uint8, nbytes, offset)
        if zlib.crc32(raw) != crc:
            raise self.fail(f"{what} is corrupted (checksum mismatch)")
        return raw

    def decode(self, raw: np.ndarray, what: str, fn):
        try:
            return fn(raw.tobytes())
        except (ValueError, zlib.error) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise self.fail(f"the {what} section does not decode: {e}") from None

    def table(self, index: list, data_start: int) -> dict:
        table = {}
        for entry in index:
            if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str)
                    and all(isinstance(x, int) and x >= 0 for x in entry[1:]) and entry[1] % ALIGN == 0):
                raise self.fail(f"bad constant table entry {entry!r}")
            name, offset, nbytes, crc = entry
            table[name] = self.checked(data_start + offset, nbytes, crc, f"constant @{name}")
        return table

    def parse(self, text: str, table: dict) -> Module:
        try:
            m = _TableParser(text, table).module()
        except (CuvilError, ValueError, KeyError, TypeError) as e:
            raise self.fail(f"the module text does not parse (incompatible cuvil version?): {e}") from None
        if table:
            raise self.fail(f"the constant table holds @{next(iter(table))}, which the module text lacks")
        return m


class _TableParser(_Parser):
    """The text parser, taking the data of constants printed as `elided` from the constant table."""

    def __init__(self, text: str, table: dict):
        super().__init__(text)
        self.table = table  # name -> uint8 view; entries are removed as the text uses them

    def constant(self, m: Module) -> None:
        start = self.pos
        self.expect("@")
        name = self.ident()
        self.expect(":")
        t = self.type()
        self.expect("=")
        if not self.accept("elided"):
            self.pos = start
            return super().constant(m)
        raw = self.table.pop(name, None)
        if raw is None:
            raise self.error(f"constant @{name} is not in the constant table")
        if not t.is_static or raw.nbytes != t.static_nbytes():
            raise self.error(f"constant @{name} has {raw.nbytes} bytes in the table, its type {t} needs another size")
        m.constants[name] = raw.view(t.dtype.numpy).reshape(t.shape)


def _version_problem(version: int) -> str:
    if version > FORMAT_VERSION:
        return (f"format version {version} is newer than this cuvil reads (up to {FORMAT_VERSION}); "
                "upgrade cuvil to load it")
    return f"unknown format version {version}"
