"""Seeded mutations of ONNX models: byte-level damage to the file (truncation, bit flips, overwritten and repeated
runs) and protobuf-level edits that keep the file parseable (shapes, element types, attributes, initializers,
names, node wiring). `mutant(seed_bytes, rng)` returns (kind, bytes); the same rng state gives the same mutant."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

ELEM_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.INT32,
              TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL, TensorProto.INT4, TensorProto.UINT16,
              TensorProto.STRING, TensorProto.BFLOAT16, 0, 99]
OPS = ["Relu", "Add", "MatMul", "Conv", "MaxPool", "Reshape", "Concat", "Softmax", "Transpose", "Gemm", "Identity",
       "ReduceMean", "Cast", "Frobnicate"]
ODD_INTS = [0, 1, -1, 2, 3, 7, -2, 2 ** 31, -(2 ** 40), 10 ** 6]


# -- bytes ------------------------------------------------------------------------------------------------------
def truncate(data: bytes, rng) -> bytes:
    return data[: rng.integers(len(data))]


def flip_bits(data: bytes, rng) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.integers(1, 4)):
        buf[rng.integers(len(buf))] ^= 1 << rng.integers(8)
    return bytes(buf)


def overwrite_run(data: bytes, rng) -> bytes:
    buf = bytearray(data)
    i, n = rng.integers(len(buf)), rng.integers(1, 8)
    buf[i:i + n] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    return bytes(buf)


def repeat_run(data: bytes, rng) -> bytes:
    i, n = rng.integers(len(data)), rng.integers(1, 8)
    return data[:i] + data[i:i + n] * 2 + data[i + n:]


# -- protobuf fields --------------------------------------------------------------------------------------------
def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))] if len(seq) else None


def shapes(p: onnx.ModelProto, rng) -> None:
    """A graph input's or an initializer's dims: changed, removed, added, made symbolic or zero."""
    if rng.integers(2):
        v = _pick(rng, p.graph.input)
        dims = v.type.tensor_type.shape.dim
        choice = rng.integers(4)
        if choice == 0 and len(dims):
            _pick(rng, dims).dim_value = int(_pick(rng, [0, 1, 2, 5, 9, -3]))
        elif choice == 1 and len(dims):
            del dims[int(rng.integers(len(dims)))]
        elif choice == 2:
            dims.add().dim_value = int(rng.integers(1, 4))
        elif len(dims):
            _pick(rng, dims).dim_param = _pick(rng, ["batch", "n", "other"])
        return
    t = _pick(rng, p.graph.initializer)
    choice = rng.integers(3)
    if choice == 0 and len(t.dims):
        t.dims[int(rng.integers(len(t.dims)))] = int(_pick(rng, [0, 1, 2, 3, 4, 16, -1]))
    elif choice == 1 and len(t.dims):
        del t.dims[int(rng.integers(len(t.dims)))]
    else:
        t.dims.append(int(rng.integers(1, 3)))


def dtypes(p: onnx.ModelProto, rng) -> None:
    """The element type of an input, output or initializer, or a Cast's `to`."""
    choice = rng.integers(3)
    new = int(_pick(rng, ELEM_TYPES))
    if choice == 0:
        _pick(rng, [*p.graph.input, *p.graph.output]).type.tensor_type.elem_type = new
    elif choice == 1:
        _pick(rng, p.graph.initializer).data_type = new
    else:
        casts = [n for n in p.graph.node if n.op_type == "Cast"]
        node = _pick(rng, casts) or _pick(rng, p.graph.node)
        node.attribute.append(helper.make_attribute("to", new))


