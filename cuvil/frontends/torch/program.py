"""The exported-program walker: an ATen-level `torch.export.ExportedProgram` becomes a Cuvil IR module.

Parameters, buffers and lifted constants become module constants that share memory with the tensors;
user inputs become the function's arguments (SymInt sizes become symbolic dims); every other node goes
through the converter table in `context.CONVERTERS`, with a location naming the FX node and, where the
stack trace has one, the user's source line. Higher-order ops (`cond`, `while_loop`) convert their
subgraphs into regions with the same walker.
"""
from __future__ import annotations

import os
import re
import torch
from torch.export.graph_signature import InputKind, OutputKind

from ...errors import UnsupportedError
from ...ir.builder import Builder
from ...ir.core import Location, Module, Value
from ...ir.dynamic import data_sizes
from ...ir.symbolic import plain_symbol, sym
from ...ir.types import TensorType
from . import convert_control, convert_elementwise, convert_movement, convert_nn, convert_reduce  # noqa: F401
from . import convert_complex, convert_linalg, convert_search  # noqa: F401
from .context import EFFECT_TOKEN, Ctx, lookup, source_text, to_dtype
from .signature import Signature, tensor_to_numpy  # noqa: F401 (tensor_to_numpy: also for importers)
from .symbols import Multiple, implied_by_bounds, to_dim

# Frames inside PyTorch or Cuvil are not the user's source.
_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
# Nodes that only check things PyTorch already checked while exporting.
_SKIP = ("aten._assert_tensor_metadata", "aten._assert_scalar", "aten.sym_constrain_range",
         "aten.sym_constrain_range_for_size", "aten._assert_async", "aten._print")


