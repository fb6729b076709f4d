"""Pre-quantized ONNX models onto Cuvil's int8 kernels (the qlinear_i8 and qconv_i8 ops) instead of fp32.

`fuse_quantized(graph)` rewrites, before conversion, the node groups quantizers write into one node of this
module's private domain:
- QDQ (ONNX Runtime's `quantize_static`, NNCF): DequantizeLinear(x uint8) and DequantizeLinear(W int8 constant,
  symmetric) into Conv / MatMul / Gemm (bias a float constant or a dequantized int32 one), then, when it is the
  only reader, QuantizeLinear(uint8): one `QuantizedConv` or `QuantizedGemm` that reads uint8 and writes uint8
  (or f32 when no QuantizeLinear follows);
- dynamic (`quantize_dynamic`): DynamicQuantizeLinear(x) -> MatMulInteger(W constant) -> Cast -> Mul(x scale *
  W scale) [-> Add(bias)]: one `QuantizedGemm` that quantizes each row of x when it runs (finer than the
  per-tensor range it replaces, so results differ from ONNX Runtime's within the quantization noise).
Anything else (uint8 weights, nonzero weight zero points, grouped convolutions) is left to the exact converters of
convert_quant.py. QLinearConv and QLinearMatMul nodes of that form run on the same kernels (`qlinear_conv_kernel`,
`qlinear_matmul_kernel`, called from convert_quant.py).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from ...ir.dtypes import DType
from ...ops.quantized import INT4_GROUPS, pack_int4
from .convert_nn import conv_attrs
from .registry import converter
from .tensors import tensor_to_array

DOMAIN = "ai.cuvil"
_CONV_ATTRS = ("strides", "pads", "dilations", "kernel_shape", "auto_pad", "group")


class _Graph:
    """Producers, readers and constant initializers of a graph, and the rewrite's new nodes and initializers."""

    def __init__(self, graph, base_dir: str | None):
        self.graph, self.base_dir = graph, base_dir
        self.init = {i.name: i for i in graph.initializer}
        self.producer = {o: n for n in graph.node for o in n.output}
        self.readers: dict = {}
        for n in graph.node:
            for i in n.input:
                self.readers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in graph.output}
        self.new_init: list = []
        self.replaced: dict = {}  # id(node) -> the fused node that takes its place (None: removed)

    def array(self, name: str):
        """An initializer's elements; external ones (and large ones of a model file, see mapped.py) mapped from their
        file next to the model, as the loader maps them."""
        t = self.init.get(name)
        if t is None:
            return None
        return tensor_to_array(t, self.base_dir) if t.data_location == T.EXTERNAL else numpy_helper.to_array(t)

    def made_by(self, name: str, op_type: str):
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx") else None

    def only_reader(self, name: str):
        found = self.readers.get(name, [])
        return found[0] if len(found) == 1 and name not in self.outputs else None

    def add_init(self, name: str, array) -> str:
        name = f"{name}__cuvil"
        self.new_init.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _scalar(g: _Graph, name: str, dtype=None):
    arr = g.array(name) if name else None
    if arr is None or arr.size != 1 or (dtype is not None and arr.dtype != dtype):
        return None
    return arr.reshape(()).item()


def _activation_dq(g: _Graph, name: str):
    """(uint8 input name, scale, zero point) of a per-tensor DequantizeLinear of uint8, or None."""
    dq = g.made_by(name, "DequantizeLinear")
    if dq is None or len(dq.input) < 3:
        return None
    scale, zero = _scalar(g, dq.input[1], np.float32), _scalar(g, dq.input[2], np.uint8)
    return None if scale is None or zero is None or scale <= 0 else (dq.input[0], float(scale), int(zero))


