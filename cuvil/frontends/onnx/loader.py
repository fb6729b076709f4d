"""`load_onnx`: read a model (path, bytes or ModelProto), check what Cuvil needs of it, and convert its main
graph into an IR module whose constants are the initializers."""
from __future__ import annotations

import os

import onnx
from google.protobuf.message import DecodeError
from onnx import defs

from ...errors import CuvilError, SerializationError, ShapeError, UnsupportedError, VerificationError
from ...ir.builder import Builder
from ...ir.core import Module
from ...ir.symbolic import SymExpr
from ...ir.types import TensorType
from ...ir.verifier import verify
from . import legacy, mapped
from .context import NeedsValue
from .convert_quant_fused import DOMAIN as QUANT_DOMAIN, fuse_quantized
from .graph import DEFAULT_DOMAINS, MIN_OPSET, GraphConverter, Scope
from .model import OnnxModel, OptionalSpec, SequenceSpec, SpecializingModel, StructuredModel, TensorSpec, flat_specs
from .tensors import OptionalValue, Sequence, Tensor, flatten_value, ir_dtype, sanitize, type_name
from .validate import validate_model


def load_onnx(model, mmap: bool = False) -> OnnxModel:
    """Convert an ONNX model (a file path, its bytes, or an `onnx.ModelProto`) into a callable `OnnxModel`.

    Inputs' `dim_param` sizes become symbolic dims; initializers become module constants without copying into
    private memory (external data files are memory-mapped; a model file's own large initializers are mapped from a
    private copy, or with `mmap` from the file itself: see `read_model`). Errors are Cuvil errors naming the node,
    op type and opset.
    """
    return load_proto(*read_model(model, mmap))


def load_proto(proto, base_dir: str | None = None, structure: tuple | None = None) -> OnnxModel:
    """`load_onnx` of a parsed model; `base_dir` is where its external data files lie. A model with sequence or
    optional inputs is converted per call `structure` (see `StructuredModel`)."""
    if structure is None:
        validate_model(proto)
        if any(v.type.WhichOneof("value") in ("sequence_type", "optional_type") for v in proto.graph.input):
            return StructuredModel(_input_specs(proto), _output_specs(proto),
                                   lambda st: load_proto(proto, base_dir, st))
    try:
        return _convert(proto, base_dir, {}, structure)
    except NeedsValue as e:
        specs = [f for s, st in zip(_input_specs(proto), structure or [None] * len(proto.graph.input))
                 for f in flat_specs(s, st)]
        model = SpecializingModel(specs, _output_specs(proto), lambda values: _convert(proto, base_dir, values,
                                                                                       structure))
        model.add_value_inputs(e)
        return model


def external_files(proto, own: str | None = None) -> list:
    """The files (as the model names them, relative to its folder) where initializers keep their data: contents
    a digest of the model file misses (`own`, the model file's name, is not one: its weights are mapped from it)."""
    return sorted({e.value for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
                   for e in t.external_data if e.key == "location"} - {own})


def _convert(proto, base_dir, values: dict, structure=None) -> OnnxModel:
    try:
        model = convert_model(proto, base_dir, values, structure)
    except CuvilError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, ArithmeticError, RecursionError) as e:
        raise SerializationError(f"malformed ONNX model: {type(e).__name__}: {e}") from None
    if any(isinstance(d, SymExpr) for spec in model.inputs for d in spec.shape):
        model.for_sizes = lambda shapes: _convert(with_input_shapes(proto, model.inputs, shapes), base_dir, values,
                                                  structure)
    return model


