"""Blocked layouts for convolution chains: f32 2-D convolutions become `conv_nchwc` on [N, C/cb, H, W, cb]
tensors, with their weights packed once, at compile time, into new module constants.

The blocked layout spreads from each convolution through elementwise ops (unary ones, and binary ones whose
other side is blocked too or a scalar), 2-D max pools and channel concats of whole blocks, so conv -> relu ->
max_pool -> conv, residual adds and a UNet's skip connections stay blocked. Convolutions joined that way form a
chain; a chain is converted only at its boundary (one conversion per value however many users it has), and only
when its estimated saving beats the cost of those conversions (`COST`). The conversions are plain ops (pad,
reshape, transpose; transpose, reshape, slice) that the loop fusion folds into neighbouring kernels. A residual
add and an activation (relu, relu6, sigmoid, tanh, silu, hardswish) right after a blocked convolution become its
epilogue.
"""
from __future__ import annotations

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Function, Op, Region, Value
from ..ir.dtypes import DType
from ..ir.symbolic import evaluate, free_symbols
from ..ops.nn_blocked import EPILOGUES, from_blocked, pack_depthwise, pack_weight, to_blocked
from .manager import Pass
from .rewrite import Pat, Rule, apply_rules, splat_value

# Ops the blocked layout passes through: each keeps a finite zero finite, so the padded channels stay harmless.
UNARY = frozenset({"relu", "neg", "abs", "sigmoid", "tanh", "clip", "leaky_relu", "elu", "gelu", "silu",
                   "hardswish", "hardsigmoid"})
BINARY = frozenset({"add", "sub", "mul", "max", "min"})

# The cost model, in seconds: GFLOP/s of a convolution on NCHW (1x1 stride-1 unpadded: a GEMM on the buffers;
# others: im2col + GEMM) and blocked, and the time of one layout conversion per element (measured on
# ResNet-18 and MobileNetV2 at 2 threads, docs/passes.md); "winograd" counts the direct FLOPs a Winograd conv
# stands for.
COST = {"nchw-pointwise": 140e9, "nchw-im2col": 100e9, "blocked": 160e9, "winograd": 400e9, "convert": 0.4e-9,
        "nchw-depthwise": 10e9, "blocked-depthwise": 40e9}
# F(4x4, 3x3) reads its transformed weights (4x the direct ones) once per group of up to 12 output tiles: with
# fewer tiles than this (ResNet-18's 7x7 maps have 4) streaming them costs more than the FLOPs it saves.
WINOGRAD_MIN_TILES = 16
# With a symbolic batch (counted as 1: a model exported for batches), also a map of whole 4x4 tiles, at least 4 of
# them, whose transformed weights stay in cache across the groups (128 channels: 2.4 MB): 8x8 maps of 128 channels
# measured 0.04-0.4x the direct time at batch 32 and 0.67-0.8x at batch 1, one thread (a loaded machine). A static
# batch of 1 keeps the rule above: its 4 tiles make one group, one thread, where the direct kernel uses them all.
WINOGRAD_CACHED_BYTES = 4 << 20


def _constant(v: Value) -> bool:
    return isinstance(v.owner, Op) and v.owner.name == "constant"


def blockable_conv(op: Op) -> bool:
    """f32 2-D convolutions with one group, constant weights (and bias) and static channel counts."""
    if op.name != "conv" or op.results[0].type.dtype is not DType.f32 or op.results[0].type.rank != 4:
        return False
    x, w = op.operands[:2]
    return op.attrs["groups"] == 1 and all(_constant(v) for v in op.operands[1:]) \
        and isinstance(x.type.shape[1], int) and isinstance(w.type.shape[0], int)


def depthwise_conv(op: Op) -> bool:
    """f32 2-D depthwise convolutions (one channel per group, one output per channel) with constant weights."""
    if op.name != "conv" or op.results[0].type.dtype is not DType.f32 or op.results[0].type.rank != 4:
        return False
    channels, outs = op.operands[0].type.shape[1], op.operands[1].type.shape[0]
    return isinstance(channels, int) and op.attrs["groups"] == channels == outs \
        and all(_constant(v) for v in op.operands[1:])