def _weight_dq(g: _Graph, name: str, channel_axis: int):
    """(int8 W, f32 scale per output channel) of a symmetric DequantizeLinear of an int8 constant, or None."""
    dq = g.made_by(name, "DequantizeLinear")
    w = g.array(dq.input[0]) if dq is not None else None
    scale = g.array(dq.input[1]) if w is not None else None
    if w is None or w.dtype != np.int8 or scale is None or scale.dtype != np.float32:
        return None
    zero = g.array(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros(1, np.int8)
    if zero is None or np.any(zero != 0):
        return None
    axis = _attr(dq, "axis", 1) % w.ndim
    channels = w.shape[channel_axis]
    if scale.size == 1:
        return w, np.full(channels, scale.reshape(()), np.float32)
    return (w, scale.reshape(-1)) if scale.size == channels and axis == channel_axis and \
        _attr(dq, "block_size", 0) == 0 else None


def _bias(g: _Graph, name: str, n: int):
    """The f32 [N] bias of a float constant or a dequantized int32 constant, or None (np.empty(0): absent)."""
    if not name:
        return np.empty(0, np.float32)
    arr = g.array(name)
    if arr is None:
        dq = g.made_by(name, "DequantizeLinear")
        b = g.array(dq.input[0]) if dq is not None else None
        s = g.array(dq.input[1]) if b is not None else None
        if b is None or s is None or (len(dq.input) > 2 and dq.input[2] and np.any(g.array(dq.input[2]) != 0)):
            return None
        arr = b.astype(np.float64) * s.astype(np.float64)
    return arr.astype(np.float32).reshape(-1) if arr.size == n and arr.dtype.kind in "fi" else None


def _output(g: _Graph, node) -> tuple:
    """(output name, out scale, out zero, the QuantizeLinear fused) for a node whose only reader may requantize."""
    q = g.only_reader(node.output[0])
    if q is not None and q.op_type == "QuantizeLinear" and len(q.input) > 2:
        scale, zero = _scalar(g, q.input[1], np.float32), _scalar(g, q.input[2], np.uint8)
        if scale is not None and zero is not None and scale > 0:
            return q.output[0], float(scale), int(zero), q
    return node.output[0], 0.0, 0, None


def _fuse_qdq(g: _Graph, node) -> bool:
    if node.op_type == "Conv":
        channel_axis, ok = 0, _attr(node, "group", 1) == 1
    elif node.op_type == "Gemm":
        channel_axis = 0 if _attr(node, "transB", 0) else 1
        ok = _attr(node, "transA", 0) == 0 and _attr(node, "alpha", 1.0) == 1.0 and _attr(node, "beta", 1.0) == 1.0
    else:
        channel_axis, ok = 1, True
    x = _activation_dq(g, node.input[0]) if ok else None
    wq = _weight_dq(g, node.input[1], channel_axis) if x is not None else None
    if wq is None or (node.op_type == "Conv" and wq[0].ndim != 4) or (node.op_type != "Conv" and wq[0].ndim != 2):
        return False
    bias = _bias(g, node.input[2] if len(node.input) > 2 else "", wq[0].shape[channel_axis])
    if bias is None:
        return False
    name, out_scale, out_zero, q = _output(g, node)
    _emit(g, node, x[0], wq, bias, name, {"x_scale": x[1], "x_zero": x[2], "out_scale": out_scale,
                                          "out_zero": out_zero}, q)
    return True


def _fuse_dynamic(g: _Graph, node) -> bool:
    """DynamicQuantizeLinear -> MatMulInteger(W) -> Cast -> Mul(x scale * W scale) [-> Add(bias)]."""
    dql = g.made_by(node.input[0], "DynamicQuantizeLinear")
    w = g.array(node.input[1]) if dql is not None else None
    if w is None or w.dtype != np.int8 or w.ndim != 2 or len(node.input) < 3 or node.input[2] != dql.output[2]:
        return False
    if len(node.input) > 3 and node.input[3] and np.any(g.array(node.input[3]) != 0):
        return False
    cast = g.only_reader(node.output[0])
    mul = g.only_reader(cast.output[0]) if cast is not None and cast.op_type == "Cast" else None
    if mul is None or mul.op_type != "Mul":
        return False
    scales = g.made_by(mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0], "Mul")
    if scales is None or dql.output[1] not in scales.input:
        return False
    w_scale = g.array(scales.input[1] if scales.input[0] == dql.output[1] else scales.input[0])
    if w_scale is None or w_scale.size not in (1, w.shape[1]):
        return False
    last, bias = mul, np.empty(0, np.float32)
    add = g.only_reader(mul.output[0])
    if add is not None and add.op_type == "Add":
        found = _bias(g, add.input[1] if add.input[0] == mul.output[0] else add.input[0], w.shape[1])
        if found is not None and found.size:
            last, bias = add, found
    ws = np.broadcast_to(w_scale.astype(np.float32).reshape(-1), (w.shape[1],))
    for gone in (cast, mul) + ((last,) if last is not mul else ()):
        g.replaced[id(gone)] = None
    _emit(g, node, dql.input[0], (w, ws), bias, last.output[0], {"x_scale": 0.0, "x_zero": 0, "out_scale": 0.0,
                                                                  "out_zero": 0}, None, op_type="MatMul")
    return True


