"""Fuzzing the loader: seeded mutations (truncation, bit flips, overwritten and repeated byte runs) of small
models. Each mutant either loads, and then runs or fails with a Cuvil error (or MemoryError, when a mutated
size asks for more memory than the machine has), or is refused with a Cuvil error; nothing else may escape."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import cuvil

from .helpers import F32, I64, helper, model, rand

N = helper.make_node
MUTANTS = 150


def _conv_net():
    nodes = [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"), N("Relu", ["c"], ["r"]),
             N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]), N("Shape", ["p"], ["s"]),
             N("Gather", ["s", "zero"], ["n"], axis=0), N("Unsqueeze", ["n", "axes"], ["n1"]),
             N("Concat", ["n1", "minus1"], ["target"], axis=0), N("Reshape", ["p", "target"], ["flat"]),
             N("Gemm", ["flat", "fc", "fcb"], ["y"], transB=1)]
    inits = [("w", rand(4, 2, 3, 3, seed=1)), ("b", rand(4, seed=2)), ("zero", np.int64(0)), ("axes", np.int64([0])),
             ("minus1", np.int64([-1])), ("fc", rand(3, 16, seed=3)), ("fcb", rand(3, seed=4))]
    return model(nodes, [("x", F32, ["n", 2, 4, 4])], [("y", F32, None)], inits, opset=13)


def _transformer_bits():
    nodes = [N("LayerNormalization", ["x", "g", "bb"], ["ln"], axis=-1), N("MatMul", ["ln", "w"], ["h"]),
             N("Softmax", ["h"], ["sm"], axis=-1), N("Transpose", ["sm"], ["t"], perm=[0, 2, 1]),
             N("ReduceMean", ["t"], ["m"], axes=[1], keepdims=0), N("Where", ["mask", "m", "fill"], ["y"]),
             N("Cast", ["y"], ["yi"], to=I64)]
    inits = [("g", rand(6, seed=5)), ("bb", rand(6, seed=6)), ("w", rand(6, 5, seed=7)), ("fill", np.float32(-1)),
             ("mask", np.array([True, False, True]))]
    return model(nodes, [("x", F32, ["b", 3, 6])], [("y", F32, None), ("yi", I64, None)], inits, opset=17)


def _branch(op, out):
    return helper.make_graph([N(op, ["x", "x"], [out])], op, [], [helper.make_tensor_value_info(out, F32, [3])])


def _branchy():
    then_g, else_g = _branch("Add", "t"), _branch("Sub", "e")
    nodes = [N("ReduceMax", ["x"], ["mx"], keepdims=0), N("Greater", ["mx", "zero"], ["c"]),
             N("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g), N("Pad", ["y", "pads"], ["z"])]
    return model(nodes, [("x", F32, [3])], [("z", F32, None)], [("zero", np.float32(0)), ("pads", np.int64([1, 2]))],
                 opset=13)


def _mutate(data: bytes, rng) -> bytes:
    buf = bytearray(data)
    kind = rng.integers(4)
    if kind == 0:
        return bytes(buf[: rng.integers(len(buf))])
    if kind == 1:
        for _ in range(rng.integers(1, 4)):
            i = rng.integers(len(buf))
            buf[i] ^= 1 << rng.integers(8)
        return bytes(buf)
    i, n = rng.integers(len(buf)), rng.integers(1, 8)
    if kind == 2:
        buf[i:i + n] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        return bytes(buf)
    return bytes(buf[:i] + buf[i:i + n] * 2 + buf[i + n:])


def _inputs(m, rng) -> list:
    out = []
    for spec in m.inputs:
        shape = [d if isinstance(d, int) else 2 for d in spec.shape]
        out.append(rng.standard_normal(shape).astype(spec.dtype) if spec.dtype.kind == "f"
                   else rng.integers(0, 3, shape).astype(spec.dtype))
    return out


def test_mutated_models_fail_cleanly():
    outcomes = {"refused": 0, "loaded": 0, "ran": 0}
    for build in (_conv_net, _transformer_bits, _branchy):
        _fuzz(build().SerializeToString(), outcomes)
    assert outcomes["refused"] and outcomes["ran"], outcomes


def _fuzz(data: bytes, outcomes: dict) -> None:
    cuvil.load_onnx(data)(*_inputs(cuvil.load_onnx(data), np.random.default_rng(0)))  # the original works
    rng = np.random.default_rng(1234)
    for _ in range(MUTANTS):
        mutant = _mutate(data, rng)
        try:
            m = cuvil.load_onnx(mutant)
        except cuvil.CuvilError:
            outcomes["refused"] += 1
            continue
        outcomes["loaded"] += 1
        try:
            m(*_inputs(m, rng))
            outcomes["ran"] += 1
        except (cuvil.CuvilError, MemoryError):
            pass


def test_parsed_but_inconsistent_protos_fail_cleanly():
    """Field-level damage the bytes rarely reach: wrong attribute kinds, missing attributes, bad dims."""
    base = _conv_net()
    damages = [lambda p: p.graph.node[0].attribute[0].CopyFrom(helper.make_attribute("pads", 3.5)),
               lambda p: p.graph.node[2].ClearField("attribute"),
               lambda p: p.graph.input[0].type.tensor_type.shape.dim[1].CopyFrom(
                   onnx.TensorShapeProto.Dimension(dim_value=3)),
               lambda p: p.graph.initializer[0].dims.append(7),
               lambda p: p.graph.node[8].input.append("extra"),
               lambda p: setattr(p.graph.initializer[1], "data_type", 1234)]
    for damage in damages:
        proto = onnx.ModelProto()
        proto.CopyFrom(base)
        damage(proto)
        with pytest.raises(cuvil.CuvilError):
            cuvil.load_onnx(proto)
