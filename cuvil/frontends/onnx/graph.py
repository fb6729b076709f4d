"""The graph walker: visits ONNX nodes in order, folds what is known at conversion time, dispatches the rest
to the converter table, and expands ops defined as ONNX functions (the schema's or the model's own).

Known values and constants are materialized into the function's top-level body, so they dominate every
region built later (regions are not isolated) and are made at most once.
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import AttributeProto, defs, helper

from ...errors import CuvilError, ShapeError, UnsupportedError, VerificationError
from ...interpreter import interpret
from ...ir.builder import Builder
from ...ir.core import Function, Location, Module
from ...ir.symbolic import SymExpr
from ...ops import registry as op_registry
from . import (convert_contrib, convert_contrib_attention, convert_control, convert_elementwise,  # noqa: F401
               convert_ml, convert_movement, convert_nn, convert_norm, convert_quant, convert_reduce, convert_resize,
               convert_random, convert_rnn, convert_roi, convert_sample, convert_sequence, convert_shape,
               convert_signal, convert_text, convert_training, fold)
from .carriers import CARRIERS, wrap
from .context import NodeContext
from .fold import FOLD_LIMIT
from .registry import CONVERTERS, DOMAIN_CONVERTERS, FOLDERS
from .tensors import NOT_TENSORS, Tensor, ir_dtype, sanitize, tensor_to_array

DEFAULT_DOMAINS = ("", "ai.onnx")
MAX_ELEMENTS = 2 ** 36  # a static result larger than this is a corrupt model, not a real one
# Ops whose results hold only values of their inputs (or zeros), so carried narrow integers need no wrap.
VALUE_PRESERVING = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
                    "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "Where", "Max", "Min", "ReduceMax",
                    "ReduceMin", "TopK", "Dropout", "Scatter", "ScatterElements", "ScatterND", "If", "Loop", "Scan",
                    "Compress", "DepthToSpace", "SpaceToDepth", "Trilu", "ReverseSequence"}
MIN_OPSET = 7


class Scope:
    """ONNX names -> Tensors; subgraphs see their parents' names. A None entry is an omitted optional value."""

    def __init__(self, parent: "Scope | None" = None):
        self.names: dict = {}
        self.parent = parent

    def lookup(self, name: str):
        scope = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        raise KeyError(name)

    def define(self, name: str, tensor) -> None:
        self.names[name] = tensor


