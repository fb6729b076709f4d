"""int8 and int4 quantization of an IR module: Linear (matmul by a constant weight) and 2-D convolution layers become
the quantized ops of cuvil/ops/quantized.py, with their bias and activation folded into the op's epilogue.

    >>> import numpy as np
    >>> from cuvil.ir import Builder, Module, TensorType
    >>> from cuvil.ir.dtypes import DType
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType(DType.f32, (2, 64))])
    >>> b.ret(b.relu(b.matmul(b.args[0], b.constant(np.ones((64, 8), np.float32)))))
    >>> [op.name for op in quantize_module(m, "int8").main.walk()][-2:]
    ['qlinear_i8', 'return']

"int8": weights int8, symmetric, one scale per output channel; activations uint8 with a scale and zero point. With a
calibration dataset they are static: one range per tensor (`method`: minmax, percentile or entropy), and a layer
whose result feeds only quantized layers writes uint8 directly (the next layer's scale), so int8 tensors flow between
them. Without one they are dynamic: quantized per row (Linear) or per image (conv) when the model runs, which suits
transformers. Without a byte dot product (AVX-512 VNNI or AMX-INT8) the int8 kernels lose to the fp32 ones, so
there `kernels="auto"` keeps convolutions and Linears of 16 rows or more on the fp32 kernels, their weights rounded to
int8 and dequantized (`layer_kernel`, docs/precision-int8.md). "int4": weight-only Linear, asymmetric 4-bit weights
in groups of `group_size` (32, 64 or 128) along K, activations f32. Everything else (attention's activation-activation matmuls, normalisations, softmax, grouped
convolutions) stays fp32.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import numpy as np

from ..compiler import clone_module
from ..errors import UnsupportedError
from ..ir.builder import Builder
from ..ir.core import Function, Module, Op, Region, Value
from ..ops.quantized import INT4_GROUPS, pack_int4
from ..passes import DCE, CSE, Canonicalize, FoldBatchNorm, FoldConstants, Recompose, Simplify, run_pipeline
from ..passes.manager import PipelineBuilder
from ..passes.rewrite import replace_op
from .calibrate import DEFAULT_MAX_SAMPLES, METHODS, calibrate, scale_and_zero

PRECISIONS = ("int8", "int4")
KERNELS = ("auto", "int8", "fp32")  # which kernels int8 layers run on: chosen by the CPU, or forced (tests, benchmarks)
VNNI_PATH = 3  # cuvil_int8_isa from which the int8 kernels beat fp32: AVX-512 VNNI (3), AMX-INT8 (4)
# Without VNNI, a Linear of fewer rows keeps the int8 GEMM: it reads a quarter of the weight's bytes (AVX2, 768 x 3072:
# 0.31x fp32 at 2 rows, 0.75x at 8), while from 16 rows the 16-bit vpmaddwd path computes slower (1.06-1.22x).
INT8_GEMM_MAX_ROWS = 16
_ACTIVATIONS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}


@dataclass
class Layer:
    """A quantizable layer: `root` (matmul or conv) reads `x` and a constant weight; `last` is the op whose result
    the quantized op replaces (root, its bias add or its activation)."""

    kind: str  # "linear" (weight [K, N]) or "conv" (weight [O, C, KH, KW])
    root: Op
    weight: np.ndarray
    bias: Optional[np.ndarray]
    act: str
    last: Op
    add: Optional[Op] = None  # conv: the add of a skip connection folded into the op (its other operand the residual)

    @property
    def x(self) -> Value:
        return self.root.operands[0]

    @property
    def residual(self) -> Optional[Value]:
        """The value the folded add adds to the conv's result (read when rewriting: earlier rewrites replace it)."""
        if self.add is None:
            return None
        a, b = self.add.operands
        return b if a is self.root.results[0] else a


