"""Strict validation before conversion: refuse what ONNX Runtime refuses, with Cuvil errors naming the node and
attribute. The ONNX checker (graph structure, SSA names, attribute types, input counts) and ONNX's strict shape
inference (declared types and shapes against inferred ones) run on a light copy of the model; Cuvil's own checks
cover what ORT refuses beyond them: names that are not text, initializers' byte counts (packed 4-bit types too),
`kernel_shape` against the weights, flag attributes other than 0 or 1, pool pads not below the kernel, and
inputs or outputs of element type UNDEFINED."""
from __future__ import annotations

import functools
import math
import re

import onnx
from onnx import AttributeProto, TensorProto, checker, defs, helper, shape_inference
from google.protobuf.descriptor import FieldDescriptor

from ...errors import SerializationError, ShapeError, VerificationError
from .carriers import CARRIERS
from .graph import DEFAULT_DOMAINS, MIN_OPSET

LIFT_ELEMENTS = 1024  # larger initializers are checked by type and shape only (their data is never a shape)
SCHEMA_DOMAINS = (*DEFAULT_DOMAINS, "ai.onnx.ml", "ai.onnx.preview.training")  # domains ONNX has schemas for
# Integer attributes the spec defines as 0 or 1; ORT reads any other value as one of them, Cuvil may read another.
FLAGS = {"keepdims", "noop_with_empty_axes", "transA", "transB", "ceil_mode", "count_include_pad", "select_last_index",
         "exclusive", "reverse", "sorted", "largest", "upper", "center_point_box", "detect_negative", "detect_positive",
         "storage_order", "onesided", "periodic", "fmod", "exclude_outside", "is_causal", "align_corners", "layout",
         "new_axis", "training_mode", "inverse", "allowzero", "linear_before_reset", "saturate", "input_forget"}
POOL_OPS = {"MaxPool", "AveragePool", "LpPool"}
_COMPLEX = (TensorProto.COMPLEX64, TensorProto.COMPLEX128)  # two typed-data entries per element
CONV_OPS = {"Conv": 1, "ConvTranspose": 1, "ConvInteger": 1, "QLinearConv": 3, "DeformConv": 1}  # op -> W's input
_NODE_CONTEXT = re.compile(r"\s*==> Context: Bad node spec for node\. Name: (.*?) OpType: (\S+)\s*$", re.S)
_INFERENCE_NODE = re.compile(r"\(op_type:(\w+)(?:, node name: ([^)]*))?\)")
_NOT_DEFINED = re.compile(r"input '(.*?)' of node:\s*name: (.*?) OpType: (\S+)\s+is not output of any previous nodes",
                          re.S)


def validate_model(proto: onnx.ModelProto) -> None:
    """Raise a Cuvil error for a model ONNX Runtime would refuse. Models whose opsets or ops Cuvil refuses
    anyway are left to the converter, whose message names the op and opset."""
    _check_text(proto, "the model")
    opsets = _opsets(proto)
    if opsets is None:
        return
    _check_declared_types(proto.graph)
    for graph in _graphs(proto.graph):
        _check_initializer_sizes(graph)
        _check_attributes(graph, opsets)
    if any(_lacks_schema(node, opsets) for graph in _graphs(proto.graph) for node in graph.node):
        return
    light = _light_model(proto)
    _run_checker(light, opsets)
    shapes = _inferred_shapes(light, opsets)
    for graph in _graphs(proto.graph):
        _check_kernels(graph, shapes, opsets)


# -- names are text --------------------------------------------------------------------------------------------
def _check_text(msg, where: str) -> None:
    """Every string field holds text: protobuf hands a name with invalid UTF-8 over as bytes. Only string and
    message fields are read (reading a tensor's raw_data would copy it)."""
    for field in msg.DESCRIPTOR.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            value = getattr(msg, field.name)
            for s in (value if field.is_repeated else (value,)):
                if not isinstance(s, str):
                    raise SerializationError(f"{where}: field {field.name!r} holds {s[:40]!r}, which is not UTF-8 "
                                             f"text (a corrupt file)")
        elif field.type == FieldDescriptor.TYPE_MESSAGE and (field.is_repeated or msg.HasField(field.name)):
            value = getattr(msg, field.name)
            inner = f"{where}.{field.name}"
            for m in (value if field.is_repeated else (value,)):
                _check_text(m, _named(m, inner))


def _named(msg, where: str) -> str:
    name = getattr(msg, "name", "")
    return f"{where}[{name!r}]" if isinstance(name, str) and name else where


