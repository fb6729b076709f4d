"""Functions the runtime tests export: an MLP with its weights as closure constants, a tensor `if`, a dynamic size;
and an ONNX convolution that Cuvil runs by Winograd (tests/test_artifact_cache.py uses it too)."""
import numpy as np

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((256, 512)).astype(np.float32) * 0.05
B1 = RNG.standard_normal(512).astype(np.float32)
W2 = RNG.standard_normal((512, 10)).astype(np.float32) * 0.05


def mlp(x):
    return np.maximum(x @ W1 + B1, 0) @ W2


def branchy(x):
    if x.sum() > 0:
        y = x * 2.0 + 1.0
    else:
        y = -x
    return y


def scaled_rows(x, w):
    return np.tanh(x @ w) * 0.5


def two_outputs(x):
    return x + 1.0, x * x


def winograd_conv_onnx(rng, width: int):
    """A 16-channel 3x3 convolution (Winograd), relu, a mean over space and a MatMul to `width` outputs: both
    weights are read only by `cuvil_prepare` (the MatMul's through packed panels). The ONNX model and its weights'
    bytes."""
    from onnx import TensorProto, helper, numpy_helper

    w, fc = rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1, rng.standard_normal((16, width))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("ReduceMean", ["r"], ["m"], axes=[2, 3], keepdims=0),
         helper.make_node("MatMul", ["m", "fc"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc.astype(np.float32), "fc")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w.nbytes + fc.size * 4
