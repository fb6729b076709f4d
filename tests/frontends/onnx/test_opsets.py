"""Models of every opset from 1 to 28, written by hand with ops valid at that opset (most of them ops that changed
at it), against ONNX's reference implementation; opsets 1 to 6 are upgraded on load (`legacy.py`)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import defs, numpy_helper
from onnx.reference import ReferenceEvaluator

import cuvil

from .helpers import F32, helper, rand

N = helper.make_node


def _model(nodes, inputs, outputs, opset, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(o, F32, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=3 if opset < 8 else 8)


X = ("x", F32, [2, 3, 4, 5])
# opset -> (nodes, inputs, outputs, initializers)
CASES = {
    1: ([N("Relu", ["x"], ["r"], consumed_inputs=[0]), N("Pad", ["r"], ["p"], paddings=[0, 0, 1, 0, 0, 0, 1, 2]),
         N("Cast", ["p"], ["c"], to="DOUBLE"), N("Cast", ["c"], ["d"], to="FLOAT"),
         N("Add", ["d", "b"], ["y"], broadcast=1, axis=1)], [X], ["y"], [("b", np.float32([1, 2, 3]))]),
    2: ([N("Split", ["x"], ["a", "b"], axis=1, split=[1, 2]), N("LpPool", ["b"], ["y"], kernel_shape=[2, 2], p=2),
         N("GlobalLpPool", ["a"], ["z"], p=3)], [X], ["y", "z"], []),
    3: ([N("GRU", ["s", "w", "r"], ["y"], hidden_size=4)], [("s", F32, [3, 2, 5]), ("w", F32, [1, 12, 5]),
                                                           ("r", F32, [1, 12, 4])], ["y"], []),
    4: ([N("Concat", ["x", "x"], ["y"], axis=2)], [X], ["y"], []),
    5: ([N("Reshape", ["x", "shape"], ["y"])], [X], ["y"], [("shape", np.int64([6, -1]))]),
    6: ([N("Tile", ["x", "reps"], ["t"]), N("InstanceNormalization", ["t", "s", "bias"], ["y"], epsilon=1e-3)], [X],
        ["y"], [("reps", np.int64([1, 1, 2, 1])), ("s", np.float32([1, 2, 3])), ("bias", np.float32([0, 1, -1]))]),
    7: ([N("Add", ["x", "b"], ["a"]), N("PRelu", ["a", "slope"], ["p"]), N("Sin", ["p"], ["y"])], [X], ["y"],
        [("b", np.float32(np.arange(5))), ("slope", np.float32([[[0.1]], [[0.2]], [[0.3]]]))]),
    8: ([N("Expand", ["x", "shape"], ["e"]), N("Max", ["e", "b"], ["y"])], [("x", F32, [3, 1])], ["y"],
        [("shape", np.int64([2, 3, 4])), ("b", np.float32(np.linspace(-1, 1, 4)))]),
    9: ([N("Erf", ["x"], ["e"]), N("Greater", ["x", "e"], ["m"]), N("Where", ["m", "x", "e"], ["y"])], [X], ["y"], []),
    10: ([N("Slice", ["x", "st", "en", "ax"], ["s"]), N("ThresholdedRelu", ["s"], ["y"], alpha=0.3)], [X], ["y"],
         [("st", np.int64([1, -3])), ("en", np.int64([3, 100])), ("ax", np.int64([1, 3]))]),
    11: ([N("Clip", ["x", "lo", "hi"], ["c"]), N("CumSum", ["c", "ax"], ["y"], reverse=1)], [X], ["y"],
         [("lo", np.float32(-0.5)), ("hi", np.float32(0.7)), ("ax", np.int64(2))]),
    12: ([N("Celu", ["x"], ["c"], alpha=0.5), N("Einsum", ["c", "c"], ["y"], equation="abcd,abed->abce")], [X], ["y"],
         []),
    13: ([N("Softmax", ["x"], ["s"], axis=1), N("ReduceSum", ["s", "ax"], ["y"], keepdims=0)], [X], ["y"],
         [("ax", np.int64([1, 3]))]),
    14: ([N("Trilu", ["x"], ["t"], upper=0), N("HardSwish", ["t"], ["y"])], [X], ["y"], []),
    15: ([N("Pow", ["x", "e"], ["p"]), N("CastLike", ["p", "x"], ["y"])], [X], ["y"], [("e", np.float32(2.0))]),
    16: ([N("LeakyRelu", ["x"], ["l"], alpha=0.2), N("GreaterOrEqual", ["l", "x"], ["m"]),
          N("Where", ["m", "l", "x"], ["y"])], [X], ["y"], []),
    17: ([N("LayerNormalization", ["x", "s"], ["y"], axis=-1)], [X], ["y"], [("s", np.float32(np.arange(5) + 1))]),
    18: ([N("ReduceMax", ["x", "ax"], ["m"], keepdims=1), N("Mish", ["m"], ["y"])], [X], ["y"],
         [("ax", np.int64([2]))]),
    19: ([N("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 1])], [X], ["y"], []),
    20: ([N("Gelu", ["x"], ["g"], approximate="tanh"), N("IsInf", ["g"], ["i"]), N("Cast", ["i"], ["c"], to=F32),
          N("Add", ["g", "c"], ["y"])], [X], ["y"], []),
    21: ([N("GroupNormalization", ["x", "s", "b"], ["g"], num_groups=3), N("Flatten", ["g"], ["y"], axis=2)], [X],
         ["y"], [("s", np.float32([1, 2, 3])), ("b", np.float32([0, 1, 2]))]),
    22: ([N("Elu", ["x"], ["e"]), N("GlobalAveragePool", ["e"], ["y"])], [X], ["y"], []),
    23: ([N("RMSNormalization", ["x", "s"], ["y"], axis=-1)], [X], ["y"], [("s", np.float32(np.arange(5) + 1))]),
    24: ([N("Swish", ["x"], ["s"], alpha=1.5), N("TopK", ["s", "k"], ["y", "i"], axis=-1)], [X], ["y"],
         [("k", np.int64([2]))]),
    25: ([N("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]), N("Unsqueeze", ["t", "ax"], ["u"]),
          N("Squeeze", ["u", "ax"], ["y"])], [X], ["y"], [("ax", np.int64([0]))]),
    26: ([N("CumProd", ["x", "ax"], ["y"])], [X], ["y"], [("ax", np.int64(3))]),
    27: ([N("Range", ["lo", "hi", "d"], ["r"]), N("Mul", ["x", "r"], ["y"])], [X], ["y"],
         [("lo", np.float32(0)), ("hi", np.float32(5)), ("d", np.float32(1))]),
    28: ([N("Celu", ["x"], ["c"], alpha=2.0), N("SwiGLU", ["c", "x"], ["y"], alpha=1.5)], [X], ["y"], []),
}


def _windows(a, k):
    return np.lib.stride_tricks.sliding_window_view(a, k, axis=(2, 3))


# What ONNX's reference cannot evaluate (Cast's string `to`, GlobalLpPool), spelled in NumPy.
EXPECTED = {
    1: lambda x: [np.pad(np.maximum(x, 0), [(0, 0), (0, 0), (1, 1), (0, 2)]) + np.float32([1, 2, 3])[:, None, None]],
    2: lambda x: [np.sqrt((_windows(x[:, 1:], (2, 2)) ** 2).sum(axis=(-1, -2))),
                  np.cbrt((np.abs(x[:, :1]) ** 3).sum(axis=(2, 3), keepdims=True))],
}


def _feeds(proto):
    return {i.name: rand(*[d.dim_value for d in i.type.tensor_type.shape.dim], seed=k)
            for k, i in enumerate(proto.graph.input)}


def test_every_opset_has_a_case():
    assert sorted(CASES) == list(range(1, defs.onnx_opset_version() + 1))


@pytest.mark.parametrize("opset", sorted(CASES))
def test_opset_matches_the_reference(opset):
    nodes, inputs, outputs, inits = CASES[opset]
    proto = _model(nodes, inputs, outputs, opset, inits)
    feeds = _feeds(proto)
    want = EXPECTED[opset](*feeds.values()) if opset in EXPECTED else ReferenceEvaluator(proto).run(None, feeds)
    got = cuvil.load_onnx(proto)(**feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


S, B, M, V = (np.float32([1, 2, 3]), np.float32([0, 1, -1]), np.float32([0.1, 0, -0.2]), np.float32([1, 2, 0.5]))
# (name, opset, nodes, initializers, expected from x): forms of opsets 1 to 6 the version converter lacks or needs
LEGACY = [
    ("batchnorm-1", 5, [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], consumed_inputs=[0, 0, 0, 1, 1],
                          is_test=1, epsilon=1e-3)], [("s", S), ("b", B), ("m", M), ("v", V)],
     lambda x: (x - M[:, None, None]) / np.sqrt(V[:, None, None] + 1e-3) * S[:, None, None] + B[:, None, None]),
    ("tile-1", 5, [N("Tile", ["x", "tiles", "axis"], ["y"])], [("tiles", np.int64([3])), ("axis", np.int64([2]))],
     lambda x: np.tile(x, (1, 1, 3, 1))),
    ("mul-axis", 6, [N("Mul", ["x", "b"], ["y"], broadcast=1, axis=2)], [("b", np.float32([1, -2, 3, 0.5]))],
     lambda x: x * np.float32([1, -2, 3, 0.5])[:, None]),
    ("sub-negative-axis", 3, [N("Sub", ["x", "b"], ["y"], broadcast=1, axis=-3, consumed_inputs=[0, 0])],
     [("b", np.float32([[1], [2], [3]]))], lambda x: x - np.float32([1, 2, 3])[:, None, None]),
    ("reshape-1", 1, [N("Reshape", ["x"], ["y"], shape=[6, 20])], [], lambda x: x.reshape(6, 20)),
    ("concat-1", 1, [N("Concat", ["x", "x"], ["y"])], [], lambda x: np.concatenate([x, x], axis=1)),
    ("gemm-1", 5, [N("Flatten", ["x"], ["f"]), N("Gemm", ["f", "w", "c"], ["y"], broadcast=1, transB=1)],
     [("w", np.float32(np.eye(4, 60))), ("c", np.float32([1, 2, 3, 4]))],
     lambda x: x.reshape(2, 60)[:, :4] + np.float32([1, 2, 3, 4])),
]


@pytest.mark.parametrize("name,opset,nodes,inits,expected", LEGACY, ids=[c[0] for c in LEGACY])
def test_legacy_forms(name, opset, nodes, inits, expected):
    proto = _model(nodes, [X], ["y"], opset, inits)
    x = rand(2, 3, 4, 5)
    np.testing.assert_allclose(cuvil.load_onnx(proto)(x)[0], expected(x), rtol=1e-5, atol=1e-5)


def test_legacy_broadcast_with_an_unknown_rank_is_named():
    proto = _model([N("Add", ["x", "b"], ["y"], broadcast=1, axis=1, name="late")],
                   [X, ("b", F32, None)], ["y"], 5)
    with pytest.raises(cuvil.UnsupportedError, match=r"Add node 'late' \(opset 5\) broadcasts along axis 1"):
        cuvil.load_onnx(proto)


def test_ml_only_model_is_not_refused_for_its_domains():
    """A model importing only ai.onnx.ml converts when its ops do (here: none but a graph output of an input)."""
    graph = helper.make_graph([], "g", [helper.make_tensor_value_info("x", F32, [2])],
                              [helper.make_tensor_value_info("x", F32, [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)], ir_version=8)
    np.testing.assert_array_equal(cuvil.load_onnx(proto)(np.float32([1, 2]))[0], [1, 2])