def attributes(p: onnx.ModelProto, rng) -> None:
    """A node's attribute: other ints, another type, removed, duplicated, or an unknown one added."""
    nodes = [n for n in p.graph.node if len(n.attribute)] or list(p.graph.node)
    node = _pick(rng, nodes)
    attr = _pick(rng, node.attribute)
    choice = rng.integers(5)
    if attr is None or choice == 0:
        node.attribute.append(helper.make_attribute(_pick(rng, ["kernel_shape", "axis", "pads", "alpha", "bogus"]),
                                                    _pick(rng, [3, [2, 2], 0.5, "x", [1, 1, 1, 1]])))
    elif choice == 1 and attr.type == AttributeProto.INTS and len(attr.ints):
        attr.ints[int(rng.integers(len(attr.ints)))] = int(_pick(rng, ODD_INTS))
    elif choice == 1 and attr.type == AttributeProto.INTS:
        attr.ints.append(int(_pick(rng, ODD_INTS)))
    elif choice == 1 and attr.type == AttributeProto.INT:
        attr.i = int(_pick(rng, ODD_INTS))
    elif choice == 2:
        value = _pick(rng, [1.5, "same", [1, 2], 4])
        node.attribute.remove(attr)
        node.attribute.append(helper.make_attribute(attr.name, value))
    elif choice == 3:
        node.attribute.remove(attr)
    else:
        node.attribute.append(attr)


def initializers(p: onnx.ModelProto, rng) -> None:
    """An initializer's data: cut short, removed, repeated, or filled with NaN, inf or huge values."""
    t = _pick(rng, p.graph.initializer)
    choice = rng.integers(4)
    if choice == 0 and t.raw_data:
        t.raw_data = t.raw_data[: int(rng.integers(len(t.raw_data)))]
    elif choice == 1:
        p.graph.initializer.remove(t)
    elif choice == 2:
        p.graph.initializer.append(t)
    elif t.data_type == TensorProto.FLOAT and t.raw_data and len(t.raw_data) % 4 == 0:
        arr = np.frombuffer(t.raw_data, np.float32).copy()
        arr[rng.integers(arr.size, size=max(1, arr.size // 4))] = _pick(rng, [np.nan, np.inf, -np.inf, 3e38])
        t.raw_data = arr.tobytes()


def names(p: onnx.ModelProto, rng) -> None:
    """Names and wiring: an input renamed, an output name repeated, a node input dropped, added or re-pointed,
    an op type or domain changed, two nodes swapped."""
    node = _pick(rng, p.graph.node)
    choice = rng.integers(7)
    known = [v.name for v in p.graph.input] + [t.name for t in p.graph.initializer] + \
        [o for n in p.graph.node for o in n.output]
    if choice == 0 and len(node.input):
        node.input[int(rng.integers(len(node.input)))] = _pick(rng, known + ["nowhere", ""])
    elif choice == 1:
        node.output[0] = _pick(rng, known)
    elif choice == 2 and len(node.input):
        del node.input[int(rng.integers(len(node.input)))]
    elif choice == 3:
        node.input.append(_pick(rng, known))
    elif choice == 4:
        node.op_type = _pick(rng, OPS)
    elif choice == 5:
        _pick(rng, [*p.graph.input, *p.graph.output]).name = _pick(rng, known + [""])
    else:
        i, j = rng.integers(len(p.graph.node), size=2)
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(p.graph.node[int(i)])
        b.CopyFrom(p.graph.node[int(j)])
        p.graph.node[int(i)].CopyFrom(b)
        p.graph.node[int(j)].CopyFrom(a)


BYTE_MUTATIONS = {"truncate": truncate, "flip": flip_bits, "overwrite": overwrite_run, "repeat": repeat_run}
PROTO_MUTATIONS = {"shape": shapes, "dtype": dtypes, "attribute": attributes, "initializer": initializers,
                   "name": names}
KINDS = [*BYTE_MUTATIONS, *PROTO_MUTATIONS]


def mutant(seed: onnx.ModelProto, rng) -> tuple:
    """(kind, bytes): one mutation of the seed model, drawn from `rng`."""
    kind = KINDS[int(rng.integers(len(KINDS)))]
    if kind in BYTE_MUTATIONS:
        return kind, BYTE_MUTATIONS[kind](seed.SerializeToString(), rng)
    p = onnx.ModelProto()
    p.CopyFrom(seed)
    for _ in range(int(rng.integers(1, 3))):
        PROTO_MUTATIONS[kind](p, rng)
    return kind, p.SerializeToString()