def quantize_module(module: Module, precision: str, calibrate_dataset: Optional[Iterable] = None,
                    method: str = "minmax", max_samples: int = DEFAULT_MAX_SAMPLES, group_size: int = 32,
                    run: Optional[Callable] = None, kernels: str = "auto") -> Module:
    """A new module with `module`'s Linear and convolution layers quantized to `precision` ("int8" or "int4").
    `calibrate_dataset` (int8): an iterable of input tuples or dicts, at most `max_samples` of them used, for static
    activation ranges; `run(module)` gives the callable calibration runs (default: compiled for the CPU). `kernels`
    (int8): "auto" picks per layer by the CPU's int8 path (`layer_kernel`), "int8" / "fp32" force one for all."""
    if precision not in PRECISIONS:
        raise UnsupportedError(f"quantize_module: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if method not in METHODS:
        raise UnsupportedError(f"quantize_module: unknown calibration method {method!r}; expected one of "
                               f"{', '.join(METHODS)}")
    if kernels not in KERNELS:
        raise UnsupportedError(f"quantize_module: kernels must be one of {', '.join(KERNELS)}, got {kernels!r}")
    if group_size not in INT4_GROUPS:
        raise UnsupportedError(f"quantize_module: int4 group_size must be one of {INT4_GROUPS}, got {group_size}")
    out = clone_module(module)
    run_pipeline(out, _prepare_pipeline())
    fn = out.main
    if precision == "int4":
        layers = [layer for layer in find_layers(fn, out) if layer.kind == "linear"]
        for layer in layers:
            _rewrite_int4(out, fn, layer, group_size)
        out.metadata["quantization"] = json.dumps({"precision": "int4", "group_size": group_size,
                                                   "layers": len(layers)})
    else:
        _quantize_int8(out, fn, calibrate_dataset, method, max_samples, run, kernels)
    DCE().run_on_operation(out)
    return out


def _prepare_pipeline():
    """The default pipeline's first passes: constant weights folded (transposes), BatchNorm folded into its conv,
    composites (gelu) recomposed, so that layers read plain constants and their epilogues are single ops."""
    pb = PipelineBuilder("quantize-prepare")
    pb.add(Canonicalize())
    pb.add_fixpoint("cleanup", FoldConstants(), Simplify(), Canonicalize(), CSE(), DCE())
    pb.add(Recompose(), FoldBatchNorm(), DCE())
    return pb.build()


# -- finding layers ----------------------------------------------------------------------------------------
def _users(fn: Function) -> dict:
    users: dict = {}
    for op in fn.walk():
        for v in op.operands:
            users.setdefault(id(v), []).append(op)
    return users


def _constant(v: Value, module: Module) -> Optional[np.ndarray]:
    """The array of a module constant, or of a transpose or reshape of one (folding leaves large ones)."""
    op = v.owner
    if not isinstance(op, Op) or op.name not in ("constant", "transpose", "reshape"):
        return None
    if op.name == "constant":
        return module.constants[op.attrs["name"]]
    arr = _constant(op.operands[0], module)
    shape = op.results[0].type.shape
    if arr is None or not all(isinstance(d, int) for d in shape):
        return None
    return np.transpose(arr, op.attrs["perm"]) if op.name == "transpose" else arr.reshape(shape)


def _bias_of(v: Value, module: Module, n) -> Optional[np.ndarray]:
    """The [N] vector a constant (possibly broadcast or reshaped) adds to every row, if it is one."""
    while isinstance(v.owner, Op) and v.owner.name in ("broadcast_to", "reshape"):
        v = v.owner.operands[0]
    arr = _constant(v, module)
    if arr is None or arr.dtype != np.float32 or arr.size != n or (arr.ndim and arr.shape[-1] != n):
        return None
    return arr.reshape(n)


def _epilogue(layer_ops: list, users: dict, module: Module, n) -> tuple:
    """(bias, activation, last op) following a layer's root through single-use results."""
    bias, last = None, layer_ops[0]
    nxt = _single_user(last, users)
    if nxt is not None and nxt.name == "add":
        other = nxt.operands[1] if nxt.operands[0] is last.results[0] else nxt.operands[0]
        bias = _bias_of(other, module, n)
        if bias is not None:
            last, nxt = nxt, _single_user(nxt, users)
    return (bias, *_activation(last, nxt))


def _activation(last: Op, nxt: Optional[Op]) -> tuple:
    """(activation, last op): `nxt`, the single user of `last`, when it is an activation the epilogue has."""
    if nxt is not None and (nxt.name in _ACTIVATIONS or nxt.name == "gelu"):
        return _ACTIVATIONS.get(nxt.name) or ("gelu_tanh" if nxt.attrs["approximate"] == "tanh" else "gelu_erf"), nxt
    return "none", last


def _conv_epilogue(root: Op, users: dict, module: Module, claimed: set) -> tuple:
    """(add, activation, last op) after a conv: an add of a value of the conv's own shape and type (a skip
    connection, not yet folded into another conv) becomes the op's residual; then an activation."""
    add, nxt = None, _single_user(root, users)
    y = root.results[0]
    if nxt is not None and nxt.name == "add" and id(nxt) not in claimed and nxt.operands[0] is not nxt.operands[1]:
        other = nxt.operands[1] if nxt.operands[0] is y else nxt.operands[0]
        if other.type == y.type and _constant(other, module) is None:
            add = nxt
            claimed.add(id(nxt))
    last = add or root
    return (add, *_activation(last, _single_user(last, users)))


def _single_user(op: Op, users: dict) -> Optional[Op]:
    found = users.get(id(op.results[0]), [])
    return found[0] if len(found) == 1 and found[0].parent is op.parent else None


def find_layers(fn: Function, module: Module) -> list[Layer]:
    """The quantizable layers of `fn`'s top level, in program order."""
    users, layers, claimed = _users(fn), [], set()
    for op in fn.body.ops:
        x = op.operands[0] if op.operands else None
        if x is None or x.type.dtype.value != "f32":
            continue
        w = _constant(op.operands[1], module) if len(op.operands) > 1 else None
        if w is None or w.dtype != np.float32:
            continue
        if op.name == "matmul" and w.ndim == 2 and x.type.rank >= 2:
            layers.append(Layer("linear", op, w, *_epilogue([op], users, module, w.shape[1])))
        elif op.name == "conv" and op.attrs["groups"] == 1 and w.ndim == 4 and x.type.rank == 4:
            bias = _constant(op.operands[2], module) if len(op.operands) > 2 else None
            if len(op.operands) > 2 and bias is None:
                continue
            add, act, last = _conv_epilogue(op, users, module, claimed)
            layers.append(Layer("conv", op, w, bias, act, last, add))
    return layers


# -- weights -----------------------------------------------------------------------------------------------
def quantize_weight_int8(w: np.ndarray) -> tuple:
    """(int8 W [N, K], f32 scale [N]): symmetric, one scale per row (output channel), range -127..127."""
    amax = np.abs(w).max(axis=1)
    scale = np.where(amax > 0, amax / 127, 1).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def quantize_weight_int4(w: np.ndarray, group: int) -> tuple:
    """(packed q [N, K/2] u8, scale [N, K/group] f32, zero [N, K/group] u8): asymmetric, per group of K."""
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    lo, hi = np.minimum(g.min(axis=2), 0), np.maximum(g.max(axis=2), 0)
    scale = np.where(hi > lo, (hi - lo) / 15, 1).astype(np.float32)
    zero = np.clip(np.rint(-lo / scale), 0, 15)
    q = np.clip(np.rint(g / scale[..., None]) + zero[..., None], 0, 15).reshape(n, k)
    return pack_int4(q), scale, zero.astype(np.uint8)


# -- rewriting ---------------------------------------------------------------------------------------------
def _emit(module: Module, fn: Function, layer: Layer, name: str, operands: list, consts: list, attrs: dict,
          tail: tuple = (), pad_k: int = 0) -> Value:
    """Build `name` from the layer's x (its last axis padded with `pad_k` zeros), new constants and `tail` just where
    `layer.last` was, and use it instead."""
    b = Builder(module, fn, Region(), layer.root.loc)
    if pad_k:
        rank = operands[0].type.rank
        operands = [b.pad(operands[0], pads=(0,) * (2 * rank - 1) + (pad_k,)), *operands[1:]]
    values = [b.constant(c, name) for c in consts]
    result = b.emit(name, *operands, *values, *tail, **attrs)
    replace_op(fn, layer.last, b.region.ops, [result])
    return result


def _rewrite_int4(module: Module, fn: Function, layer: Layer, group_size: int) -> None:
    """K not a multiple of 32: the weight gets zero rows and x zero columns up to one (zeros quantize to exactly the
    group's zero point, so the padding adds nothing)."""
    k = layer.weight.shape[0]
    kp = -(-k // 32) * 32
    group = next(g for g in sorted(INT4_GROUPS, reverse=True) if g <= group_size and kp % g == 0)
    w = np.pad(layer.weight, ((0, kp - k), (0, 0))) if kp != k else layer.weight
    packed, scale, zero = quantize_weight_int4(np.ascontiguousarray(w.T), group)
    consts = [packed, scale, zero] + ([layer.bias.astype(np.float32)] if layer.bias is not None else [])
    _emit(module, fn, layer, "linear_i4", [layer.root.operands[0]], consts, {"group": group, "act": layer.act},
          pad_k=kp - k)


def _quantize_int8(module: Module, fn: Function, dataset, method: str, max_samples: int, run, kernels: str) -> None:
    found = find_layers(fn, module)
    isa = int8_path() if kernels == "auto" else None
    on_fp32 = [layer for layer in found if (layer_kernel(layer, isa) if isa is not None else kernels) == "fp32"]
    layers = [layer for layer in found if all(layer is not other for other in on_fp32)]
    observed = _observed(layers)
    ranges = calibrate(module, observed, dataset, method, max_samples, run) if dataset is not None and layers \
        else None
    params = {id(v): scale_and_zero(*r) for v, r in zip(observed, ranges)} if ranges else {}
    outputs = _requantized_outputs(fn, layers, params) if ranges else {}
    # (scale, zero) of each layer's input and residual, taken now: rewriting replaces the values
    inputs = [(params.get(id(layer.x), (0.0, 0)), params.get(id(layer.residual), (0.0, 0))) for layer in layers]
    order = {id(op): i for i, op in enumerate(fn.body.ops)}
    for i in sorted(range(len(layers)), key=lambda i: order[id(layers[i].last)]):  # a residual's producer first
        out, pools = outputs.get(i, ((0.0, 0), []))
        result = _rewrite_int8(module, fn, layers[i], *inputs[i], out)
        for pool in pools:  # before the layers reading them are rewritten: those see uint8 inputs
            result = _retyped_pool(module, fn, pool, result)
    for layer in on_fp32:
        _rewrite_dequantized(module, fn, layer)
    module.metadata["quantization"] = json.dumps({
        "precision": "int8", "mode": "static" if ranges else "dynamic", "method": method if ranges else None,
        "ranges": [list(r) for r in ranges] if ranges else None, "layers": len(layers),
        "residuals": sum(layer.add is not None for layer in layers), "fp32_layers": len(on_fp32),
        "kernels": kernels, "int8_path": isa})


# -- the kernel policy -------------------------------------------------------------------------------------
def int8_path() -> int:
    """The int8 kernels' code path on this CPU (cuvil_int8_isa: 4 AMX, 3 VNNI, 2 AVX-512BW, 1 AVX2, 0 C), capped
    by CUVIL_INT8_ISA, at the level the model links."""
    from ..backends.cpu.flags import opt_level
    from ..backends.cpu.kernels_int8 import best_isa

    return best_isa(opt_level())


def layer_kernel(layer: Layer, isa: int) -> str:
    """"int8" or "fp32": the kernel a layer runs on where the int8 path is `isa`. With VNNI or AMX every layer is
    int8. Below, the 16-bit `vpmaddwd` paths multiply-add at most at the fp32 FMA rate (one 256-bit `vpmaddwd` is
    16 products, one FMA 8, and Zen 1 or Skylake issue half as many of the former) and widen bytes on top, so
    convolutions, and Linears from INT8_GEMM_MAX_ROWS rows (or rows not known when compiling), run on fp32."""
    if isa >= VNNI_PATH:
        return "int8"
    if layer.kind == "linear":
        rows = layer.x.type.shape[:-1]
        if all(isinstance(d, int) for d in rows) and int(np.prod(rows)) < INT8_GEMM_MAX_ROWS:
            return "int8"
    return "fp32"


def dequantized_weight(w: np.ndarray) -> np.ndarray:
    """`w` ([N, ...], one scale per row) rounded as the int8 kernels see it, back in f32: q * scale."""
    q, scale = quantize_weight_int8(np.ascontiguousarray(w.reshape(w.shape[0], -1)))
    return (q.astype(np.float32) * scale[:, None]).reshape(w.shape)


def _rewrite_dequantized(module: Module, fn: Function, layer: Layer) -> None:
    """The layer's root again, on its weight rounded to int8 and dequantized; its bias, activation and residual
    stay the ops they were, for the fp32 pipeline to fuse as in any fp32 model."""
    root = layer.root
    w = dequantized_weight(layer.weight.T).T if layer.kind == "linear" else dequantized_weight(layer.weight)
    b = Builder(module, fn, Region(), root.loc)
    weight = b.constant(np.ascontiguousarray(w), f"{root.name}_w_int8")
    result = b.emit(root.name, root.operands[0], weight, *root.operands[2:], **root.attrs)
    replace_op(fn, root, b.region.ops, [result])


def _observed(layers: list) -> list:
    """The tensors calibration observes: every layer's input and residual, each once."""
    seen: dict = {}
    for layer in layers:
        for v in (layer.x, layer.residual):
            if v is not None:
                seen.setdefault(id(v), v)
    return list(seen.values())


def _rewrite_int8(module: Module, fn: Function, layer: Layer, x_params: tuple, res_params: tuple, out: tuple):
    w = layer.weight.T if layer.kind == "linear" else layer.weight.reshape(layer.weight.shape[0], -1)
    q, scale = quantize_weight_int8(np.ascontiguousarray(w))
    attrs = {"x_scale": x_params[0], "x_zero": x_params[1], "act": layer.act, "out_scale": out[0], "out_zero": out[1]}
    operands = [layer.root.operands[0]]
    if layer.kind == "conv":
        q = q.reshape(layer.weight.shape)
        attrs.update({k: layer.root.attrs[k] for k in ("strides", "dilations", "pads")})
    consts = [q, scale] + ([layer.bias.astype(np.float32)] if layer.bias is not None else [])
    if layer.add is None:
        return _emit(module, fn, layer, "qlinear_i8" if layer.kind == "linear" else "qconv_i8", operands, consts,
                     attrs)
    res = layer.residual  # u8 where its producer was rewritten to write uint8 (with the tensor's own range)
    res_scale, res_zero = res_params if res.type.dtype.value == "u8" else (0.0, 0)
    attrs.update({"residual": True, "res_scale": res_scale, "res_zero": res_zero})
    return _emit(module, fn, layer, "qconv_i8", operands, consts, attrs, tail=[res])


def _retyped_pool(module: Module, fn: Function, pool: Op, x: Value) -> Value:
    """`pool` again, on its operand now rewritten to uint8 (`x`): its result becomes uint8 too."""
    b = Builder(module, fn, Region(), pool.loc)
    result = b.emit(pool.name, x, **pool.attrs)
    replace_op(fn, pool, b.region.ops, [result])
    return result


def _requantized_outputs(fn: Function, layers: list, params: dict) -> dict:
    """Layer index -> ((scale, zero) of a uint8 result, the max_pools between it and its readers): for layers whose
    every user is a quantized layer reading it as its input or as its residual (one tensor, one range, so every
    reader agrees on it), directly or through a chain of max_pools, each the one user of what it pools. A max_pool
    commutes with quantizing (rounding and clamping never reorder values), so the layer writes the pooled tensor's
    scale and the pools run on uint8, a quarter of the bytes (ResNet's stem: 3.2 MB of f32 written, pooled, read)."""
    readers: dict = {}
    for layer in layers:
        readers.setdefault(id(layer.x), set()).add(id(layer.root))
        if layer.add is not None:
            readers.setdefault(id(layer.residual), set()).add(id(layer.add))
    users = _users(fn)
    out = {}
    for i, layer in enumerate(layers):
        result, pools = layer.last.results[0], []
        while len(users.get(id(result), [])) == 1 and users[id(result)][0].name == "max_pool":
            pools.append(users[id(result)][0])
            result = pools[-1].results[0]
        found = users.get(id(result), [])
        if found and all(id(op) in readers.get(id(result), ()) for op in found) and id(result) in params:
            out[i] = (params[id(result)], pools)
    return out