def _emit(g: _Graph, node, x: str, wq, bias, output: str, attrs: dict, q, op_type=None) -> None:
    w, scale = wq
    op_type = op_type or node.op_type
    inputs = [x, g.add_init(f"{node.output[0]}_w", w), g.add_init(f"{node.output[0]}_wscale", scale)]
    if bias.size:
        inputs.append(g.add_init(f"{node.output[0]}_bias", bias))
    extra = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name in _CONV_ATTRS} \
        if op_type == "Conv" else {"transB": _attr(node, "transB", 0) if op_type == "Gemm" else 0}
    fused = helper.make_node("QuantizedConv" if op_type == "Conv" else "QuantizedGemm", inputs, [output],
                             name=(node.name or node.op_type) + "_int8", domain=DOMAIN, **attrs, **extra)
    g.replaced[id(node)] = fused
    if q is not None:
        g.replaced[id(q)] = None


def fuse_quantized(graph, base_dir: str | None = None):
    """`graph` with its quantized node groups fused (a copy), and whether any was; `base_dir` is where its external
    data files lie."""
    g = _Graph(graph, base_dir)
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or id(node) in g.replaced:
            continue
        if node.op_type in ("Conv", "MatMul", "Gemm"):
            _fuse_qdq(g, node)
        elif node.op_type == "MatMulInteger":
            _fuse_dynamic(g, node)
    if not g.replaced:
        return graph, False
    out = type(graph)()
    out.CopyFrom(graph)
    del out.node[:]
    kept = [g.replaced.get(id(n), n) for n in graph.node]
    out.node.extend(_live([n for n in kept if n is not None], g.outputs))
    out.initializer.extend(g.new_init)
    return out, True


def _live(nodes: list, outputs: set) -> list:
    """The nodes something still reads (the dequantized weights the fused nodes replaced go)."""
    needed, keep = set(outputs), []
    for n in reversed(nodes):
        if any(o in needed for o in n.output) or n.op_type in ("If", "Loop", "Scan"):
            keep.append(n)
            needed.update(n.input)
            for a in n.attribute:  # subgraphs read outer names
                if a.type == a.GRAPH:
                    needed.update(i for sub in a.g.node for i in sub.input)
    return keep[::-1]


# -- converters --------------------------------------------------------------------------------------------
def _epilogue_attrs(ctx) -> dict:
    return {"x_scale": float(ctx.attr("x_scale")), "x_zero": int(ctx.attr("x_zero")),
            "out_scale": float(ctx.attr("out_scale")), "out_zero": int(ctx.attr("out_zero"))}


