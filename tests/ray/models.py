"""The models the Ray tests and bench/ray.py run, built with onnx.helper from random weights: a small CNN and a
one-layer BERT-like encoder, each with a symbolic batch size, and the CNN again with a fixed batch of 8 (the
Predictor pads and splits batches for it). ONNX, so that ONNX Runtime runs the very same graphs."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IMAGE = (3, 16, 16)
SEQ, VOCAB, HIDDEN, HEADS, FFN, CLASSES = 16, 64, 32, 4, 64, 4


def _init(rng, name: str, shape, scale: float = 0.2, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(dtype), name)


def _const(name: str, values, dtype=np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype), name)


def _model(nodes, inputs, outputs, inits) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def cnn(batch="batch", seed: int = 0) -> bytes:
    """image f32[batch,3,16,16] -> logits f32[batch,10]: two convolutions, pooling and a dense layer."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (8, 3, 3, 3)), _init(rng, "b1", (8,)), _init(rng, "w2", (16, 8, 3, 3)),
             _init(rng, "b2", (16,)), _init(rng, "wd", (16, 10)), _init(rng, "bd", (10,))]
    nodes = [helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["logits"])]
    return _model(nodes, [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, *IMAGE])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], inits)


def bert(seed: int = 1) -> bytes:
    """input_ids i64[batch,16], attention_mask i64[batch,16] -> pooled f32[batch,32], logits f32[batch,4]: token
    and position embeddings, one encoder layer (4-head self-attention with the mask, a ReLU feed-forward, post
    layer norms), the first token's state pooled through tanh and a classifier."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "tok", (VOCAB, HIDDEN), 0.5), _init(rng, "pos", (SEQ, HIDDEN), 0.5),
             *[_init(rng, n, (HIDDEN, HIDDEN)) for n in ("wq", "wk", "wv", "wo", "wp")],
             _init(rng, "w_in", (HIDDEN, FFN)), _init(rng, "b_in", (FFN,)), _init(rng, "w_out", (FFN, HIDDEN)),
             _init(rng, "wc", (HIDDEN, CLASSES)),
             numpy_helper.from_array(np.ones(HIDDEN, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "beta"),
             _const("heads_shape", [0, SEQ, HEADS, HIDDEN // HEADS]), _const("hidden_shape", [0, SEQ, HIDDEN]),
             _const("mask_axes", [1, 2]), _const("first", [0]), _const("axis1", [1]),
             numpy_helper.from_array(np.array(-1e4, np.float32), "neg"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array((HIDDEN // HEADS) ** -0.5, np.float32), "scale")]
    n = helper.make_node
    nodes = [n("Gather", ["tok", "input_ids"], ["emb"]), n("Add", ["emb", "pos"], ["x0"]),
             n("LayerNormalization", ["x0", "gamma", "beta"], ["x"], axis=-1),
             *[n("MatMul", ["x", f"w{k}"], [k]) for k in "qkv"],
             *[n("Reshape", [k, "heads_shape"], [f"{k}h"]) for k in "qkv"],
             n("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]), n("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
             n("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
             n("MatMul", ["qt", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
             n("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT), n("Sub", ["one", "mf"], ["mi"]),
             n("Mul", ["mi", "neg"], ["mb"]), n("Unsqueeze", ["mb", "mask_axes"], ["m4"]),
             n("Add", ["s1", "m4"], ["s2"]), n("Softmax", ["s2"], ["a"], axis=-1),
             n("MatMul", ["a", "vt"], ["ctx"]), n("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]),
             n("Reshape", ["ct", "hidden_shape"], ["c"]), n("MatMul", ["c", "wo"], ["o"]),
             n("Add", ["x", "o"], ["h0"]), n("LayerNormalization", ["h0", "gamma", "beta"], ["h"], axis=-1),
             n("MatMul", ["h", "w_in"], ["f0"]), n("Add", ["f0", "b_in"], ["f1"]),
             n("Relu", ["f1"], ["f2"]),
             n("MatMul", ["f2", "w_out"], ["f3"]), n("Add", ["h", "f3"], ["y0"]),
             n("LayerNormalization", ["y0", "gamma", "beta"], ["y"], axis=-1),
             n("Gather", ["y", "first"], ["cls0"], axis=1), n("Squeeze", ["cls0", "axis1"], ["cls"]),
             n("MatMul", ["cls", "wp"], ["p0"]), n("Tanh", ["p0"], ["pooled"]),
             n("MatMul", ["pooled", "wc"], ["logits"])]
    ints = [helper.make_tensor_value_info(k, TensorProto.INT64, ["batch", SEQ])
            for k in ("input_ids", "attention_mask")]
    outs = [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", HIDDEN]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])]
    return _model(nodes, ints, outs, inits)


def images(rows: int, seed: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, *IMAGE)).astype(np.float32)


def tokens(rows: int, seed: int = 3) -> dict:
    """Token ids and a mask whose rows have 4 to 16 real tokens (the rest padding, id 0)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, SEQ + 1, rows)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": rng.integers(1, VOCAB, (rows, SEQ)) * mask, "attention_mask": mask}