# -- what ONNX itself checks ------------------------------------------------------------------------------------
def _opsets(proto) -> dict | None:
    opsets = {}
    for o in proto.opset_import:
        opsets["" if o.domain in DEFAULT_DOMAINS else o.domain] = o.version
    v = opsets.get("")
    return opsets if v is not None and MIN_OPSET <= v <= defs.onnx_opset_version() else None


def _lacks_schema(node, opsets: dict) -> bool:
    """A node of an ONNX domain with no schema at its opset (the converter names it as unsupported)."""
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    if domain not in opsets:
        return True  # the converter names the domain the model does not import
    return domain in SCHEMA_DOMAINS and not _has_schema(node.op_type, opsets[domain], domain)


@functools.lru_cache(maxsize=None)
def _has_schema(op_type: str, version: int, domain: str) -> bool:
    try:
        defs.get_schema(op_type, version, domain)
    except defs.SchemaError:
        return False
    return True


def _light_model(proto) -> onnx.ModelProto:
    """The model without its large or external initializers' data: those become graph inputs of the same type
    and shape (the loader reads and checks their data, resolving external files next to the model)."""
    light = onnx.ModelProto()
    _copy_fields(proto, light, skip=("graph",))
    g, src = light.graph, proto.graph
    _copy_fields(src, g, skip=("initializer",))
    declared = {v.name for v in src.input}
    for t in src.initializer:
        kept = math.prod(t.dims) <= LIFT_ELEMENTS and t.data_location != TensorProto.EXTERNAL
        if kept:
            g.initializer.append(t)
        # IR versions before 4 want every initializer among the inputs; ONNX Runtime does not ask it
        if t.name not in declared and (not kept or light.ir_version < 4):
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return light


def _copy_fields(src, dst, skip: tuple) -> None:
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        if field.is_repeated:
            getattr(dst, field.name).extend(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def _run_checker(light, opsets: dict) -> None:
    """ONNX's graph checker (SSA names, topological order, nodes against their schemas, attribute types)."""
    ctx = checker.C.CheckerContext()
    ctx.ir_version = light.ir_version
    ctx.opset_imports = {("" if d in DEFAULT_DOMAINS else d): v for d, v in opsets.items()}
    graph = onnx.GraphProto()
    graph.CopyFrom(light.graph)
    for v in (*graph.input, *graph.output, *graph.value_info):  # ORT takes declared values without a shape
        if v.type.WhichOneof("value") == "tensor_type" and not v.type.tensor_type.HasField("shape"):
            v.type.tensor_type.shape.SetInParent()
    for values in (graph.output, graph.value_info):  # and outputs with no type at all (it infers them)
        untyped = [v for v in values if not v.HasField("type")]
        for v in untyped:
            values.remove(v)
    try:
        checker.C.check_graph(graph.SerializeToString(), ctx, checker.C.LexicalScopeContext())
    except checker.ValidationError as e:
        raise VerificationError(_checker_message(str(e))) from None


def _checker_message(text: str) -> str:
    m = _NOT_DEFINED.search(text)
    if m:
        return (f"ONNX {m[3]} node {m[2].strip() or m[3]!r} reads {m[1]!r}, which no earlier node, graph input or "
                f"initializer defines")
    m = _NODE_CONTEXT.search(text)
    head = f"ONNX {m[2]} node {m[1] or m[2]!r}: " if m else ""
    body = text[:m.start()] if m else text
    return f"{head}the ONNX checker refuses the model: {' '.join(body.split())}"


def _inferred_shapes(light, opsets: dict) -> dict:
    """Value name -> shape (ints and None), from ONNX's strict shape inference, which also refuses declared
    types and shapes that contradict the inferred ones."""
    try:
        inferred = shape_inference.infer_shapes(light, check_type=True, strict_mode=True)
    except (shape_inference.InferenceError, checker.ValidationError, ValueError) as e:
        raise ShapeError(_inference_message(" ".join(str(e).split()), opsets)) from None
    g = inferred.graph
    shapes = {v.name: _shape_of(v.type) for v in (*g.input, *g.value_info, *g.output)}
    return {name: shape for name, shape in shapes.items() if shape is not None}


def _inference_message(text: str, opsets: dict) -> str:
    """ONNX's message, led by the innermost node it names (nodes in subgraphs are named inside their parent)."""
    nodes = _INFERENCE_NODE.findall(text)
    if not nodes:
        return f"ONNX shape inference refuses the model: {text}"
    op, name = nodes[-1]
    detail = text[text.rindex("): ") + 3:] if "): " in text else text
    return f"ONNX {op} node {name or op!r} (opset {opsets['']}): ONNX shape inference refuses it: {detail}"


def _shape_of(t) -> tuple | None:
    if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim)


