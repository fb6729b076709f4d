"""A model file parsed without a second copy of its weights. protobuf's C backend (upb) copies every `raw_data`
into the parsed message and again on each read, so the message and the arrays made from it held the weights twice
(BERT-base's ONNX compile peaked at 2.04x its weights). Here the protobuf wire format of the mapped file is walked
(a few thousand fields, not the weights' bytes) and each large main-graph initializer's `raw_data` is replaced by
an external-data reference to the file itself, so the loader's external-data path maps those bytes from the file
(`mmap=True`) or from a private copy of them (by default: snapshot.py)."""
from __future__ import annotations

import mmap
import os

from onnx import TensorProto

from . import snapshot
from .tensors import IR_DTYPES

INLINE_BYTES = 4096  # smaller raw_data stays in the message: a mapping per tiny tensor costs more than it saves
_GRAPH, _INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
_DATA_TYPE, _RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 2, 9, 13, 14  # TensorProto fields
_LENGTH_DELIMITED = 2


class _NotPlain(Exception):
    """The bytes are not wire format this walk reads (corrupt, or groups): the ordinary parser takes them."""


def read_stripped(path: str, copied: bool = False) -> bytes | None:
    """The model file's bytes, its large initializers' data replaced by references to the file (see the module
    docstring); None where that cannot be done (then the caller reads the file as it is). With `copied` each
    reference carries the file's stamp: the loader copies those bytes (snapshot.py) instead of mapping the file."""
    own = os.path.basename(path)
    if os.path.dirname(os.path.realpath(path)) != os.path.realpath(os.path.dirname(os.path.abspath(path))):
        return None  # a link to another folder: the loader resolves external data only inside the model's folder
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size == 0:
            return None
        refs = [("location", own)] + ([(snapshot.KEY, snapshot.stamp(st))] if copied else [])
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                return b"".join(_model(data, refs))
            except _NotPlain:
                return None


def _model(data, refs: list):
    """The ModelProto's fields, its graph rewritten; `refs`: the external-data entries every reference has."""
    for field, wire, start, value, end in _fields(data, 0, len(data)):
        if field == _GRAPH and wire == _LENGTH_DELIMITED:
            yield _message(_GRAPH, b"".join(_graph(data, value, end, refs)))
        else:
            yield data[start:end]


def _graph(data, pos: int, stop: int, refs: list):
    """The GraphProto's fields, each initializer with large raw_data referring to the file instead."""
    for field, wire, start, value, end in _fields(data, pos, stop):
        tensor = _tensor(data, value, end, refs) if field == _INITIALIZER and wire == _LENGTH_DELIMITED else None
        yield data[start:end] if tensor is None else _message(_INITIALIZER, tensor)


def _tensor(data, pos: int, stop: int, refs: list) -> bytes | None:
    """The TensorProto with its raw_data replaced by (location, offset, length) in the file; None to keep it."""
    fields = list(_fields(data, pos, stop))
    raws = [f for f in fields if f[0] == _RAW_DATA]
    types = [_varint(data, f[3], f[4])[0] for f in fields if f[0] == _DATA_TYPE and f[1] == 0]
    if len(raws) != 1 or raws[0][1] != _LENGTH_DELIMITED or raws[0][4] - raws[0][3] < INLINE_BYTES \
            or not types or types[-1] not in IR_DTYPES or any(f[0] in (_EXTERNAL_DATA, _DATA_LOCATION) for f in fields):
        return None
    _, _, _, value, end = raws[0]
    kept = b"".join(data[f[2]:f[4]] for f in fields if f[0] != _RAW_DATA)
    where = b"".join(_message(_EXTERNAL_DATA, _message(1, k.encode()) + _message(2, v.encode()))
                     for k, v in (*refs, ("offset", str(value)), ("length", str(end - value))))
    return kept + where + _varint_bytes(_DATA_LOCATION << 3) + _varint_bytes(TensorProto.EXTERNAL)


def _fields(data, pos: int, stop: int):
    """(field number, wire type, start of its tag, start of its value, end) of each field in data[pos:stop]."""
    while pos < stop:
        start = pos
        tag, pos = _varint(data, pos, stop)
        wire = tag & 7
        if wire == 0:
            end = _varint(data, pos, stop)[1]
        elif wire == 1:
            end = pos + 8
        elif wire == 5:
            end = pos + 4
        elif wire == _LENGTH_DELIMITED:
            size, pos = _varint(data, pos, stop)
            end = pos + size
        else:
            raise _NotPlain
        if end > stop or tag >> 3 == 0:
            raise _NotPlain
        yield tag >> 3, wire, start, pos, end
        pos = end


def _varint(data, pos: int, stop: int) -> tuple:
    value = shift = 0
    while pos < stop and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise _NotPlain


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _message(field: int, body: bytes) -> bytes:
    return _varint_bytes(field << 3 | _LENGTH_DELIMITED) + _varint_bytes(len(body)) + body