def _blockable_pool(op: Op) -> bool:
    """A 2-D max pool: on a blocked tensor it is a 3-D pool with a 1-wide window over the block (padding
    channels hold zeros, and a max of zeros stays zero)."""
    return op.name == "max_pool" and op.operands[0].type.rank == 4


def _blockable_concat(op: Op, block: int) -> bool:
    """A concat over channels of whole blocks (a UNet's skip connections): blocked, it concatenates the block axis,
    and the padding-free operands need no conversion between them."""
    return op.name == "concat" and op.attrs["axis"] == 1 and op.results[0].type.rank == 4 and all(
        isinstance(v.type.shape[1], int) and v.type.shape[1] % block == 0 for v in op.operands)


def tiling_upsample(op: Op, block: int) -> bool:
    """A conv_transpose whose windows tile its output (kernel == stride, no pads, dilation or output padding: a
    UNet's 2x2 upsampling), 2-D, f32, one group, constant weights, output channels of whole blocks: blocked, a
    1x1 conv and a shuffle of whole blocks."""
    if op.name != "conv_transpose" or op.results[0].type.dtype is not DType.f32 or op.results[0].type.rank != 4:
        return False
    a, w = op.attrs, op.operands[1]
    return a["groups"] == 1 and tuple(w.type.shape[2:]) == tuple(a["strides"]) and not any(a["pads"]) \
        and set(a["dilations"]) == {1} and not any(a["output_padding"]) and w.type.shape[1] % block == 0 \
        and isinstance(op.operands[0].type.shape[1], int) and all(_constant(v) for v in op.operands[1:])


def _static(d) -> int:
    """A size for the cost model: symbolic dims count as 1 (batch and image sizes scale both sides alike)."""
    return d if isinstance(d, int) else evaluate(d, {s: 1 for s in free_symbols(d)})


def _conv_seconds(op: Op, rate: str) -> float:
    w, y = op.operands[1].type.shape, op.results[0].type
    return 2 * _static(y.numel) * w[1] * w[2] * w[3] / COST[rate]


