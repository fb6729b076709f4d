"""ONNX Runtime's contrib ops (domain com.microsoft) that its transformer optimiser and quantiser write, each
rewritten as a small function of standard ONNX ops (opset `STANDARD`) that the graph walker then inlines: the
fused activations, SkipLayerNormalization, FusedMatMul, MatMulNBits (4-bit on the int4 kernel, else dequantised),
DynamicQuantizeMatMul, MatMulIntegerToFloat and the QLinear* elementwise/pooling ops (dequantise, compute in
float, quantise). The attention family is in convert_contrib_attention.py."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from .convert_quant_fused import matmul_nbits_kernel
from .registry import converter

MS = "com.microsoft"
STANDARD = 23  # the default-domain opset the rewrites are written in (it has Attention and RotaryEmbedding)
N = helper.make_node


def inline(ctx, nodes: list, outputs: list):
    """Run `nodes` (standard ops reading the node's inputs as in0, in1, ... and writing `outputs`) in place of the
    node; an output named "" is one the rewrite does not produce."""
    names = [f"in{i}" for i in range(len(ctx.inputs))]
    produced = [o or f"_absent{i}" for i, o in enumerate(outputs)]
    for i, wanted in enumerate(ctx.node.output):
        if wanted and (i >= len(outputs) or not outputs[i]):
            raise ctx.unsupported(f"does not produce its output {i} ({wanted!r})")
    fn = helper.make_function(MS, ctx.op_type, names, produced, nodes, [helper.make_opsetid("", STANDARD)])
    return ctx.graph.inline(ctx, fn, {"": STANDARD})


def const(name: str, array) -> object:
    return N("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def given(ctx, i: int) -> str:
    """The rewrite's name for input i, or "" when the node leaves it out."""
    return f"in{i}" if ctx.has(i) else ""


# -- activations -------------------------------------------------------------------------------------------
@converter("Gelu", domain=MS)
def gelu(ctx):
    return inline(ctx, [N("Gelu", ["in0"], ["y"])], ["y"])


@converter("BiasGelu", domain=MS)
def bias_gelu(ctx):
    return inline(ctx, [N("Add", ["in0", "in1"], ["s"]), N("Gelu", ["s"], ["y"])], ["y"])


@converter("FastGelu", domain=MS)
def fast_gelu(ctx):
    nodes = [N("Add", ["in0", "in1"], ["s"])] if ctx.has(1) else [N("Identity", ["in0"], ["s"])]
    return inline(ctx, nodes + [N("Gelu", ["s"], ["y"], approximate="tanh")], ["y"])


@converter("QuickGelu", domain=MS)
def quick_gelu(ctx):
    alpha = np.asarray(ctx.attr("alpha", 1.702), ctx.type(0).dtype.numpy)
    return inline(ctx, [const("a", alpha), N("Mul", ["in0", "a"], ["ax"]), N("Sigmoid", ["ax"], ["s"]),
                        N("Mul", ["in0", "s"], ["y"])], ["y"])


# -- normalisation -----------------------------------------------------------------------------------------
def _skip_sum(ctx, bias: int) -> list:
    """input + skip (+ the bias, input `bias`) as "s"."""
    nodes = [N("Add", ["in0", "in1"], ["s0" if ctx.has(bias) else "s"])]
    return nodes + [N("Add", ["s0", f"in{bias}"], ["s"])] if ctx.has(bias) else nodes


@converter("SkipLayerNormalization", domain=MS)
def skip_layer_norm(ctx):
    ln = N("LayerNormalization", ["s", "in2", given(ctx, 3)], ["y", "mean", "inv_std"], axis=-1,
           epsilon=ctx.attr("epsilon", 1e-12))
    return inline(ctx, _skip_sum(ctx, 4) + [ln], ["y", "mean", "inv_std", "s"])


@converter("SkipSimplifiedLayerNormalization", domain=MS)
def skip_rms_norm(ctx):
    rms = N("RMSNormalization", ["s", "in2"], ["y"], axis=-1, epsilon=ctx.attr("epsilon", 1e-12))
    return inline(ctx, _skip_sum(ctx, 3) + [rms], ["y", "", "", "s"])  # inputs: x, skip, gamma, bias


# -- matrix products ---------------------------------------------------------------------------------------
def _swap_last(rank: int) -> list:
    return list(range(rank - 2)) + [rank - 1, rank - 2]


@converter("FusedMatMul", domain=MS)
def fused_matmul(ctx):
    if ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0):
        raise ctx.unsupported("transBatchA/transBatchB are not supported")
    nodes, operands = [], []
    for i, flag in ((0, "transA"), (1, "transB")):
        if ctx.attr(flag, 0):
            nodes.append(N("Transpose", [f"in{i}"], [f"t{i}"], perm=_swap_last(ctx.type(i).rank)))
        operands.append(f"t{i}" if ctx.attr(flag, 0) else f"in{i}")
    nodes.append(N("MatMul", operands, ["p"]))
    alpha = np.asarray(ctx.attr("alpha", 1.0), ctx.type(0).dtype.numpy)
    nodes += [const("alpha", alpha), N("Mul", ["p", "alpha"], ["y"])]
    return inline(ctx, nodes, ["y"])


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Unsigned `bits`-wide values packed little-end first into bytes, the first `count` per row."""
    per_byte = 8 // bits
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    values = (packed[..., None] >> shifts) & ((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


@converter("MatMulNBits", domain=MS)
def matmul_nbits(ctx):
    """A @ W + bias with W [K, N] dequantised when loaded: per column n and block of `block_size` rows,
    (q - zero point) * scale, q packed in B [N, blocks, block bytes]."""
    k, n, bits, block = ctx.attr("K"), ctx.attr("N"), ctx.attr("bits", 4), ctx.attr("block_size")
    if bits not in (2, 4, 8) or ctx.has(4):
        raise ctx.unsupported(f"bits={bits}{' with g_idx' if ctx.has(4) else ''} is not supported (2, 4 or 8 bits)")
    packed, scales = ctx.known(1), ctx.known(2)
    if packed is None or scales is None or (ctx.has(3) and ctx.known(3) is None):
        raise ctx.unsupported("needs its weights, scales and zero points constant")
    blocks = -(-k // block)
    q = _unpack(np.asarray(packed, np.uint8).reshape(n, blocks, -1), bits, block).astype(np.float32)
    zero = np.float32(1 << (bits - 1))
    if ctx.has(3):
        zp = np.asarray(ctx.known(3))
        zero = zp.astype(np.float32).reshape(n, blocks, 1) if zp.dtype != np.uint8 else \
            _unpack(zp.reshape(n, -1), bits, blocks).astype(np.float32).reshape(n, blocks, 1)
    fast = matmul_nbits_kernel(ctx, q, zero, np.asarray(scales, np.float32).reshape(n, blocks), block)
    if fast is not None:
        return [fast]
    w = (q - zero) * np.asarray(scales, np.float32).reshape(n, blocks, 1)
    weight = np.ascontiguousarray(w.reshape(n, blocks * block)[:, :k].T).astype(ctx.type(0).dtype.numpy)
    nodes = [const("w", weight), N("MatMul", ["in0", "w"], ["p" if ctx.has(5) else "y"])]
    return inline(ctx, nodes + ([N("Add", ["p", "in5"], ["y"])] if ctx.has(5) else []), ["y"])


def _integer_matmul_to_float(ctx, a: str, a_scale: str, a_zero: str, b_zero: str, bias: str) -> list:
    """MatMulInteger(a, in1) in float, times a_scale * b_scale (in2), plus bias."""
    nodes = [N("MatMulInteger", [a, "in1", a_zero, b_zero], ["acc"]), N("Cast", ["acc"], ["accf"], to=1),
             N("Mul", [a_scale, "in2"], ["scale"]), N("Mul", ["accf", "scale"], ["y" if not bias else "p"])]
    return nodes + ([N("Add", ["p", bias], ["y"])] if bias else [])


@converter("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(ctx):
    """A quantised to uint8 as DynamicQuantizeLinear does, then an integer product with B (in1)."""
    nodes = [N("DynamicQuantizeLinear", ["in0"], ["qa", "sa", "za"])]
    return inline(ctx, nodes + _integer_matmul_to_float(ctx, "qa", "sa", "za", given(ctx, 3), given(ctx, 4)), ["y"])


@converter("MatMulIntegerToFloat", domain=MS)
def matmul_integer_to_float(ctx):
    nodes = [N("Identity", ["in2"], ["sa"]), N("Identity", ["in3"], ["sb"])]
    body = [N("MatMulInteger", ["in0", "in1", given(ctx, 4), given(ctx, 5)], ["acc"]),
            N("Cast", ["acc"], ["accf"], to=1), N("Mul", ["sa", "sb"], ["scale"]),
            N("Mul", ["accf", "scale"], ["y" if not ctx.has(6) else "p"])]
    return inline(ctx, nodes + body + ([N("Add", ["p", "in6"], ["y"])] if ctx.has(6) else []), ["y"])


# -- QLinear*: dequantise, compute, quantise ---------------------------------------------------------------
def _dq(i: int, name: str) -> object:
    return N("DequantizeLinear", [f"in{i}", f"in{i + 1}", f"in{i + 2}"], [name])


def _q(scale: str, zero: str) -> object:
    return N("QuantizeLinear", ["f", scale, zero], ["y"])


def _qlinear_binary(op_type: str):
    def convert(ctx):
        nodes = [_dq(0, "a"), _dq(3, "b"), N(op_type, ["a", "b"], ["f"]), _q("in6", given(ctx, 7))]
        return inline(ctx, nodes, ["y"])
    return convert


def _qlinear_unary(make):
    def convert(ctx):
        return inline(ctx, [_dq(0, "x"), *make(ctx), _q("in3", given(ctx, 4))], ["y"])
    return convert


converter("QLinearAdd", domain=MS)(_qlinear_binary("Add"))
converter("QLinearMul", domain=MS)(_qlinear_binary("Mul"))
converter("QLinearSigmoid", domain=MS)(_qlinear_unary(lambda ctx: [N("Sigmoid", ["x"], ["f"])]))
converter("QLinearLeakyRelu", domain=MS)(_qlinear_unary(
    lambda ctx: [N("LeakyRelu", ["x"], ["f"], alpha=ctx.attr("alpha", 0.01))]))
converter("QLinearSoftmax", domain=MS)(_qlinear_unary(
    lambda ctx: [N("Softmax", ["x"], ["f"], axis=ctx.attr("axis", -1))]))


def _channels_first(ctx):
    if ctx.attr("channels_last", 0):
        raise ctx.unsupported("channels_last=1 is not supported")
    return []


converter("QLinearGlobalAveragePool", domain=MS)(_qlinear_unary(
    lambda ctx: _channels_first(ctx) + [N("GlobalAveragePool", ["x"], ["f"])]))


@converter("QLinearAveragePool", domain=MS)
def qlinear_average_pool(ctx):
    _channels_first(ctx)
    attrs = {k: ctx.attr(k) for k in ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
             if ctx.has_attr(k)}
    return inline(ctx, [_dq(0, "x"), N("AveragePool", ["x"], ["f"], **attrs), _q("in3", given(ctx, 4))], ["y"])


@converter("QLinearConcat", domain=MS)
def qlinear_concat(ctx):
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per concatenated tensor."""
    parts = (len(ctx.inputs) - 2) // 3
    if parts < 1 or len(ctx.inputs) != 2 + 3 * parts:
        raise ctx.error(f"has {len(ctx.inputs)} inputs; it takes Y_scale, Y_zero_point, then (X, X_scale, "
                        f"X_zero_point) per input")
    nodes = [_dq(2 + 3 * j, f"x{j}") for j in range(parts)]
    nodes += [N("Concat", [f"x{j}" for j in range(parts)], ["f"], axis=ctx.attr("axis")), _q("in0", "in1")]
    return inline(ctx, nodes, ["y"])

