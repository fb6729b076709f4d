"""Random valid ONNX graphs over x: [batch, C, H, W] with symbolic batch, H and W: chains of convolutions (plain,
strided, dilated, depthwise), pools, elementwise ops, reshape round trips, concats, matmuls and reductions.
`random_graph(rng)` also says which spatial sizes fit every window (`fits`), so that calls can be drawn both at
sizes every op accepts and at sizes below some window."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

OPSET = 17


@dataclass
class Window:
    """One windowed op along H and W: effective kernel, stride, total padding and ceil mode per axis."""
    kernel: tuple
    stride: tuple
    pads: tuple
    ceil: bool = False

    def out(self, size: int, axis: int) -> int | None:
        """The output size along `axis`, or None when the padded input is smaller than the window."""
        room = size + self.pads[axis] - self.kernel[axis]
        if room < 0:
            return None
        return (-(-room // self.stride[axis]) if self.ceil else room // self.stride[axis]) + 1


@dataclass
class RandomGraph:
    proto: onnx.ModelProto
    channels: int
    ops: list
    windows: list = field(default_factory=list)

    def fits(self, h: int, w: int) -> bool:
        """Whether every window fits an input of spatial size h x w (ONNX Runtime refuses the others)."""
        sizes = [h, w]
        for win in self.windows:
            sizes = [win.out(s, a) for a, s in enumerate(sizes)]
            if None in sizes or min(sizes) < 1:
                return False
        return True

    def min_fitting(self) -> int:
        return next(s for s in range(1, 200) if self.fits(s, s))


class _Builder:
    def __init__(self, rng, channels: int):
        self.rng, self.channels = rng, channels
        self.nodes, self.inits, self.ops, self.windows = [], [], [], []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def weight(self, shape, scale: float = 0.5) -> str:
        name = self.name("w")
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(self, arr: np.ndarray) -> str:
        name = self.name("k")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(self, op: str, inputs: list, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.ops.append(op)
        return out

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]


def conv(b: _Builder, x: str) -> str:
    rng = b.rng
    k = b.choice([1, 2, 3, 5])
    dil = b.choice([1, 1, 2]) if k > 1 else 1
    stride = b.choice([1, 1, 2])
    eff = dil * (k - 1) + 1
    pads = [int(rng.integers(0, eff)) for _ in range(4)] if rng.integers(3) else [0] * 4
    depthwise = rng.integers(3) == 0
    c_out = b.channels if depthwise else int(rng.integers(2, 7))
    group = b.channels if depthwise else 1
    inputs = [x, b.weight((c_out, b.channels // group, k, k))]
    if rng.integers(2):
        inputs.append(b.weight((c_out,)))
    b.windows.append(Window((eff, eff), (stride, stride), (pads[0] + pads[2], pads[1] + pads[3])))
    b.channels = c_out
    return b.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride], dilations=[dil, dil], pads=pads,
                  group=group)


def pool(b: _Builder, x: str) -> str:
    rng = b.rng
    k, stride = b.choice([2, 3]), b.choice([1, 2])
    pads = [int(rng.integers(0, k // 2 + 1)) for _ in range(4)] if rng.integers(2) else [0] * 4
    ceil = bool(rng.integers(2))
    b.windows.append(Window((k, k), (stride, stride), (pads[0] + pads[2], pads[1] + pads[3]), ceil))
    if rng.integers(2):
        return b.node("MaxPool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=pads, ceil_mode=int(ceil))
    return b.node("AveragePool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=pads, ceil_mode=int(ceil),
                  count_include_pad=int(rng.integers(2)))


def unary(b: _Builder, x: str) -> str:
    op = b.choice(["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "LeakyRelu", "Softplus"])
    return b.node(op, [x], alpha=0.1) if op == "LeakyRelu" else b.node(op, [x])


def binary(b: _Builder, x: str) -> str:
    shape = b.choice([(b.channels, 1, 1), (1,), (1, b.channels, 1, 1)])
    k = b.const((b.rng.uniform(0.5, 1.5, shape) * b.choice([1, -1])).astype(np.float32))
    return b.node(b.choice(["Add", "Mul", "Sub", "Div"]), [x, k])


def reshape_round_trip(b: _Builder, x: str) -> str:
    """[n, c, h, w] -> [n, c, h*w] -> softmax or max-normalise -> back, via Shape: shape arithmetic on symbols."""
    shape = b.node("Shape", [x])
    flat = b.node("Reshape", [x, b.const(np.int64([0, 0, -1]))])
    if b.rng.integers(2):
        mixed = b.node("Softmax", [flat], axis=-1)
    else:
        mixed = b.node("Sub", [flat, b.node("ReduceMax", [flat], axes=[-1], keepdims=1)])
    return b.node("Reshape", [mixed, shape])


def concat(b: _Builder, x: str) -> str:
    c = b.channels
    branch = b.node("Conv", [x, b.weight((2, c, 1, 1))]) if b.rng.integers(2) else b.node("Relu", [x])
    b.channels = c + (2 if b.ops[-1] == "Conv" else c)
    return b.node("Concat", [x, branch], axis=1)


def matmul(b: _Builder, x: str) -> str:
    c_out = int(b.rng.integers(2, 6))
    nhwc = b.node("Transpose", [x], perm=[0, 2, 3, 1])
    mixed = b.node("MatMul", [nhwc, b.weight((b.channels, c_out))])
    b.channels = c_out
    return b.node("Transpose", [mixed], perm=[0, 3, 1, 2])


def reduce(b: _Builder, x: str) -> str:
    """Squeeze-and-excite over H and W, or a reduction over channels added back."""
    if b.rng.integers(2):
        gate = b.node("Sigmoid", [b.node(b.choice(["ReduceMean", "ReduceMax"]), [x], axes=[2, 3], keepdims=1)])
        return b.node("Mul", [x, gate])
    op = b.choice(["ReduceSum", "ReduceMean", "ReduceL2", "ReduceMin"])
    if op == "ReduceSum":  # axes is an input from opset 13, an attribute of the others until opset 18
        total = b.node(op, [x, b.const(np.int64([1]))], keepdims=1)
    else:
        total = b.node(op, [x], axes=[1], keepdims=1)
    return b.node("Add", [x, total])


STEPS = [conv, conv, pool, unary, binary, reshape_round_trip, concat, matmul, reduce]


def random_graph(rng, max_steps: int = 6) -> RandomGraph:
    """A random valid graph; its ops, in order, are in `.ops` (for the report)."""
    b = _Builder(rng, int(rng.integers(1, 5)))
    c_in = b.channels
    x = "x"
    for _ in range(int(rng.integers(2, max_steps + 1))):
        x = b.choice(STEPS)(b, x)
    if rng.integers(4) == 0:
        x = b.node("GlobalAveragePool", [x])
    b.nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    x_info = helper.make_tensor_value_info("x", T.FLOAT, ["batch", c_in, "H", "W"])
    graph = helper.make_graph(b.nodes, "random", [x_info], [helper.make_tensor_value_info("y", T.FLOAT, None)], b.inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    return RandomGraph(proto, c_in, b.ops, b.windows)


def call_sizes(g: RandomGraph, rng, count: int, below: bool) -> list:
    """`count` (batch, H, W) triples: all fitting every window, or (below=True) each below some window.
    Fitting sizes come largest first, so a smaller call follows a larger one."""
    low = g.min_fitting()
    if below:
        cands = [(h, w) for h in range(1, low + 2) for w in range(1, low + 2) if not g.fits(h, w)]
        picks = [cands[int(i)] for i in rng.integers(len(cands), size=count)] if cands else []
        return [(int(rng.integers(1, 3)), h, w) for h, w in picks]
    sizes = [(int(rng.integers(1, 4)), int(rng.integers(low, low + 9)), int(rng.integers(low, low + 9)))
             for _ in range(count)]
    return sorted(sizes, key=lambda s: -s[0] * s[1] * s[2])