def winograd_pays(op: Op, block: int) -> bool:
    """Whether the blocked conv of `op` should run as Winograd F(4x4, 3x3): a 3x3 kernel, stride 1, dilation 1,
    at least one block of input channels, and enough 4x4 output tiles."""
    a, kernel, y = op.attrs, op.operands[1].type.shape, op.results[0].type.shape
    oh, ow = _static(y[2]), _static(y[3])
    tiles = _static(y[0]) * -(-oh // 4) * -(-ow // 4)
    cached = not isinstance(y[0], int) and oh % 4 == ow % 4 == 0 and tiles >= 4 and \
        36 * _padded(kernel[0], block) * _padded(kernel[1], block) * 4 <= WINOGRAD_CACHED_BYTES
    return kernel[2:] == (3, 3) and a["strides"] == (1, 1) and a["dilations"] == (1, 1) and kernel[1] >= block \
        and (tiles >= WINOGRAD_MIN_TILES or cached)


def _padded(channels: int, block: int) -> int:
    return -(-channels // block) * block


def fills_blocks(op: Op, block: int) -> bool:
    """Whether a convolution's output channels fill at least half of their blocks: 2 or 3 channels padded to 16
    lanes (a UNet's last layer) would compute 5-8 times the results, and every op after them in the layout too."""
    channels = op.operands[1].type.shape[0]
    return _padded(channels, block) <= 2 * channels


def _pad_factor(op: Op, block: int) -> float:
    """The blocked convolution's work over the plain one's: output channels padded to whole blocks, and input
    channels too unless they are one narrow block (a first layer's 3)."""
    outs, ins = op.operands[1].type.shape[:2]
    return _padded(outs, block) / outs * (_padded(ins, block) / ins if ins > block else 1.0)


def _saving(op: Op, block: int) -> float:
    a = op.attrs
    if a["groups"] != 1:  # depthwise
        outs = op.operands[1].type.shape[0]
        blocked = _conv_seconds(op, "blocked-depthwise") * _padded(outs, block) / outs
        return _conv_seconds(op, "nchw-depthwise") - blocked
    pointwise = op.operands[1].type.shape[2:] == (1, 1) and set(a["strides"]) == {1} and not any(a["pads"])
    blocked = _conv_seconds(op, "winograd" if winograd_pays(op, block) else "blocked") * _pad_factor(op, block)
    return _conv_seconds(op, "nchw-pointwise" if pointwise else "nchw-im2col") - blocked


class _Chains:
    """Which ops of one region could compute in the blocked layout, grouped into chains (union-find)."""

    def __init__(self, fn: Function, region: Region, block: int):
        self.region, self.module, self.block = region, fn.module, block
        self.users: dict = {}
        for op in region.ops:
            for v in op.operands:
                self.users.setdefault(id(v), []).append(op)
        self.member: dict = {}  # op id -> op, for ops that compute blocked
        self.parent: dict = {}
        produced: dict = {}  # value id -> the member op producing it
        for op in region.ops:
            inputs = self._blocked_inputs(op, produced)
            if inputs is None:
                continue
            self.member[id(op)] = op
            self.parent[id(op)] = id(op)
            produced[id(op.results[0])] = op
            for other in inputs:
                self._union(id(op), id(other))

    def _blocked_inputs(self, op: Op, produced: dict):
        """The member ops whose results `op` reads blocked, or None when `op` cannot compute blocked."""
        if len(op.results) != 1:
            return None
        if blockable_conv(op) or depthwise_conv(op):
            if not fills_blocks(op, self.block):
                return None
            return [produced[id(op.operands[0])]] if id(op.operands[0]) in produced else []
        if (op.name in UNARY or _blockable_pool(op)) and id(op.operands[0]) in produced:
            return [produced[id(op.operands[0])]]
        if tiling_upsample(op, self.block):
            return [produced[id(op.operands[0])]] if id(op.operands[0]) in produced else []
        if _blockable_concat(op, self.block):
            inside = [produced[id(v)] for v in op.operands if id(v) in produced]
            return inside or None
        if op.name in BINARY:
            inside = [produced[id(v)] for v in op.operands if id(v) in produced]
            rest = [v for v in op.operands if id(v) not in produced]
            return inside if inside and all(self._enters(v, op) for v in rest) else None
        return None

    def _enters(self, v: Value, op: Op) -> bool:
        """Whether `v`, not blocked itself, can join `op` blocked: a scalar, or a plain tensor of op's type
        (converted on the way in, like a residual that comes from a pool)."""
        return splat_value(v, self.module) is not None or v.type == op.results[0].type

    def _find(self, i):
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def _union(self, a, b):
        self.parent[self._find(a)] = self._find(b)

    def chains(self) -> list:
        out: dict = {}
        for i, op in self.member.items():
            out.setdefault(self._find(i), []).append(op)
        return list(out.values())

    def worth_blocking(self, chain: list) -> bool:
        """The chain's estimated saving exceeds the cost of its conversions in and out and of the padding channels
        its other ops compute (each padded element costs about what converting one does: a pass over memory)."""
        ids = {id(op) for op in chain}
        saving = sum(_saving(op, self.block) for op in chain if op.name == "conv")
        saving -= sum(_padding_elements(op, self.block) for op in chain if op.name != "conv") * COST["convert"]
        made = {id(op.results[0]) for op in chain}
        inputs = {id(v): v for op in chain for v in (op.operands[:1] if op.name == "conv" else op.operands)
                  if id(v) not in made and splat_value(v, self.module) is None}
        outputs = [op.results[0] for op in chain if any(id(u) not in ids or "terminator" in _traits(u)
                                                        for u in self.users.get(id(op.results[0]), []))]
        converted = sum(_static(v.type.numel) for v in [*inputs.values(), *outputs])
        converted += sum(_padding_elements(v.owner, self.block) for v in outputs)  # unblocking reads the padding
        return saving > converted * COST["convert"]


def _spatial_reduction(op: Op) -> bool:
    """A sum over both spatial axes of an NCHW tensor (a global pool, squeeze-excite's mean): read blocked
    (`spatial_sum_nchwc`), it passes over the tensor once, where unblocking first made it gather each channel across
    the blocks."""
    return (op.name == "reduce_sum" and op.operands[0].type.rank == 4
            and sorted(a % 4 for a in op.attrs["axes"]) == [2, 3])


def _padding_elements(op: Op, block: int) -> float:
    """The padding elements a chain member's blocked result holds beyond its plain one."""
    t = op.results[0].type
    channels = t.shape[1] if t.rank > 1 and isinstance(t.shape[1], int) else 1
    return _static(t.numel) * (_padded(channels, block) / channels - 1)


def _traits(op: Op):
    from ..ops import registry
    return registry.get_op(op.name).traits


class _Rewriter:
    """Rewrites the chosen chains' ops in program order, converting values at the chain boundaries once."""

    def __init__(self, fn: Function, chains: _Chains, chosen: list, block: int):
        self.fn, self.chains, self.block = fn, chains, block
        self.ids = {id(op) for chain in chosen for op in chain}
        self.blocked: dict = {}  # value id (made here) or (value id, block size) (converted) -> blocked form
        self.made = {id(op.results[0]) for chain in chosen for op in chain}
        self.remap: dict = {}  # value id of a replaced result -> its plain form, for users outside the chains

    def run(self) -> None:
        region = self.chains.region
        new_ops = []
        for op in region.ops:
            reads_blocked = _spatial_reduction(op) and id(op.operands[0]) in self.made
            if id(op) not in self.ids and not reads_blocked:
                new_ops.append(op)
                continue
            scratch = Region()
            b = Builder(self.fn.module, self.fn, scratch, op.loc)
            if reads_blocked:
                self.remap[id(op.results[0])] = self._reduction(b, op)
            else:
                out = self._rewrite(b, op)
                self.blocked[id(op.results[0])] = out
                if any(id(u) not in self.ids and not _spatial_reduction(u)
                       for u in self.chains.users.get(id(op.results[0]), [])):
                    self.remap[id(op.results[0])] = from_blocked(b, out, op.results[0].type.shape[1])
            for new in scratch.ops:
                new.parent = region
            new_ops += scratch.ops
            op.parent = None
        region.ops = new_ops
        self.fn.replace_uses(self.remap)

    def _reduction(self, b: Builder, op: Op) -> Value:
        """A spatial sum read from the blocked value; only its [N, C/size, 1, 1, size] result is unblocked."""
        x = op.operands[0]
        r = b.spatial_sum_nchwc(self.blocked[id(x)])
        plain = from_blocked(b, r, x.type.shape[1])
        return plain if op.attrs["keepdims"] else b.reshape(plain, shape=op.results[0].type.shape)

    def _input(self, b: Builder, v: Value, size: int) -> Value:
        """`v` in blocks of `size`, converted once however many ops read it."""
        if id(v) in self.made:
            return self.blocked[id(v)]
        key = (id(v), size)
        if key not in self.blocked:
            self.blocked[key] = to_blocked(b, v, size)
        return self.blocked[key]

    def _conv(self, b: Builder, op: Op) -> Value:
        x, w = op.operands[:2]
        weights = self.fn.module.constants[w.owner.attrs["name"]]
        bias = self.fn.module.constants[op.operands[2].owner.attrs["name"]] if len(op.operands) == 3 else None
        a = op.attrs
        return self._blocked_conv(b, x, weights, bias, strides=a["strides"], pads=a["pads"],
                                  dilations=a["dilations"],
                                  algorithm="winograd" if winograd_pays(op, self.block) else "direct")

    def _blocked_conv(self, b: Builder, x: Value, weights, bias, **attrs) -> Value:
        channels, outs = x.type.shape[1], weights.shape[0]
        xb = self._input(b, x, channels if channels < self.block else self.block)
        packed = b.constant(pack_weight(weights, xb.type.shape[4], self.block), "nchwc_w")
        bias_b = np.zeros(outs + -outs % self.block, np.float32)
        if bias is not None:
            bias_b[:outs] = bias
        return b.conv_nchwc(xb, packed, b.constant(bias_b.reshape(-1, self.block), "nchwc_b"), **attrs)

    def _upsample(self, b: Builder, op: Op) -> Value:
        """A tiling conv_transpose: a 1x1 blocked conv to taps * O channels (tap-major), then a depth-to-space
        shuffle of whole blocks, blocked in and out."""
        x, w = op.operands[:2]
        weights = self.fn.module.constants[w.owner.attrs["name"]]
        (ky, kx), outs = weights.shape[2:], weights.shape[1]
        pointwise = np.ascontiguousarray(weights.transpose(2, 3, 1, 0).reshape(ky * kx * outs, -1, 1, 1))
        bias = self.fn.module.constants[op.operands[2].owner.attrs["name"]] if len(op.operands) == 3 else None
        y = self._blocked_conv(b, x, pointwise, None if bias is None else np.tile(bias, ky * kx), strides=(1, 1),
                               pads=(0, 0, 0, 0), dilations=(1, 1), algorithm="direct")
        n, blocks, h, wd, size = y.type.shape
        y = b.reshape(y, shape=(n, ky, kx, blocks // (ky * kx), h, wd, size))
        y = b.transpose(y, perm=(0, 3, 4, 1, 5, 2, 6))
        return b.reshape(y, shape=(n, blocks // (ky * kx), h * ky, wd * kx, size))

    def _rewrite(self, b: Builder, op: Op) -> Value:
        """The blocked form of one chain op."""
        if op.name == "conv":
            return self._depthwise(b, op) if op.attrs["groups"] != 1 else self._conv(b, op)
        blocked = {"max_pool": self._pool, "concat": self._concat, "conv_transpose": self._upsample}
        return blocked.get(op.name, self._elementwise)(b, op)

    def _depthwise(self, b: Builder, op: Op) -> Value:
        channels = op.operands[0].type.shape[1]
        weights = self.fn.module.constants[op.operands[1].owner.attrs["name"]]
        bias = np.zeros(channels + -channels % self.block, np.float32)
        if len(op.operands) == 3:
            bias[:channels] = self.fn.module.constants[op.operands[2].owner.attrs["name"]]
        a = op.attrs
        return b.dwconv_nchwc(self._input(b, op.operands[0], self.block),
                              b.constant(pack_depthwise(weights, self.block), "nchwc_dw"),
                              b.constant(bias.reshape(-1, self.block), "nchwc_b"), strides=a["strides"], pads=a["pads"],
                              dilations=a["dilations"])

    def _pool(self, b: Builder, op: Op) -> Value:
        a, pads = op.attrs, op.attrs["pads"]
        return b.max_pool(self.blocked[id(op.operands[0])], kernel=(*a["kernel"], 1), strides=(*a["strides"], 1),
                          pads=(*pads[:2], 0, *pads[2:], 0), dilations=(*a["dilations"], 1), ceil_mode=a["ceil_mode"])

    def _concat(self, b: Builder, op: Op) -> Value:
        return b.concat(*(self._input(b, v, self.block) for v in op.operands), axis=1)

    def _elementwise(self, b: Builder, op: Op) -> Value:
        shape = next(self.blocked[id(v)] for v in op.operands if id(v) in self.made).type.shape
        scalars = {id(v): splat_value(v, self.fn.module) for v in op.operands}
        operands = [b.full(scalars[id(v)], shape, v.type.dtype) if id(v) not in self.made and scalars[id(v)]
                    is not None else self._input(b, v, self.block) for v in op.operands]
        return b.emit(op.name, *operands, **op.attrs)


def _uses(v: Value) -> int:
    return sum(1 for op in v.owner.parent.walk() for x in op.operands if x is v)


def _open_conv(operands: int, name: str = "conv_nchwc") -> Pat:
    """A blocked conv (`name`) with at most `operands` operands, no activation yet and one user."""
    def check(v, module):
        op = v.owner
        return len(op.operands) <= operands and op.attrs["activation"] == "none" and _uses(v) == 1
    return Pat(name, bind="conv", where=check)


def _activation(op: Op):
    """The conv_nchwc activation (EPILOGUES) `op` computes, or None."""
    for name, (op_name, attrs) in EPILOGUES.items():
        if op.name == op_name and all(op.attrs.get(k) == v for k, v in attrs.items()):
            return name
    return None


def _with_activation(b, m):
    activation = _activation(m.root)
    return None if activation is None else _with_activation_named(b, m, activation)


def _with_activation_named(b, m, activation: str):
    conv = m.conv.owner
    return b.emit(conv.name, *conv.operands, **{**conv.attrs, "activation": activation})


def _relu(b, m):
    """max(conv, 0): ONNX's Clip(0, ...) and Max with a constant."""
    return _with_activation_named(b, m, "relu")


def _relu6_after_relu(b, m):
    """min(conv with relu, 6): ONNX's Clip(0, 6) arrives as max then min with constants."""
    return _with_activation_named(b, m, "relu6")


def _relu_conv(name: str) -> Pat:
    return Pat(name, bind="conv", where=lambda v, module: v.owner.attrs["activation"] == "relu" and _uses(v) == 1)


def _with_residual(b, m):
    conv = m.conv.owner
    if m.other.type != m.conv.type:
        return None
    return b.emit("conv_nchwc", *conv.operands, m.other, **conv.attrs)


def _single_use(name: str) -> Pat:
    return Pat("conv_nchwc", bind=name, where=lambda v, module: _uses(v) == 1)


def _plain_out(b, m):
    """A blocked conv whose only user converts it back writes the plain layout itself."""
    conv = m.conv.owner
    if len(conv.operands) == 4 or conv.attrs["channels"]:
        return None
    return b.emit("conv_nchwc", *conv.operands, **{**conv.attrs, "channels": m.root.results[0].type.shape[1]})


def _fewer_channels(b, m):
    conv, a = m.conv.owner, m.root.attrs
    if a["axes"] != (1,) or a["starts"] != (0,) or a["steps"] != (1,):
        return None
    return b.emit("conv_nchwc", *conv.operands, **{**conv.attrs, "channels": a["ends"][0]})


BLOCKED_CONVS = ("conv_nchwc", "dwconv_nchwc")
EPILOGUE_RULES = [*(Rule(Pat(name, _open_conv(4, conv)), _with_activation, f"{name}-into-{conv}")
                    for conv in BLOCKED_CONVS for name in dict.fromkeys(op_name for op_name, _ in EPILOGUES.values())),
                  *(Rule(Pat("max", _open_conv(4, conv), Pat.splat(0.0)), _relu, f"max-0-into-{conv}")
                    for conv in BLOCKED_CONVS),
                  *(Rule(Pat("min", _relu_conv(conv), Pat.splat(6.0)), _relu6_after_relu, f"min-6-into-{conv}")
                    for conv in BLOCKED_CONVS),
                  Rule(Pat("add", _open_conv(3), Pat.any("other")), _with_residual, "add-into-conv-nchwc"),
                  Rule(Pat("reshape", Pat("transpose", _single_use("conv"), attrs={"perm": (0, 1, 4, 2, 3)},
                                          where=lambda v, module: _uses(v) == 1)), _plain_out, "conv-nchwc-plain"),
                  Rule(Pat("slice", Pat("conv_nchwc", bind="conv", where=lambda v, module: _uses(v) == 1 and
                                        v.owner.attrs["channels"] > 0)), _fewer_channels, "conv-nchwc-channels")]


class BlockLayout(Pass):
    """Blocked layout (NCHWc) for f32 convolution chains, weights packed once, conversions at the boundaries."""

    name = "block-layout"

    def __init__(self, block: int = 16):
        self.block = block

    def run_on_operation(self, fn: Function) -> bool:
        chains = _Chains(fn, fn.body, self.block)
        chosen = [c for c in chains.chains() if any(op.name == "conv" for op in c) and chains.worth_blocking(c)]
        if not chosen:
            return False
        _Rewriter(fn, chains, chosen, self.block).run()
        apply_rules(fn, EPILOGUE_RULES)
        fn.body.ops = [op for op in fn.body.ops if op.name not in (*BLOCKED_CONVS, "transpose") or _uses(op.results[0])]
        return True
