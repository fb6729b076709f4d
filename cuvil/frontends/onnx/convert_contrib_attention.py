"""ONNX Runtime's attention contrib ops as standard ONNX Attention (opset 23) and RotaryEmbedding: Attention
(packed QKV projection), MultiHeadAttention, GroupQueryAttention (a prompt without past), RotaryEmbedding and
EmbedLayerNormalization. Key masks become additive masks of `mask_filter_value`, as ONNX Runtime applies them.
Past key/value caches are not supported yet (a clear error names the input)."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .convert_contrib import MS, N, const, given, inline
from .registry import converter


def _refuse_past(ctx, *inputs: int) -> None:
    for i in inputs:
        if ctx.has(i) and all(d != 0 for d in ctx.type(i).shape):
            raise ctx.unsupported(f"input {i} (a past key/value cache) is not supported yet")


def _key_mask(ctx, i: int, rows: int) -> list:
    """Nodes computing "mask" [B, 1, S or 1, T], additive, from the key mask input i: a raw [B, T] or [B, S, T]
    mask (0 = masked) or [B] key lengths."""
    t = ctx.type(i)
    fill = np.float32(ctx.attr("mask_filter_value", -10000.0))
    nodes = [const("fill", fill), const("zero", np.float32(0))]
    if t.rank == 1:
        keys = ctx.type(rows).shape[1]
        nodes += [const("positions", np.arange(keys, dtype=np.int64)), N("Cast", ["in%d" % i], ["lengths"], to=7),
                  const("column", np.int64([-1, 1])), N("Reshape", ["lengths", "column"], ["len2"]),
                  N("Less", ["positions", "len2"], ["keep"])]
    elif t.rank in (2, 3):
        nodes += [N("Cast", ["in%d" % i], ["keep"], to=9)]
    else:
        raise ctx.unsupported(f"a {t.rank}-D key mask is not supported (1-D lengths, 2-D or 3-D raw masks are)")
    axes = np.int64([1, 2] if t.rank != 3 else [1])
    return nodes + [N("Where", ["keep", "zero", "fill"], ["flat"]), const("mask_axes", axes),
                    N("Unsqueeze", ["flat", "mask_axes"], ["mask"])]


def _attention(ctx, q: str, k: str, v: str, mask_input: int, bias_input: int, rows: int, **extra) -> list:
    """Standard Attention over 3-D q, k, v, with the key mask and additive attention bias folded into one mask."""
    nodes, masks = [], []
    if ctx.has(mask_input):
        nodes += _key_mask(ctx, mask_input, rows)
        masks.append("mask")
    if ctx.has(bias_input):
        masks.append(f"in{bias_input}")
    if len(masks) == 2:
        nodes.append(N("Add", masks, ["bias_mask"]))
    heads = ctx.attr("num_heads")
    attrs = {"q_num_heads": heads, "kv_num_heads": extra.pop("kv_heads", heads),
             "is_causal": ctx.attr("unidirectional", 0), **extra}
    if ctx.attr("scale", 0.0):
        attrs["scale"] = ctx.attr("scale")
    mask = "bias_mask" if len(masks) == 2 else masks[0] if masks else ""
    return nodes + [N("Attention", [q, k, v, mask], ["y"], **attrs)]


@converter("Attention", domain=MS)
def attention(ctx):
    """input @ weights + bias split into Q, K, V (qkv_hidden_sizes, equal thirds by default)."""
    _refuse_past(ctx, 4)
    if ctx.has(6) or ctx.attr("do_rotary", 0):
        raise ctx.unsupported("past_sequence_length and do_rotary are not supported")
    sizes = ctx.attr("qkv_hidden_sizes") or [ctx.type(1).shape[1] // 3] * 3
    nodes = [N("MatMul", ["in0", "in1"], ["p" if ctx.has(2) else "qkv"])]
    nodes += [N("Add", ["p", "in2"], ["qkv"])] if ctx.has(2) else []
    nodes += [const("sizes", np.int64(sizes)), N("Split", ["qkv", "sizes"], ["q", "k", "v"], axis=-1)]
    return inline(ctx, nodes + _attention(ctx, "q", "k", "v", 3, 5, 0), ["y"])


@converter("MultiHeadAttention", domain=MS)
def multi_head_attention(ctx):
    """3-D query, key and value, each plus its third of `bias`; presents are the heads of key and value."""
    _refuse_past(ctx, 6, 7)
    if not ctx.has(1) or not ctx.has(2) or ctx.type(1).rank != 3:
        raise ctx.unsupported("packed QKV or KV and 4-D keys are not supported (3-D query, key, value are)")
    nodes, qkv = [], ["in0", "in1", "in2"]
    if ctx.has(3):
        widths = [ctx.type(i).shape[2] for i in range(3)]
        nodes += [const("bias_sizes", np.int64(widths)), N("Split", ["in3", "bias_sizes"], ["bq", "bk", "bv"])]
        nodes += [N("Add", [x, b], [f"{x}b"]) for x, b in zip(qkv, ("bq", "bk", "bv"))]
        qkv = [f"{x}b" for x in qkv]
    nodes += _attention(ctx, *qkv, 4, 5, 1)
    heads = ctx.attr("num_heads")
    return inline(ctx, nodes + _heads(qkv[1], "present_k", heads) + _heads(qkv[2], "present_v", heads),
                  ["y", "present_k", "present_v"])


def _heads(x: str, out: str, heads: int) -> list:
    """[B, S, heads * D] -> [B, heads, S, D]."""
    return [const(f"{out}_shape", np.int64([0, 0, heads, -1])), N("Reshape", [x, f"{out}_shape"], [f"{out}_4d"]),
            N("Transpose", [f"{out}_4d"], [out], perm=[0, 2, 1, 3])]


@converter("GroupQueryAttention", domain=MS)
def group_query_attention(ctx):
    """A prompt (no past): causal attention of num_heads queries over kv_num_heads keys, keys past each row's
    seqlens_k + 1 masked; do_rotary applies RotaryEmbedding to q and k at positions 0..S-1 first."""
    _refuse_past(ctx, 3, 4)
    if not ctx.has(1) or ctx.attr("local_window_size", -1) != -1 or ctx.attr("smooth_softmax", 0) or ctx.has(11):
        raise ctx.unsupported("packed QKV, local_window_size, smooth_softmax and head_sink are not supported")
    heads, kv_heads = ctx.attr("num_heads"), ctx.attr("kv_num_heads")
    q, k, nodes = "in0", "in1", []
    if ctx.attr("do_rotary", 0):
        nodes += _positions(ctx, 0, 9)
        nodes += [N("RotaryEmbedding", [x, "in7", "in8", "positions"], [f"{x}r"], num_heads=n,
                    interleaved=ctx.attr("rotary_interleaved", 0)) for x, n in ((q, heads), (k, kv_heads))]
        q, k = "in0r", "in1r"
    seq = ctx.type(1).shape[1]
    nodes += [const("key_positions", np.arange(seq, dtype=np.int64)), N("Cast", ["in5"], ["last"], to=7),
              const("column", np.int64([-1, 1])), N("Reshape", ["last", "column"], ["last2"]),
              N("LessOrEqual", ["key_positions", "last2"], ["keep2"]), const("shape4", np.int64([0, 1, 1, -1])),
              N("Reshape", ["keep2", "shape4"], ["keep"])]
    attrs = {"q_num_heads": heads, "kv_num_heads": kv_heads, "is_causal": 1}
    for name in ("scale", "softcap"):
        if ctx.attr(name, 0.0):
            attrs[name] = ctx.attr(name)
    nodes.append(N("Attention", [q, k, "in2", "keep"], ["y"], **attrs))
    return inline(ctx, nodes + _heads(k, "present_k", kv_heads) + _heads("in2", "present_v", kv_heads),
                  ["y", "present_k", "present_v"])


def _positions(ctx, x: int, ids: int) -> list:
    """Nodes computing "positions" [B, S]: position_ids input `ids`, or 0..S-1 when absent; an input of one
    value is an offset added to 0..S-1 (ONNX Runtime's RotaryEmbedding)."""
    seq = ctx.type(x).shape[-2] if ctx.type(x).rank == 4 else ctx.type(x).shape[1]
    nodes = [const("steps", np.arange(seq, dtype=np.int64)[None, :])]
    if not ctx.has(ids):
        return nodes + [N("Identity", ["steps"], ["positions"])]
    if ctx.type(ids).numel == 1:
        return nodes + [N("Cast", [f"in{ids}"], ["offset"], to=7), N("Add", ["steps", "offset"], ["positions"])]
    return [N("Cast", [f"in{ids}"], ["positions"], to=7)]


@converter("RotaryEmbedding", domain=MS)
def rotary_embedding(ctx):
    """Inputs (x, position_ids, cos_cache, sin_cache), as ONNX's RotaryEmbedding takes (x, cos, sin, ids)."""
    if ctx.attr("is_packed_batching", 0) or ctx.attr("scale", 1.0) != 1.0:
        raise ctx.unsupported("is_packed_batching and scale are not supported")
    attrs = {k: ctx.attr(k) for k in ("interleaved", "num_heads", "rotary_embedding_dim") if ctx.attr(k)}
    nodes = _positions(ctx, 0, 1) + [N("RotaryEmbedding", ["in0", "in2", "in3", "positions"], ["y"], **attrs)]
    return inline(ctx, nodes, ["y"])


@converter("EmbedLayerNormalization", domain=MS)
def embed_layer_norm(ctx):
    """LayerNorm(word[ids] + position[0..S-1 or position_ids] + segment[segment_ids]); mask_index is the number
    of ones per row of the mask (zeros without one)."""
    nodes = [N("Gather", ["in2", "in0"], ["words"])]
    nodes += _positions(ctx, 0, 8) + [N("Gather", ["in3", "positions"], ["pos"]), N("Add", ["words", "pos"], ["e"])]
    if ctx.has(1) and ctx.has(4):
        nodes += [N("Gather", ["in4", "in1"], ["seg"]), N("Add", ["e", "seg"], ["sum"])]
    else:
        nodes.append(N("Identity", ["e"], ["sum"]))
    nodes.append(N("LayerNormalization", ["sum", "in5", given(ctx, 6)], ["y"], axis=-1,
                   epsilon=ctx.attr("epsilon", 1e-12)))
    if ctx.has(7):
        nodes += [N("Cast", ["in7"], ["m"], to=6), const("axis1", np.int64([1])),
                  N("ReduceSum", ["m", "axis1"], ["mask_index"], keepdims=0)]
    else:
        nodes += [N("Shape", ["in0"], ["batch"], end=1),
                  N("ConstantOfShape", ["batch"], ["mask_index"], value=_int32_zero())]
    return inline(ctx, nodes, ["y", "mask_index", "sum"])


def _int32_zero():
    return numpy_helper.from_array(np.zeros(1, np.int32))
