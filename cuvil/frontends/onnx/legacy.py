"""Models of opsets 1 to 6, upgraded to opset 7 on load (the oldest Cuvil's converters read).

ONNX's version converter does most of it (`consumed_inputs`, `is_test`, old BatchNormalization, Reshape's
`shape` attribute, Upsample...). Where it has no adapter, Cuvil rewrites the node into its opset-7 form first
and parks it in a private domain the converter leaves alone, then moves it back: `broadcast` with `axis`
(numpy broadcasting after an Unsqueeze), Gemm's `broadcast`, Cast's string `to`, Pad's `paddings`, Split's
second input, LpPool's float `p`, Tile's (tiles, axis) inputs and the recurrent ops' `output_sequence`.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference, version_converter

from ...errors import UnsupportedError

TARGET_OPSET = 7
PARKED = "cuvil.legacy"  # nodes already in their opset-7 form wait here while the version converter runs
BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"}
DROPPED = {"consumed_inputs"}
# Ops whose output has the rank of their first input, for ranks shape inference misses (after a Cast-1).
SAME_RANK = {"Cast", "Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt", "Pad", "Dropout", "Identity",
             "BatchNormalization", "InstanceNormalization", "LeakyRelu", "Elu", "Selu", "Clip", "Floor", "Ceil",
             "Reciprocal", "Softmax", "LogSoftmax", "HardSigmoid", "Softplus", "Softsign", "LRN", "PRelu", "Not"}


def upgrade(proto: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """A copy of `proto` (default-domain opset `opset` < 7) at opset 7."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    _declare_initializers(model.graph)
    ranks = _ranks(model)
    consts = {i.name: i for i in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        nodes.extend(_rewrite(node, opset, ranks, consts, model.graph))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    _declare_initializers(model.graph)
    model.opset_import.append(helper.make_opsetid(PARKED, 1))
    try:
        model = version_converter.convert_version(model, TARGET_OPSET)
    except (RuntimeError, ValueError) as e:
        raise UnsupportedError(f"cannot upgrade the model from opset {opset} to {TARGET_OPSET}: "
                               f"{str(e).splitlines()[0]}") from None
    for node in model.graph.node:
        if node.domain == PARKED:
            node.domain = ""
    kept = [o for o in model.opset_import if o.domain != PARKED]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    return model


def _declare_initializers(graph) -> None:
    """IR versions before 4 list every initializer among the graph inputs; the version converter relies on it."""
    declared = {v.name for v in graph.input}
    for init in graph.initializer:
        if init.name not in declared:
            graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))


def _ranks(model) -> dict:
    """Value name -> rank, where inputs, initializers or shape inference know it."""
    try:
        inferred = shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001  (old models often fail inference; then only declared ranks are known)
        inferred = model.graph
    ranks = {i.name: len(i.dims) for i in model.graph.initializer}
    for v in list(inferred.input) + list(inferred.value_info) + list(inferred.output):
        tt = v.type.tensor_type
        if tt.HasField("shape"):
            ranks[v.name] = len(tt.shape.dim)
    for node in model.graph.node:
        known = [ranks[i] for i in node.input[:1 if node.op_type in SAME_RANK else None] if i in ranks]
        if node.output and node.output[0] not in ranks and known and (node.op_type in SAME_RANK | BROADCASTING):
            ranks[node.output[0]] = max(known)
    return ranks


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _rebuilt(node, attrs: dict, inputs=None, parked: bool = True):
    """The node with these attributes and inputs; `parked` when it is already in its opset-7 form."""
    if not parked and inputs is None and set(attrs) == {a.name for a in node.attribute}:
        return node
    out = onnx.NodeProto()
    out.CopyFrom(node)
    del out.attribute[:]
    given = {a.name: a for a in node.attribute}
    for k, v in attrs.items():
        same = k in given and helper.get_attribute_value(given[k]) == v
        out.attribute.append(given[k] if same else helper.make_attribute(k, v))
    if inputs is not None:
        del out.input[:]
        out.input.extend(inputs)
    if parked:
        out.domain = PARKED
    return out


def _rewrite(node, opset: int, ranks: dict, consts: dict, graph) -> list:
    """The node as one or more nodes the version converter can take to opset 7."""
    if node.domain not in ("", "ai.onnx"):
        return [node]
    attrs = {k: v for k, v in _attrs(node).items() if k not in DROPPED}
    fix = _FIXES.get(node.op_type)
    if fix is not None:
        return fix(node, attrs, opset, ranks, consts, graph)
    return [_rebuilt(node, attrs, parked=False)]