class GraphConverter:
    """Converts the nodes of a graph (and of its subgraphs and functions) into one IR function."""

    def __init__(self, module, fn, functions: dict, base_dir: str | None):
        self.module, self.fn, self.functions, self.base_dir = module, fn, functions, base_dir
        self.top = Builder(module, fn)
        self.small_constants: dict = {}  # (dtype, shape, bytes) -> IR value, so each is made once

    # -- known values into IR --------------------------------------------------------------------------
    def materialize(self, t: Tensor, loc=None):
        """The IR value of `t`, made in the top-level body from its known contents the first time."""
        if t.value is None:
            b = Builder(self.module, self.fn, self.fn.body, loc or self.top.loc)
            t.value = _known_to_ir(b, t)
        return t.value

    def constant(self, arr: np.ndarray, loc=None):
        """A constant the converters make (scalars, tables); small ones are shared."""
        if arr.size > 16:
            return self.materialize(Tensor.of_array(arr), loc)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self.small_constants:
            self.small_constants[key] = self.materialize(Tensor.of_array(arr), loc)
        return self.small_constants[key]

    # -- walking ---------------------------------------------------------------------------------------
    def run_graph(self, graph, scope: Scope, b: Builder, opsets: dict, prefix: str = "") -> list:
        """Convert a (sub)graph's initializers and nodes into `scope`; returns its outputs as Tensors."""
        for init in graph.initializer:
            scope.define(init.name, Tensor.of_array(tensor_to_array(init, self.base_dir), init.data_type, init.name))
        for node in graph.node:
            self.run_node(node, scope, b, opsets, prefix)
        return [self.lookup(scope, o.name, f"graph output {o.name!r}") for o in graph.output]

    def lookup(self, scope: Scope, name: str, user: str):
        try:
            return scope.lookup(name)
        except KeyError:
            raise VerificationError(f"{user} reads {name!r}, which no earlier node, graph input or initializer "
                                    f"defines") from None

    def run_node(self, node, scope: Scope, b: Builder, opsets: dict, prefix: str = "") -> None:
        name = prefix + (node.name or node.op_type)
        loc = Location(node=f"onnx:{name}")
        where = f"ONNX {node.op_type} node {name!r}"
        inputs = [self.lookup(scope, n, where) if n else None for n in node.input]
        opset = _opset_of(node, opsets, self.functions, where)
        ctx = NodeContext(self, node, inputs, opset, Builder(self.module, self.fn, b.region, loc), scope, opsets,
                          name)
        try:
            outs = self.dispatch(ctx)
        except CuvilError as e:
            if e.message.startswith("ONNX "):
                raise
            raise type(e)(f"{ctx.where}: {e.message}", loc) from None
        except (ValueError, TypeError, IndexError, KeyError, ArithmeticError, AttributeError, RuntimeError) as e:
            raise ShapeError(f"{ctx.where}: cannot convert: {type(e).__name__}: {e}", loc) from None
        self.bind_outputs(ctx, outs)

    def dispatch(self, ctx: NodeContext) -> list:
        if ctx.node.domain in DEFAULT_DOMAINS:
            _check_against_schema(ctx)
        folder = FOLDERS.get(ctx.op_type) if ctx.node.domain in DEFAULT_DOMAINS else None
        out = folder(ctx) if folder is not None else None
        out = out if out is not None else self.fold_concrete(ctx)
        if out is not None:
            return out
        key = (ctx.node.domain, ctx.op_type)
        if key in self.functions:
            return self.inline(ctx, self.functions[key], dict(self.functions_opsets(key)))
        conv = _converter_of(ctx.node)
        if conv is not None:
            return conv(ctx)
        return self.expand_schema_function(ctx)

    def fold_concrete(self, ctx: NodeContext):
        """Evaluate a node whose inputs are all small known arrays: convert it into a scratch module and run
        the interpreter, so folding computes exactly what the IR would. None if it does not apply."""
        conv = _converter_of(ctx.node)
        present = [t for t in ctx.inputs if t is not None]
        if conv is None or not present or any(not isinstance(t, Tensor) or not t.is_concrete or
                                              t.known.size > FOLD_LIMIT for t in present) \
                or any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in ctx.node.attribute):
            return None
        scratch = Module()
        fn = scratch.add_function(Function("fold", []))
        sub = GraphConverter(scratch, fn, self.functions, self.base_dir)
        inputs = [Tensor(known=t.known, elem=t.elem) if t is not None else None for t in ctx.inputs]
        sctx = NodeContext(sub, ctx.node, inputs, ctx.opset, Builder(scratch, fn, fn.body, ctx.b.loc), Scope(),
                           ctx.opsets, ctx.name)
        outs = conv(sctx)
        if any(isinstance(o, NOT_TENSORS) for o in outs):
            return None
        outs = [o if isinstance(o, Tensor) or o is None else Tensor(value=o) for o in outs]
        if any(o is not None and o.value is not None and not (o.type.is_static and o.type.numel <= FOLD_LIMIT)
               for o in outs):
            return None
        live = [o for o in outs if o is not None and o.known is None]
        Builder(scratch, fn).ret(*[o.value for o in live])
        arrays = iter(interpret(scratch, []))
        return [o if o is None or o.known is not None else Tensor(known=next(arrays), elem=o.elem) for o in outs]

    def functions_opsets(self, key) -> list:
        return [(o.domain, o.version) for o in self.functions[key].opset_import]

    def bind_outputs(self, ctx: NodeContext, outs: list) -> None:
        outs = list(outs) + [None] * (len(ctx.node.output) - len(outs))
        deps = frozenset().union(*(t.deps for t in ctx.inputs if isinstance(t, Tensor) and t.known is None))
        for i, (name, out) in enumerate(zip(ctx.node.output, outs)):
            if not name:
                continue
            if out is None:
                raise ctx.unsupported(f"does not produce its optional output {name!r}")
            if isinstance(out, NOT_TENSORS):
                ctx.scope.define(name, out)
                continue
            t = out if isinstance(out, Tensor) else self.carried(ctx, i, out, deps)
            if t.type.is_static and t.type.numel > MAX_ELEMENTS:
                raise ctx.error(f"output {name!r} would have {t.type.numel} elements ({t.type}), more than any memory")
            t.deps = t.deps or deps
            if t.value is not None and t.value.name is None:
                t.value.name = sanitize(name)
            ctx.scope.define(name, t)

    def carried(self, ctx: NodeContext, i: int, value, deps) -> Tensor:
        """The Tensor for output i. With a carried input type (uint16, int4...), the ONNX type follows the
        schema's type constraints, and integers are wrapped back into the narrow type's range."""
        if not any(t is not None and t.elem in CARRIERS for t in ctx.inputs):
            return Tensor(value=value, deps=deps)
        elem = _schema_elem(ctx, i)
        if elem is None or ir_dtype(elem) is not value.type.dtype:
            return Tensor(value=value, deps=deps)
        if ctx.op_type not in VALUE_PRESERVING:
            value = wrap(ctx, value, elem)
        return Tensor(value=value, elem=elem, deps=deps)

    # -- subgraphs and functions -----------------------------------------------------------------------
    def run_subgraph(self, ctx: NodeContext, graph, b: Builder, inputs: list) -> list:
        """Convert a subgraph attribute (If/Loop/Scan body) into the region of `b`, with its inputs bound."""
        if len(graph.input) != len(inputs):
            raise ctx.error(f"subgraph {graph.name!r} takes {len(graph.input)} inputs, the op passes {len(inputs)}")
        scope = Scope(ctx.scope)
        for proto, t in zip(graph.input, inputs):
            scope.define(proto.name, t)
        return self.run_graph(graph, scope, b, ctx.opsets, prefix=f"{ctx.name}/")

    def inline(self, ctx: NodeContext, fn, opsets: dict) -> list:
        """Expand a node whose op is an ONNX function: its body, with attribute references resolved."""
        scope = Scope()
        for i, name in enumerate(fn.input):
            scope.define(name, ctx.inputs[i] if ctx.has(i) else None)
        defaults = {a.name: a for a in fn.attribute_proto}
        given = {a.name: a for a in ctx.node.attribute}
        opsets = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}
        opsets.setdefault("", ctx.opsets.get(""))
        for node in fn.node:
            self.run_node(_bind_attrs(node, given, defaults), scope, ctx.b, opsets, prefix=f"{ctx.name}/")
        wanted = list(ctx.node.output) + [""] * (len(fn.output) - len(ctx.node.output))
        return [self.lookup(scope, o, ctx.where) if o and w else None for o, w in zip(fn.output, wanted)]

    def expand_schema_function(self, ctx: NodeContext) -> list:
        """Ops the ONNX spec defines as a function of other ops (LayerNormalization, Attention, ...)."""
        try:
            schema = defs.get_schema(ctx.op_type, ctx.opset, ctx.node.domain)
        except defs.SchemaError:
            domain = ctx.node.domain
            if domain not in DEFAULT_DOMAINS:  # e.g. ONNX Runtime's com.microsoft ops (QLinearConcat, ...)
                raise ctx.unsupported(f"is an op of domain {domain!r}, which has no schema or converter here: "
                                      f"Cuvil converts the standard ONNX ops and functions the model defines") from None
            raise ctx.unsupported("is not an op of this opset") from None
        fn = _schema_function(ctx, schema)
        if fn is None:
            raise ctx.unsupported("is not supported by Cuvil")
        node = _with_defaults(ctx.node, schema)
        ctx = NodeContext(self, node, ctx.inputs, ctx.opset, ctx.b, ctx.scope, ctx.opsets, ctx.name)
        return self.inline(ctx, fn, {o.domain: o.version for o in fn.opset_import})