def _operands(ctx, weight):
    ops = [ctx.x(0), ctx.const(weight), ctx.x(2)]
    return ops + ([ctx.x(3)] if ctx.has(3) else [])


@converter("QuantizedGemm", domain=DOMAIN)
def quantized_gemm(ctx):
    w = np.asarray(ctx.known(1))
    w = w if ctx.attr("transB", 0) else np.ascontiguousarray(w.T)
    return [ctx.b.qlinear_i8(*_operands(ctx, w), **_epilogue_attrs(ctx))]


@converter("QuantizedConv", domain=DOMAIN)
def quantized_conv(ctx):
    w = np.asarray(ctx.known(1))
    attrs = conv_attrs(ctx, ctx.x(0), ctx.x(1))
    attrs.pop("groups")
    return [ctx.b.qconv_i8(*_operands(ctx, w), **attrs, **_epilogue_attrs(ctx))]


def _known_scalar(ctx, i: int, dtypes):
    arr = np.asarray(ctx.known(i)) if ctx.has(i) and ctx.known(i) is not None else None
    return None if arr is None or arr.size != 1 or arr.dtype not in dtypes else arr.reshape(()).item()


_ACTIVATION_TYPES = (np.uint8, np.int8)  # int8 activations run shifted by 128 as uint8


def _qlinear_parts(ctx, w_index: int, channel_axis: int, y_index: int = 6):
    """(epilogue attributes, int8 W, f32 weight scale per channel) of a QLinear node the kernels can run: 8-bit
    activations with per-tensor constants, an int8 constant weight with zero zero points. None otherwise. A node
    without y_scale (QGemm) has an f32 result."""
    xs, xz = _known_scalar(ctx, 1, (np.float32,)), _known_scalar(ctx, 2, _ACTIVATION_TYPES)
    ys, yz = _known_scalar(ctx, y_index, (np.float32,)), _known_scalar(ctx, y_index + 1, _ACTIVATION_TYPES)
    if not ctx.has(y_index):
        ys, yz = 1.0, 0  # float result: out_scale 0 below
    w, ws = ctx.known(w_index), ctx.known(w_index + 1)
    wz = ctx.known(w_index + 2) if ctx.has(w_index + 2) else np.zeros(1, np.int8)
    if None in (xs, xz, ys, yz) or w is None or ws is None or wz is None or \
            ctx.tensor(0).elem not in (T.UINT8, T.INT8):
        return None
    w, ws = np.asarray(w), np.asarray(ws, np.float32).reshape(-1)
    if w.dtype != np.int8 or np.any(np.asarray(wz) != 0) or ws.size not in (1, w.shape[channel_axis]) or \
            xs <= 0 or ys <= 0:
        return None
    x_shift = 128 if ctx.tensor(0).elem == T.INT8 else 0
    y_shift = 128 if ctx.has(y_index + 1) and ctx.tensor(y_index + 1).elem == T.INT8 else 0
    attrs = {"x_scale": float(xs), "x_zero": int(xz) + x_shift, "out_scale": float(ys) if ctx.has(y_index) else 0.0,
             "out_zero": int(yz) + y_shift}
    return attrs, w, np.broadcast_to(ws, (w.shape[channel_axis],)).astype(np.float32)


def _shift(ctx, v, to: DType):
    """int8 <-> uint8 by adding or taking 128: the same values, offset like their zero points."""
    wide = ctx.cast(v, DType.i32)
    moved = ctx.b.add(wide, ctx.expand(ctx.scalar(128 if to is DType.u8 else -128, DType.i32), wide.type.shape))
    return ctx.cast(moved, to)


def _input(ctx):
    x = ctx.x(0)
    return _shift(ctx, x, DType.u8) if x.type.dtype is DType.i8 else x


def _result(ctx, y, y_index: int):
    signed = ctx.has(y_index + 1) and ctx.tensor(y_index + 1).elem == T.INT8
    return _shift(ctx, y, DType.i8) if signed else y