def _broadcast(node, attrs, opset, ranks, consts, graph):
    """`broadcast=1` with `axis`: B lines up with A's dims from `axis` on; an Unsqueeze of B's trailing dims
    makes that numpy broadcasting, which opset 7 does with no attribute (the converter's adapter would need every
    input's shape)."""
    axis = attrs.pop("axis", None)
    lifted = bool(attrs.pop("broadcast", 0)) and axis is not None and len(node.input) >= 2
    if not lifted:
        return [_rebuilt(node, attrs)]
    a, b = node.input[0], node.input[1]
    if a not in ranks or b not in ranks:
        raise UnsupportedError(f"ONNX {node.op_type} node {node.name!r} (opset {opset}) broadcasts along axis "
                               f"{axis}, but the ranks of its inputs are unknown")
    axis = axis + ranks[a] if axis < 0 else axis
    trailing = ranks[a] - axis - ranks[b]
    if trailing <= 0:
        return [_rebuilt(node, attrs)]
    unsqueezed = f"{b}__legacy_{node.output[0]}"
    unsqueeze = helper.make_node("Unsqueeze", [b], [unsqueezed], axes=list(range(ranks[b], ranks[b] + trailing)))
    ranks[unsqueezed] = ranks[b] + trailing
    return [unsqueeze, _rebuilt(node, attrs, [a, unsqueezed, *node.input[2:]])]


def _gemm(node, attrs, opset, ranks, consts, graph):
    """Gemm before opset 7 broadcasts C only with `broadcast=1`; opset 7 always does (unidirectionally)."""
    attrs.pop("broadcast", None)
    return [_rebuilt(node, attrs)]


def _cast(node, attrs, opset, ranks, consts, graph):
    to = attrs.get("to")
    if isinstance(to, bytes):
        name = to.decode().upper()
        if name not in onnx.TensorProto.DataType.keys():
            raise UnsupportedError(f"ONNX Cast node {node.name!r} (opset {opset}) casts to the unknown type {name!r}")
        attrs["to"] = onnx.TensorProto.DataType.Value(name)
    return [_rebuilt(node, attrs)]


def _pad(node, attrs, opset, ranks, consts, graph):
    if opset >= 2:
        return [_rebuilt(node, attrs, parked=False)]
    if "paddings" in attrs:
        attrs["pads"] = attrs.pop("paddings")
    return [_rebuilt(node, attrs)]


def _split(node, attrs, opset, ranks, consts, graph):
    if opset >= 2:
        return [_rebuilt(node, attrs, parked=False)]
    if len(node.input) > 1 and node.input[1]:
        if node.input[1] not in consts:
            raise UnsupportedError(f"ONNX Split node {node.name!r} (opset 1) takes its split sizes from a computed "
                                   f"input; Cuvil needs them constant")
        attrs["split"] = [int(v) for v in numpy_helper.to_array(consts[node.input[1]]).reshape(-1)]
    return [_rebuilt(node, attrs, node.input[:1])]


def _lp_pool(node, attrs, opset, ranks, consts, graph):
    if opset >= 2:
        return [_rebuilt(node, attrs, parked=False)]
    attrs["p"] = int(attrs.get("p", 2.0))
    return [_rebuilt(node, attrs)]


def _tile(node, attrs, opset, ranks, consts, graph):
    """Tile-1 repeats `tiles` times along `axis` (both inputs); Tile-6 takes one repeat count per dim."""
    if opset >= 6:
        return [_rebuilt(node, attrs, parked=False)]
    x, tiles, axis = node.input[:3]
    if tiles not in consts or axis not in consts or x not in ranks:
        raise UnsupportedError(f"ONNX Tile node {node.name!r} (opset {opset}) needs constant tiles and axis and an "
                               f"input of known rank")
    repeats = np.ones(ranks[x], np.int64)
    repeats[int(numpy_helper.to_array(consts[axis]).reshape(-1)[0])] = int(
        numpy_helper.to_array(consts[tiles]).reshape(-1)[0])
    name = f"{node.output[0]}__legacy_repeats"
    graph.initializer.append(numpy_helper.from_array(repeats, name))
    return [_rebuilt(node, attrs, [x, name])]


def _recurrent(node, attrs, opset, ranks, consts, graph):
    """RNN, GRU and LSTM before opset 7 differ from it only by `output_sequence` (Y is written when asked for)."""
    attrs.pop("output_sequence", None)
    return [_rebuilt(node, attrs)]


_FIXES = {**{op: _broadcast for op in BROADCASTING}, "Cast": _cast, "Pad": _pad, "Split": _split,
          "LpPool": _lp_pool, "GlobalLpPool": _lp_pool, "Tile": _tile, "GRU": _recurrent,
          "LSTM": _recurrent, "RNN": _recurrent, "Gemm": _gemm}