def _converter_of(node):
    if node.domain in DEFAULT_DOMAINS:
        return CONVERTERS.get(node.op_type)
    found = DOMAIN_CONVERTERS.get((node.domain, node.op_type))
    if found is None:
        opdef = op_registry.bridged_op("onnx_op", f"{node.domain}::{node.op_type}")
        return functools.partial(_bridged, opdef) if opdef is not None else None
    return found


def _bridged(opdef, ctx: NodeContext) -> list:
    """A node of a custom domain as the op a user declared with `register_op(..., onnx_op="domain::OpType")`: its
    inputs are the operands (broadcast together for an elementwise op), its attributes those of the same name."""
    values = [ctx.x(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    if "elementwise" in opdef.traits:
        values = ctx.broadcast(*values)
    attrs = {name: ctx.attr(name) for name in opdef.attrs if ctx.has_attr(name)}
    out = ctx.b.emit(opdef.name, *values, **attrs)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _schema_elem(ctx: NodeContext, i: int):
    """The ONNX element type of output i: that of the first input bound to the same type variable."""
    schema = _schema(ctx.op_type, ctx.opset)
    if schema is None or not schema.outputs:
        return None
    var = schema.outputs[min(i, len(schema.outputs) - 1)].type_str
    for j, t in enumerate(ctx.inputs):
        formal = schema.inputs[min(j, len(schema.inputs) - 1)] if schema.inputs else None
        if t is not None and formal is not None and formal.type_str == var:
            return t.elem
    return None


@functools.lru_cache(maxsize=None)
def _schema(op_type: str, opset: int):
    try:
        return defs.get_schema(op_type, opset, "")
    except defs.SchemaError:
        return None


def _check_against_schema(ctx: NodeContext) -> None:
    """The node is an op of its opset, with an input and output count and the attributes the spec requires."""
    schema = _schema(ctx.op_type, ctx.opset)
    if schema is None:
        raise ctx.unsupported(f"{ctx.op_type} is not an op of the default domain at opset {ctx.opset}")
    n_in, n_out = len(ctx.node.input), len(ctx.node.output)
    if not schema.min_input <= n_in <= schema.max_input or not schema.min_output <= n_out <= schema.max_output:
        raise ctx.error(f"has {n_in} inputs and {n_out} outputs; the spec allows {schema.min_input} to "
                        f"{schema.max_input} inputs and {schema.min_output} to {schema.max_output} outputs")
    missing = sorted(name for name, a in schema.attributes.items() if a.required and not ctx.has_attr(name))
    if missing:
        raise ctx.error(f"lacks the required attribute(s) {', '.join(missing)}")


def _opset_of(node, opsets: dict, functions: dict, where: str) -> int:
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    if domain in opsets:
        return opsets[domain]
    if (node.domain, node.op_type) in functions:
        return 1
    raise UnsupportedError(f"{where} is in domain {node.domain!r}, which the model does not import")


def _bind_attrs(node, given: dict, defaults: dict):
    """A copy of a function body node with attribute references (ref_attr_name) replaced by the caller's
    attributes or the function's defaults; references to neither are dropped (the op's default applies)."""
    if not any(a.ref_attr_name for a in node.attribute):
        return node
    out = onnx.NodeProto()
    out.CopyFrom(node)
    del out.attribute[:]
    for a in node.attribute:
        if not a.ref_attr_name:
            out.attribute.append(a)
            continue
        src = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
        if src is not None:
            new = out.attribute.add()
            new.CopyFrom(src)
            new.name = a.name
    return out


def _schema_function(ctx: NodeContext, schema):
    """The schema's function body for the node's opset: the newest version not above it."""
    plain = [v for v in schema.function_opset_versions if v <= ctx.opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= ctx.opset]
    fn = onnx.FunctionProto()
    if plain and (not dependent or max(plain) >= max(dependent)):
        fn.ParseFromString(schema.get_function_with_opset_version(max(plain)))
        return fn
    if not dependent:
        return None
    node = _with_defaults(ctx.node, schema)
    types = [_type_proto(ctx.inputs[i]) if ctx.has(i) else onnx.TypeProto() for i in range(len(ctx.inputs))]
    data = schema.get_context_dependent_function_with_opset_version(
        max(dependent), node.SerializeToString(), [t.SerializeToString() for t in types])
    fn.ParseFromString(data)
    return fn


def _with_defaults(node, schema):
    """A copy of `node` with the schema's default for every attribute it leaves out."""
    out = onnx.NodeProto()
    out.CopyFrom(node)
    have = {a.name for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in have and spec.default_value.name:
            out.attribute.append(spec.default_value)
    return out


def _type_proto(t: Tensor):
    shape = [d if isinstance(d, int) else str(d) for d in t.type.shape]
    return helper.make_tensor_type_proto(t.elem, shape)


def _known_to_ir(b: Builder, t: Tensor):
    """A constant for concrete contents; shape arithmetic on symbolic sizes becomes `dim_size` ops."""
    k = t.known
    if k.dtype != object:
        return b.constant(np.asarray(k, t.dtype.numpy), sanitize(t.name, "c"))
    parts, run = [], []

    def flush():
        if run:
            parts.append(b.constant(np.asarray(run, t.dtype.numpy), "c"))
            run.clear()
    for e in k.reshape(-1):
        if isinstance(e, SymExpr):
            flush()
            parts.append(b.reshape(b.dim_size(dim=[e], dtype=t.dtype), shape=(1,)))
        else:
            run.append(e)
    flush()
    flat = parts[0] if len(parts) == 1 else b.concat(*parts, axis=0)
    return b.reshape(flat, shape=k.shape)