def qlinear_matmul_kernel(ctx):
    """QLinearMatMul on qlinear_i8 (B a constant [K, N]), or None when the node is not of that form."""
    parts = _qlinear_parts(ctx, 3, 1) if ctx.type(0).rank >= 2 else None
    if parts is None or parts[1].ndim != 2:
        return None
    attrs, w, ws = parts
    return _result(ctx, ctx.b.qlinear_i8(_input(ctx), ctx.const(np.ascontiguousarray(w.T)), ctx.const(ws), **attrs), 6)


def qlinear_conv_kernel(ctx):
    """QLinearConv on qconv_i8 (2-D, one group, bias a constant), or None when the node is not of that form."""
    parts = _qlinear_parts(ctx, 3, 0) if ctx.type(0).rank == 4 and ctx.attr("group", 1) == 1 else None
    bias = ctx.known(8) if ctx.has(8) else np.zeros(0, np.int32)
    if parts is None or parts[1].ndim != 4 or bias is None:
        return None
    attrs, w, ws = parts
    conv = conv_attrs(ctx, ctx.x(0), ctx.x(3))
    conv.pop("groups")
    operands = [_input(ctx), ctx.const(w), ctx.const(ws)]
    if np.asarray(bias).size:
        operands.append(ctx.const((np.asarray(bias, np.float64) * attrs["x_scale"] * ws).astype(np.float32)))
    return _result(ctx, ctx.b.qconv_i8(*operands, **conv, **attrs), 6)


@converter("QGemm", domain="com.microsoft")
def qgemm(ctx):
    """ONNX Runtime's QGemm (QOperator models): A uint8 @ B int8 (+ int32 bias C), uint8 or (no y_scale) f32."""
    trans_b = ctx.attr("transB", 0)
    parts = _qlinear_parts(ctx, 3, 0 if trans_b else 1, y_index=7)
    bias = ctx.known(6) if ctx.has(6) else np.zeros(0, np.int32)
    if parts is None or parts[1].ndim != 2 or ctx.attr("transA", 0) or ctx.attr("alpha", 1.0) != 1.0 or \
            bias is None or ctx.type(0).rank != 2:
        raise ctx.unsupported("runs with uint8 A, a symmetric int8 constant B, constant scales, a constant bias, "
                              "transA 0 and alpha 1 only")
    attrs, w, ws = parts
    operands = [_input(ctx), ctx.const(np.ascontiguousarray(w if trans_b else w.T)), ctx.const(ws)]
    if np.asarray(bias).size:
        operands.append(ctx.const((np.asarray(bias, np.float64).reshape(-1) * attrs["x_scale"] * ws)
                                  .astype(np.float32)))
    return [_result(ctx, ctx.b.qlinear_i8(*operands, **attrs), 7)]


def matmul_nbits_kernel(ctx, q: np.ndarray, zero, scales: np.ndarray, block: int):
    """MatMulNBits with 4 bits, blocks of 32, 64 or 128 dividing K and integer zero points on linear_i4 (unpacked
    q [N, blocks, block], zero a scalar or [N, blocks, 1]), or None."""
    n, blocks, _ = q.shape
    k = ctx.attr("K")
    zero = np.broadcast_to(np.asarray(zero, np.float32).reshape(-1, blocks if np.size(zero) > 1 else 1),
                           (n, blocks))
    if ctx.attr("bits", 4) != 4 or block not in INT4_GROUPS or k != blocks * block or \
            ctx.type(0).dtype is not DType.f32 or np.any(zero != np.rint(zero)) or zero.min() < 0 or zero.max() > 15:
        return None
    operands = [ctx.x(0), ctx.const(pack_int4(q.reshape(n, k).astype(np.uint8))), ctx.const(scales),
                ctx.const(zero.astype(np.uint8))]
    return ctx.b.linear_i4(*operands, *([ctx.x(5)] if ctx.has(5) else []), group=block)
