"""Cases for elementwise ops, with NumPy or ONNX oracles."""
import math

import numpy as np

from .cases import Case, onnx_node, rand

_erf = np.vectorize(math.erf)
X = rand(3, 5)
POS = rand(3, 5, low=0.1, high=3.0)
UNIT = rand(3, 5, low=-0.9, high=0.9)


def np1(fn):
    return lambda xs: [fn(*xs)]


CASES = [
    Case("neg", [X], expected=np1(np.negative)),
    Case("neg", [rand(4, dtype="int32", low=-5, high=5)], expected=np1(np.negative), id="i32"),
    Case("abs", [X], expected=np1(np.abs)),
    Case("abs", [rand(2, 3, dtype="int64", low=-9, high=9)], expected=np1(np.abs), id="i64"),
    Case("sign", [np.array([-2.0, 0.0, 3.0], np.float32)], expected=np1(np.sign)),
    Case("exp", [X], expected=np1(np.exp)),
    Case("exp", [X.astype(np.float16)], expected=lambda xs: [np.exp(xs[0].astype(np.float32)).astype(np.float16)],
         id="f16"),
    Case("exp", [X.astype(np.float64)], expected=np1(np.exp), id="f64"),
    Case("log", [POS], expected=np1(np.log)),
    Case("sqrt", [POS], expected=np1(np.sqrt)),
    Case("rsqrt", [POS], expected=np1(lambda x: 1 / np.sqrt(x))),
    Case("reciprocal", [POS], expected=lambda xs: onnx_node("Reciprocal", xs)),
    Case("tanh", [X], expected=np1(np.tanh)),
    Case("sigmoid", [X], expected=lambda xs: onnx_node("Sigmoid", xs)),
    Case("relu", [X], expected=lambda xs: onnx_node("Relu", xs)),
    Case("relu", [X], expected=np1(lambda x: np.maximum(x, 0)), dims={0: {0: "n"}}, id="symbolic"),
    Case("leaky_relu", [X], {"alpha": 0.1}, expected=lambda xs: onnx_node("LeakyRelu", xs, {"alpha": 0.1})),
    Case("elu", [X], {"alpha": 0.7}, expected=lambda xs: onnx_node("Elu", xs, {"alpha": 0.7})),
    Case("selu", [X], expected=lambda xs: onnx_node("Selu", xs)),
    Case("gelu", [X], expected=lambda xs: onnx_node("Gelu", xs, opset=20)),
    Case("gelu", [X], {"approximate": "tanh"}, expected=lambda xs: onnx_node("Gelu", xs, {"approximate": "tanh"},
                                                                                opset=20), id="tanh"),
    Case("erf", [X], expected=lambda xs: [_erf(xs[0]).astype(np.float32)]),
    Case("sin", [X], expected=np1(np.sin)),
    Case("cos", [X], expected=np1(np.cos)),
    Case("tan", [UNIT], expected=np1(np.tan)),
    Case("floor", [X], expected=np1(np.floor)),
    Case("ceil", [X], expected=np1(np.ceil)),
    Case("round", [np.array([0.5, 1.5, 2.5, -0.5, -1.7], np.float32)], expected=lambda xs: onnx_node("Round", xs)),
    Case("not", [rand(6, dtype="bool")], expected=np1(np.logical_not)),
    Case("isnan", [np.array([1.0, np.nan, np.inf], np.float32)], expected=np1(np.isnan)),
    Case("isinf", [np.array([1.0, np.nan, -np.inf], np.float32)], expected=np1(np.isinf)),
    Case("softplus", [rand(3, 5, low=-30, high=30)], expected=lambda xs: onnx_node("Softplus", xs)),
    Case("hardsigmoid", [X], {"alpha": 0.3, "beta": 0.4},
         expected=lambda xs: onnx_node("HardSigmoid", xs, {"alpha": 0.3, "beta": 0.4})),
    Case("hardswish", [rand(3, 5, low=-5, high=5)], expected=lambda xs: onnx_node("HardSwish", xs)),
    Case("silu", [X], expected=np1(lambda x: x / (1 + np.exp(-x)))),
    Case("clip", [X], {"min": -0.5, "max": 0.7}, expected=np1(lambda x: np.clip(x, -0.5, 0.7))),
    Case("clip", [X], {"max": 0.0}, expected=np1(lambda x: np.minimum(x, 0)), id="max-only"),
    Case("add", [X, rand(3, 5, seed=1)], expected=np1(np.add)),
    Case("add", [rand(4, 2, dtype="int32", low=-9, high=9)] * 2, expected=np1(np.add), id="i32"),
    Case("add", [X, rand(3, 5, seed=1)], expected=np1(np.add), dims={0: {0: "n"}, 1: {0: "n"}}, id="symbolic"),
    Case("sub", [X, rand(3, 5, seed=1)], expected=np1(np.subtract)),
    Case("mul", [X, rand(3, 5, seed=1)], expected=np1(np.multiply)),
    Case("mul", [X.astype(np.float16), rand(3, 5, seed=1).astype(np.float16)], id="f16",
         expected=lambda xs: [(xs[0].astype(np.float32) * xs[1].astype(np.float32)).astype(np.float16)]),
    Case("div", [X, POS], expected=np1(np.divide)),
    Case("div", [np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)],
         expected=lambda xs: onnx_node("Div", xs), id="int-truncates"),
    Case("floordiv", [np.array([7, -7, 7, -7], np.int64), np.array([2, 2, -2, -2], np.int64)],
         expected=np1(np.floor_divide)),
    Case("pow", [POS, X], expected=lambda xs: onnx_node("Pow", xs)),
    Case("max", [X, rand(3, 5, seed=1)], expected=np1(np.maximum)),
    Case("min", [X, rand(3, 5, seed=1)], expected=np1(np.minimum)),
    Case("mod", [rand(8, dtype="int32", low=-9, high=9), rand(8, dtype="int32", low=1, high=4)],
         expected=lambda xs: onnx_node("Mod", xs)),
    Case("mod", [X, POS], {"fmod": True}, expected=lambda xs: onnx_node("Mod", xs, {"fmod": 1}), id="fmod"),
    Case("and", [rand(6, dtype="bool"), rand(6, dtype="bool", seed=2)], expected=np1(np.logical_and)),
    Case("or", [rand(6, dtype="bool"), rand(6, dtype="bool", seed=2)], expected=np1(np.logical_or)),
    Case("xor", [rand(6, dtype="bool"), rand(6, dtype="bool", seed=2)], expected=np1(np.logical_xor)),
    Case("eq", [np.array([1, 2, 3], np.int64), np.array([1, 0, 3], np.int64)], expected=np1(np.equal)),
    Case("ne", [np.array([1, 2, 3], np.int64), np.array([1, 0, 3], np.int64)], expected=np1(np.not_equal)),
    Case("lt", [X, rand(3, 5, seed=1)], expected=np1(np.less)),
    Case("le", [X, X], expected=np1(np.less_equal)),
    Case("gt", [X, rand(3, 5, seed=1)], expected=np1(np.greater)),
    Case("ge", [X, rand(3, 5, seed=1)], expected=np1(np.greater_equal)),
    Case("where", [rand(3, 5, dtype="bool"), X, rand(3, 5, seed=1)], expected=np1(np.where)),
    Case("cast", [X], {"dtype": "i32"}, expected=lambda xs: onnx_node("Cast", xs, {"to": 6})),
    Case("cast", [X], {"dtype": "f16"}, expected=np1(lambda x: x.astype(np.float16)), id="f16"),
    Case("cast", [X], {"dtype": "bf16"}, rtol=0, atol=0, id="bf16",
         expected=lambda xs: [xs[0].astype(__import__("ml_dtypes").bfloat16)]),
    Case("cast", [np.array([0, 3, -1], np.int64)], {"dtype": "bool"}, expected=np1(lambda x: x != 0), id="bool"),
    Case("full", [], {"value": 2.5, "shape": (2, 3)}, expected=lambda xs: [np.full((2, 3), 2.5, np.float32)]),
]