def node_location(node) -> Location:
    """The FX node's name and the innermost frame of its stack trace outside PyTorch itself."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    user = [(f, int(n)) for f, n in frames if not f.startswith("<") and not f.startswith(_LIBRARY_DIRS)]
    if user:
        return Location(user[-1][0], user[-1][1], node=f"fx:{node.name}")
    return Location(node=f"fx:{node.name}")


class ProgramWalker:
    """Converts one exported program; `symbols` renames sympy size symbols (see `symbols.dim_names`)."""

    def __init__(self, program, symbols: dict | None = None):
        self.program = program
        self.symbols = symbols or {}
        self.module = Module()
        self.env: dict = {}
        self.flat_positions: dict = {}  # user-input placeholder name -> its flat position among the user's inputs

    def shape(self, sizes) -> tuple:
        return tuple(to_dim(s, self.symbols) for s in sizes)

    # -- the top-level graph -----------------------------------------------------------------------------------
    def build(self, name: str = "main") -> tuple[Module, Signature]:
        ep = self.program
        sig = Signature(ep.call_spec.in_spec, ep.call_spec.out_spec, 0)
        specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
        b = Builder.new_function(self.module, name, *self._arguments(specs, sig))
        for m in {m for m in self.symbols.values() if isinstance(m, Multiple)}:  # a size given as k * root
            b.function.add_constraint(sym(m.name), (sym(m.name) // m.factor) * m.factor)
        args = iter(b.args)
        for node in ep.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node, specs[node.name], args, b)
        outs = self.run_nodes(ep.graph_module, b)
        b.ret(*self._results(outs, ep.graph_signature.output_specs, sig))
        return self.module, sig

    def _arguments(self, specs, sig: Signature) -> tuple[list, list]:
        """The IR argument types and names: the user inputs that are tensors (others were fixed at export)."""
        types, names = [], []
        for node in self.program.graph.nodes:
            if node.op == "placeholder" and specs[node.name].kind == InputKind.USER_INPUT:
                self.flat_positions[node.name] = sig.n_flat_inputs
                val = node.meta.get("val")
                if isinstance(val, torch.Tensor):
                    sig.inputs.append(sig.n_flat_inputs)
                    types.append(TensorType(to_dtype(val.dtype), self.shape(val.shape)))
                    names.append(node.name)
                sig.n_flat_inputs += 1
        return types, names

    def _results(self, outs, specs, sig: Signature) -> list:
        results = []
        for value, spec in zip(outs, specs):
            kind = spec.kind
            if kind == OutputKind.TOKEN:  # an effect token (see _placeholder): no value
                continue
            if kind == OutputKind.USER_INPUT_MUTATION:  # an in-place update of an input: written back after a call
                sig.mutations.append((self.flat_positions[spec.target], len(results)))
                results.append(value)
                continue
            if kind != OutputKind.USER_OUTPUT:
                raise UnsupportedError(f"the exported program mutates state ({kind.name}); export the module in "
                                       f"eval mode without in-place updates of its buffers")
            if isinstance(value, (int, float, bool)) or value is None:
                sig.outputs.append(("const", value))
            else:
                sig.outputs.append(("ir", len(results)))
                results.append(value)
        return results

    def _placeholder(self, node, spec, args, b):
        if spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            return next(args) if isinstance(val, torch.Tensor) else val
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            tensor = self.program.state_dict.get(spec.target)
            if tensor is None:
                tensor = self.program.constants[spec.target]
            b.loc = Location(node=f"fx:{node.name}")
            return b.constant(tensor_to_numpy(tensor), constant_name(spec.target))
        if spec.kind == InputKind.TOKEN:  # orders side effects (with_effects) that converters drop
            return EFFECT_TOKEN
        raise UnsupportedError(f"input {node.name} of kind {spec.kind.name} is not supported")

    # -- any graph (the program's or a cond/while subgraph) --------------------------------------------------
    def run_graph(self, gm, b, inputs: list) -> list:
        """Convert subgraph `gm` into the region `b` builds, with `inputs` bound to its placeholders."""
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs):
            raise UnsupportedError(f"subgraph takes {len(placeholders)} inputs, got {len(inputs)}")
        for node, value in zip(placeholders, inputs):
            self.env[node] = value
        return self.run_nodes(gm, b)

    def run_nodes(self, gm, b) -> list:
        for node in gm.graph.nodes:
            if node.op == "output":
                outs = node.args[0]
                return [self._arg(o) for o in (outs if isinstance(outs, (tuple, list)) else [outs])]
            if node.op == "get_attr":
                self.env[node] = getattr(gm, node.target)
            elif node.op == "call_function":
                self.env[node] = self.call(node, b)
            elif node.op != "placeholder":
                raise UnsupportedError(f"FX node {node.name} with op {node.op} is not supported")
        raise UnsupportedError("graph has no output node")

    def call(self, node, b):
        b.loc = node_location(node)
        val = node.meta.get("val")
        try:
            if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
                return to_dim(val, self.symbols)  # size arithmetic: the example value holds the expression
            if isinstance(val, (float, torch.SymFloat)) and not isinstance(val, bool):
                return _to_float(val, node)
        except UnsupportedError as e:
            raise UnsupportedError(f"{e.message} (FX node {node.name}{source_text(node)})", b.loc) from None
        name = str(node.target)
        if name.startswith(_SKIP):
            return None
        if isinstance(val, torch.SymBool):
            return self._size_check(node, val, b)
        fn = lookup(node.target)
        if fn is None:
            raise UnsupportedError(f"ATen op {name} (FX node {node.name}{source_text(node)}) has no Cuvil converter",
                                   b.loc)
        args = self._bind(node)
        try:
            return self._name_data_sizes(val, fn(Ctx(self, b, node), *args))
        except UnsupportedError as e:
            if e.loc is not None:
                raise
            raise UnsupportedError(f"{name} (FX node {node.name}{source_text(node)}): {e.message}", b.loc) from None
        except Exception as e:
            e.add_note(f"while converting FX node {node.format_node()} at {b.loc}")
            raise

    def _size_check(self, node, val, b) -> None:
        """A check on sizes that export left for run time: those the data-dependent sizes' bounds imply (a count
        between 0 and the element count) hold already; any other is refused rather than dropped."""
        if not implied_by_bounds(val.node.expr, self.symbols, data_sizes(b.function)):
            raise UnsupportedError(f"the run-time size check {val.node.expr} (FX node {node.name}{source_text(node)}) "
                                   "is not supported", b.loc)

    def _name_data_sizes(self, val, out):
        """A size PyTorch left unbacked (`u0`: the count of a nonzero) is the one the IR op computed: rename it."""
        if isinstance(val, torch.Tensor) and isinstance(out, Value):
            for d, ours in zip(val.shape, out.type.shape):
                expr = d.node.expr if isinstance(d, torch.SymInt) else None
                if expr is not None and expr.is_Symbol and expr.name.startswith("u") and plain_symbol(ours):
                    self.symbols.setdefault(expr.name, plain_symbol(ours))
        return out

    def _bind(self, node) -> list:
        """The node's arguments in schema order with defaults filled (plain args for non-ATen targets)."""
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            return [self._arg(a) for a in node.args]
        out = []
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args) and not arg.kwarg_only:
                out.append(self._arg(node.args[i]))
            elif arg.name in node.kwargs:
                out.append(self._arg(node.kwargs[arg.name]))
            else:
                out.append(arg.default_value if arg.has_default_value() else None)
        return out

    def _arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return (tuple if isinstance(a, tuple) else list)(self._arg(x) for x in a)
        if isinstance(a, (torch.SymInt, torch.SymFloat)):
            return to_dim(a, self.symbols) if isinstance(a, torch.SymInt) else _to_float(a, None)
        return a


def constant_name(target: str) -> str:
    """A state-dict name as an IR identifier, so the module prints and parses back ("0.bias" -> "_0.bias")."""
    name = re.sub(r"[^A-Za-z0-9_.]", "_", target)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"


def _to_float(val, node) -> float:
    if isinstance(val, torch.SymFloat):
        expr = val.node.expr
        if not expr.is_number:
            where = f" (FX node {node.name})" if node is not None else ""
            raise UnsupportedError(f"the float {expr} computed from symbolic sizes is not supported{where}")
        return float(expr)
    return float(val)
