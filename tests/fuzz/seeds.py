"""The seed models the mutation fuzzer starts from, built in code: an MLP, a small CNN (conv, depthwise conv,
pools) and a tiny attention block, each with a symbolic batch size."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

N = helper.make_node


def _model(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    rng = np.random.default_rng(len(nodes))
    tensors = [numpy_helper.from_array(rng.standard_normal(a).astype(np.float32) if isinstance(a, tuple)
                                       else np.asarray(a), name) for name, a in inits]
    graph = helper.make_graph(nodes, "seed", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def mlp() -> onnx.ModelProto:
    nodes = [N("Gemm", ["x", "w1", "b1"], ["h1"], transB=1, name="fc1"), N("Relu", ["h1"], ["a1"], name="act1"),
             N("MatMul", ["a1", "w2"], ["h2"], name="fc2"), N("Add", ["h2", "b2"], ["h3"], name="bias2"),
             N("Tanh", ["h3"], ["a2"], name="act2"), N("Softmax", ["a2"], ["y"], axis=-1, name="probs")]
    inits = [("w1", (16, 8)), ("b1", (16,)), ("w2", (16, 5)), ("b2", (5,))]
    return _model(nodes, [("x", T.FLOAT, ["batch", 8])], [("y", T.FLOAT, ["batch", 5])], inits)


def cnn() -> onnx.ModelProto:
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv1"),
             N("Relu", ["c1"], ["r1"], name="relu1"),
             N("Conv", ["r1", "dw"], ["c2"], kernel_shape=[3, 3], group=4, strides=[2, 2], pads=[1, 1, 1, 1],
               name="depthwise"),
             N("MaxPool", ["c2"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             N("AveragePool", ["p1"], ["p2"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], name="avg"),
             N("GlobalAveragePool", ["p2"], ["g"], name="gap"), N("Flatten", ["g"], ["f"], name="flat"),
             N("Gemm", ["f", "fc", "fcb"], ["y"], transB=1, name="head")]
    inits = [("w1", (4, 3, 3, 3)), ("b1", (4,)), ("dw", (4, 1, 3, 3)), ("fc", (3, 4)), ("fcb", (3,))]
    return _model(nodes, [("x", T.FLOAT, ["batch", 3, 8, 8])], [("y", T.FLOAT, ["batch", 3])], inits)


def attention() -> onnx.ModelProto:
    """One head of self-attention over [batch, 4, 6] with a LayerNorm before it."""
    nodes = [N("LayerNormalization", ["x", "g", "bb"], ["ln"], axis=-1, name="norm"),
             N("MatMul", ["ln", "wq"], ["q"], name="q"), N("MatMul", ["ln", "wk"], ["k"], name="k"),
             N("MatMul", ["ln", "wv"], ["v"], name="v"), N("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="kt"),
             N("MatMul", ["q", "kt"], ["s"], name="scores"), N("Mul", ["s", "scale"], ["ss"], name="scale"),
             N("Softmax", ["ss"], ["p"], axis=-1, name="attn"), N("MatMul", ["p", "v"], ["o"], name="mix"),
             N("Add", ["o", "x"], ["res"], name="residual"),
             N("ReduceMean", ["res"], ["y"], axes=[1], keepdims=0, name="pool")]
    inits = [("g", (6,)), ("bb", (6,)), ("wq", (6, 6)), ("wk", (6, 6)), ("wv", (6, 6)),
             ("scale", np.float32(6 ** -0.5))]
    return _model(nodes, [("x", T.FLOAT, ["batch", 4, 6])], [("y", T.FLOAT, ["batch", 6])], inits)


SEEDS = {"mlp": mlp, "cnn": cnn, "attention": attention}