def with_input_shapes(proto, specs: list, shapes) -> onnx.ModelProto:
    """A copy of the model whose inputs (`specs`, in order) have these static shapes."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    sizes = {spec.name: shape for spec, shape in zip(specs, shapes)}
    for v in fixed.graph.input:
        if v.name in sizes:
            for d, n in zip(v.type.tensor_type.shape.dim, sizes[v.name]):
                d.Clear()
                d.dim_value = n
    return fixed


def read_model(model, mmap: bool = False) -> tuple:
    """(ModelProto, folder for external data or None). A file's large initializers are not parsed into the message
    (mapped.py): when converted they are copied into private files and mapped from those (snapshot.py), so the
    compile holds the weights about once, not twice, and a rewrite of the model file changes nothing loaded. With
    `mmap` they are mapped from the model file itself, no copy made, but the file must then not be rewritten in place
    while the model lives (a truncated mapping kills the process with SIGBUS), so it is the caller's choice, as
    `torch.load(mmap=True)` is."""
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _parse(bytes(model), "the given bytes"), None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        try:
            data = mapped.read_stripped(path, copied=not mmap)
            if data is None:
                with open(path, "rb") as f:
                    data = f.read()
        except OSError as e:
            raise SerializationError(f"cannot read ONNX model {path!r}: {e.strerror or e}") from None
        return _parse(data, repr(path)), os.path.dirname(os.path.abspath(path))
    raise TypeError(f"load_onnx takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")


def _parse(data: bytes, what: str):
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise SerializationError(f"{what} is not a valid ONNX model (truncated or corrupt protobuf: {e})") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise SerializationError(f"{what} is not an ONNX model: it has no graph or no opset_import")
    return proto


def model_opsets(proto) -> dict:
    opsets = {}
    for o in proto.opset_import:
        opsets["" if o.domain in DEFAULT_DOMAINS else o.domain] = o.version
    newest = defs.onnx_opset_version()
    v = opsets.get("")
    if v is not None and not 1 <= v <= newest:
        raise UnsupportedError(f"the model imports opset {v} of the default ONNX domain; Cuvil reads opsets "
                               f"1 to {newest}")
    return opsets


def convert_model(proto, base_dir: str | None, values: dict, structure=None) -> OnnxModel:
    """The model as IR; `values` maps input names to arrays whose contents the conversion may use (the
    inputs a model is specialized on), the others are known by type only. `structure` (one entry per input)
    gives the element shapes of sequence inputs and the presence of optional ones."""
    opsets = model_opsets(proto)
    if opsets.get("", MIN_OPSET) < MIN_OPSET:
        proto = legacy.upgrade(proto, opsets[""])
        opsets = model_opsets(proto)
    graph, fused = fuse_quantized(proto.graph, base_dir)  # quantized node groups onto the int8 kernels
    if fused:
        opsets = {**opsets, QUANT_DOMAIN: 1}
    specs = _input_specs(proto)
    structure = structure or [None] * len(specs)
    inputs = [f for s, st in zip(specs, structure) for f in flat_specs(s, st)]
    module = Module()
    module.metadata.update({"source": "onnx", "graph": graph.name, "opset": str(opsets.get("", "")),
                            "producer": f"{proto.producer_name} {proto.producer_version}".strip()})
    b = Builder.new_function(module, "main", [TensorType(s.ir_dtype, s.shape) for s in inputs],
                             [sanitize(s.name) for s in inputs])
    conv = GraphConverter(module, b.function, {(f.domain, f.name): f for f in proto.functions}, base_dir)
    scope, args = Scope(), iter(b.args)
    for spec, st in zip(specs, structure):
        scope.define(spec.name, _bound(spec, st, args, values))
    outs = conv.run_graph(graph, scope, b, opsets)
    if not outs:
        raise VerificationError("the ONNX graph has no outputs")
    layout, flat = zip(*[_flattened(o.name, t) for o, t in zip(graph.output, outs)])
    flat = [pair for part in flat for pair in part]
    b.ret(*[conv.materialize(t) for _, t in flat])
    verify(module)
    outputs = [TensorSpec(name, t.elem, tuple(t.type.shape)) for name, t in flat]
    return OnnxModel(module, inputs, outputs, layout=None if all(e is None for e in layout) else list(layout))


def _bound(spec, structure, args, values: dict):
    """A graph input as the converters see it: a Tensor, a Sequence of one Tensor per element, an OptionalValue."""
    deps = frozenset({spec.name})
    if isinstance(spec, TensorSpec):
        return Tensor(value=next(args), known=values.get(spec.name), elem=spec.elem, deps=deps)
    if isinstance(spec, OptionalSpec):
        return OptionalValue(_bound(spec.inner, structure[0], args, values) if structure else None)
    return Sequence([Tensor(value=next(args), elem=spec.elem, deps=deps) for _ in structure], spec.elem)


def _flattened(name: str, out) -> tuple:
    """(the output's layout entry, its (name, Tensor) pairs): a sequence gives one per element, `name[i]`."""
    entry, flat = flatten_value(out)
    whole = entry is None or entry == ("stacked",) or entry[1] is None
    return entry, [(name if whole else f"{name}[{i}]", t) for i, t in enumerate(flat)]


def _input_specs(proto) -> list:
    initialized = {i.name for i in proto.graph.initializer}
    symbols = _Symbols()
    return [_input_spec(v, symbols) for v in proto.graph.input if v.name not in initialized]


def _output_specs(proto) -> list:
    """The outputs as the graph declares them (for a model converted only once input values are known)."""
    symbols, out = _Symbols(), []
    for v in proto.graph.output:
        tt = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else symbols.named(d.dim_param or f"{v.name}_{i}")
                for i, d in enumerate(tt.shape.dim)]
        out.append(TensorSpec(v.name, tt.elem_type, tuple(dims)))
    return out