# -- what ONNX Runtime checks beyond ONNX -----------------------------------------------------------------------
def _graphs(graph):
    """The graph and every subgraph in its nodes' attributes."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else a.graphs if a.type == AttributeProto.GRAPHS
                        else ()):
                yield from _graphs(sub)


def _check_initializer_sizes(graph) -> None:
    """Initializers hold exactly their elements (4-bit types packed two to a byte): ONNX's checker lets longer
    data and short packed data through, ONNX's helper then reads it silently or fails with a bare NumPy error."""
    for t in graph.initializer:
        if t.data_location == TensorProto.EXTERNAL or t.data_type == TensorProto.STRING:
            continue
        if t.data_type not in helper.get_all_tensor_dtypes() or t.data_type == TensorProto.UNDEFINED:
            raise SerializationError(f"tensor {t.name!r} has the unknown element type {t.data_type}")
        want, have, unit = _element_counts(t)
        if have != want:
            raise SerializationError(f"tensor {t.name!r} of shape {list(t.dims)} needs {want} {unit}, has {have}")


def _element_counts(t) -> tuple:
    """(what the tensor's data should hold, what it holds, the unit) for its raw or typed data."""
    numel = max(math.prod(t.dims), 0)
    bits = CARRIERS[t.data_type].bits if t.data_type in CARRIERS else 0
    packed = -(-numel * bits // 8) if bits in (2, 4) else None
    if t.HasField("raw_data"):
        want = packed if packed is not None else numel * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        return want, len(t.raw_data), "bytes"
    field = helper.tensor_dtype_to_field(t.data_type)
    want = packed if packed is not None else numel * (2 if t.data_type in _COMPLEX else 1)
    return want, len(getattr(t, field)), f"{field} entries"


def _check_kernels(graph, shapes: dict, opsets: dict) -> None:
    """A convolution's kernel_shape equals its weight's spatial dims (ORT refuses a mismatch; ONNX does not)."""
    known = {**shapes, **{t.name: tuple(t.dims) for t in graph.initializer}}
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in CONV_OPS:
            continue
        attr = next((a for a in node.attribute if a.name == "kernel_shape"), None)
        w = node.input[CONV_OPS[node.op_type]] if len(node.input) > CONV_OPS[node.op_type] else ""
        if attr is None or w not in known:
            continue
        kernel, spatial = list(attr.ints), known[w][2:]
        where = f"ONNX {node.op_type} node {node.name or node.op_type!r} (opset {opsets['']})"
        if len(kernel) != len(spatial) or any(s is not None and k != s for k, s in zip(kernel, spatial)):
            shape = [d if d is not None else "?" for d in known[w]]
            raise ShapeError(f"{where}: attribute kernel_shape {kernel} contradicts the weight {w!r} of shape {shape}"
                             f" (its kernel is {shape[2:]})")


def _check_attributes(graph, opsets: dict) -> None:
    """Attribute values ORT refuses and ONNX lets through: flags other than 0 or 1, pool pads not below the kernel."""
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        where = f"ONNX {node.op_type} node {node.name or node.op_type!r} (opset {opsets['']})"
        attrs = {a.name: a for a in node.attribute}
        for a in attrs.values():
            if a.name in FLAGS and a.type == AttributeProto.INT and a.i not in (0, 1):
                raise VerificationError(f"{where}: attribute {a.name} must be 0 or 1, got {a.i}")
        if node.op_type in POOL_OPS and "pads" in attrs and "kernel_shape" in attrs:
            kernel, pads = list(attrs["kernel_shape"].ints), list(attrs["pads"].ints)
            if len(pads) == 2 * len(kernel) and any(p >= kernel[i % len(kernel)] for i, p in enumerate(pads)):
                raise VerificationError(f"{where}: attribute pads {pads} must be smaller than kernel_shape {kernel} "
                                        f"on every side")


def _check_declared_types(graph) -> None:
    """The model's inputs and outputs declare an element type (ORT refuses UNDEFINED)."""
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for v in values:
            if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type == TensorProto.UNDEFINED:
                raise VerificationError(f"graph {kind} {v.name!r} has the element type UNDEFINED")