class _Symbols:
    """dim_param names -> symbolic dims (as identifiers, distinct params kept distinct); fresh ones for
    dims that have neither a value nor a name."""

    def __init__(self):
        self.by_param: dict = {}
        self.used: set = set()

    def named(self, param: str) -> SymExpr:
        if param not in self.by_param:
            self.by_param[param] = self._fresh(sanitize(param, "d"))
        return self.by_param[param]

    def _fresh(self, base: str) -> SymExpr:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return SymExpr.symbol(name)

    def anonymous(self, input_name: str, axis: int) -> SymExpr:
        return self._fresh(f"{sanitize(input_name, 'd')}_{axis}")


def _input_spec(v, symbols: _Symbols, t=None):
    t = t if t is not None else v.type
    kind = t.WhichOneof("value")
    if kind == "sequence_type" and t.sequence_type.elem_type.WhichOneof("value") == "tensor_type":
        tt = t.sequence_type.elem_type.tensor_type
        ir_dtype(tt.elem_type, f"graph input {v.name!r}")
        shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in tt.shape.dim)
        return SequenceSpec(v.name, tt.elem_type, shape if tt.HasField("shape") else None)
    if kind == "optional_type" and t.optional_type.elem_type.WhichOneof("value") in ("tensor_type", "sequence_type"):
        return OptionalSpec(v.name, _input_spec(v, symbols, t.optional_type.elem_type))
    if kind != "tensor_type":
        raise UnsupportedError(f"graph input {v.name!r} is a {kind or 'value without type'}; Cuvil takes tensors, "
                               f"sequences of tensors and optionals of those")
    tt = t.tensor_type
    ir_dtype(tt.elem_type, f"graph input {v.name!r}")
    if not tt.HasField("shape"):
        raise UnsupportedError(f"graph input {v.name!r} ({type_name(tt.elem_type)}) has no shape, not even a rank")
    shape = []
    for axis, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                raise ShapeError(f"graph input {v.name!r} has the negative size {d.dim_value} in dim {axis}")
            shape.append(d.dim_value)
        else:
            shape.append(symbols.named(d.dim_param) if d.dim_param else symbols.anonymous(v.name, axis))
    return TensorSpec(v.name, tt.elem_type, tuple(shape))
