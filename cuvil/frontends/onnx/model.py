"""`OnnxModel`: a loaded ONNX model. Calling it runs the reference interpreter; `.optimize()` runs the
default pass pipeline on a copy of the module and returns a callable with the same calling convention."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ...interpreter import interpret
from ...ir.core import Module
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from ...ir.types import TensorType
from ..common import input_array, remember
from .carriers import CARRIERS, from_carrier, to_carrier
from .tensors import IR_DTYPES, ir_dtype, type_name

MAX_SEQUENCE = 4096  # elements of one sequence input: a model is converted with one input per element

@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: its ONNX name, ONNX element type and shape (ints and symbolic dims).
    `dtype` is the NumPy dtype of its arrays (ml_dtypes types for 8- and 4-bit floats and 4-bit ints)."""

    name: str
    elem: int
    shape: tuple

    @property
    def ir_dtype(self) -> DType:
        return ir_dtype(self.elem)

    @cached_property
    def dtype(self) -> np.dtype:
        return CARRIERS[self.elem].numpy if self.elem in CARRIERS else self.ir_dtype.numpy

    @cached_property
    def static_dims(self) -> tuple:
        """(axis, size) of the dims that are numbers: what a call's arrays must match exactly."""
        return tuple((axis, d) for axis, d in enumerate(self.shape) if not isinstance(d, SymExpr))

    def __str__(self) -> str:
        if self.elem not in CARRIERS and self.elem not in IR_DTYPES:
            return f"{self.name}: {type_name(self.elem)}[{','.join(map(str, self.shape))}]"
        if self.elem in CARRIERS:
            return f"{self.name}: {self.dtype.name}[{','.join(map(str, self.shape))}]"
        return f"{self.name}: {TensorType(self.ir_dtype, self.shape)}"


class OnnxModel:
    """An ONNX model as a Cuvil IR module. Call it with NumPy arrays, positionally or by input name; it returns
    the outputs as a list in the graph's order, like ONNX Runtime's `run`.

        >>> import numpy as np, onnx, cuvil
        >>> from onnx import helper, TensorProto as T
        >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
        ...                       [helper.make_tensor_value_info("x", T.FLOAT, ["n"])],
        ...                       [helper.make_tensor_value_info("y", T.FLOAT, ["n"])])
        >>> model = cuvil.load_onnx(helper.make_model(g))
        >>> model(np.array([-1.0, 2.0], np.float32))[0].tolist()
        [0.0, 2.0]
        >>> [str(s) for s in model.inputs]
        ['x: f32[n]']
    """

    def __init__(self, module: Module, inputs: list, outputs: list, runner=None, for_sizes=None, layout=None):
        self.module = module
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.layout = layout  # how the flat outputs group into the graph's sequences and optionals (None: tensors)
        self._run = runner or (lambda arrays: interpret(module, arrays))
        # input shapes -> the model converted for those sizes: serves a call whose sizes a symbolic dimension's
        # relations refuse (a Slice bound past the end of the size it cuts), where ONNX's clamping applies
        self.for_sizes = for_sizes
        self._sized: dict = {}

    @property
    def weights(self) -> dict:
        """The model's constants (initializers), by name; NumPy arrays shared with the module, not copies."""
        return self.module.constants

    def __call__(self, *args, **kwargs) -> list:
        return self._outputs(self._run_any_size(bind_inputs(self.inputs, args, kwargs)))

    def _run_any_size(self, arrays: list) -> list:
        try:
            return self._run(arrays)
        except ShapeError:
            if self.for_sizes is None:
                raise
        return remember(self._sized, tuple(a.shape for a in arrays), self.for_sizes)._run(arrays)

    def _outputs(self, arrays) -> list:
        flat = ([np.asarray(o) for o in arrays] if not any(s.elem in CARRIERS for s in self.outputs) else
                [from_carrier(np.asarray(o), s.elem) for o, s in zip(arrays, self.outputs)])
        return flat if self.layout is None else regroup(self.layout, flat)

    def optimize(self, target: str = "cpu", precision: str = "fp32", enable_fuse: bool = True,
                 calibrate_dataset=None, passes=None, calibration: str = "minmax") -> "OnnxModel":
        """A callable compiled for `target` ("cpu": native code; "interpreter": the reference) through the
        default pipeline plus `passes`. `enable_fuse=False` gives every op its own kernel. `precision` is "fp32",
        "bf16", "fp16", "int8" or "int4" (docs/precision.md); the integer ones calibrate on `calibrate_dataset`
        (input tuples or dicts) by `calibration` ("minmax", "percentile", "entropy")."""
        from ...compiler import TARGETS
        from ...quantize import compile_module

        if target not in TARGETS:
            raise UnsupportedError(f"optimize: unknown target {target!r} (supported: {', '.join(TARGETS)})")
        exe = compile_module(self.module, target=target, passes=passes or (), enable_fusion=enable_fuse,
                             precision=precision, calibrate_dataset=calibrate_dataset, calibration=calibration)
        sized = self.for_sizes
        compiled = OnnxModel(exe.module, self.inputs, self.outputs, lambda arrays: exe(*arrays),
                             sized and (lambda shapes: sized(shapes).optimize(target, precision, enable_fuse,
                                                                              calibrate_dataset, passes,
                                                                              calibration)), self.layout)
        compiled.executable = exe  # what cuvil.export writes
        return compiled

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"OnnxModel(({ins}) -> ({outs}))"


def bind_inputs(specs: list, args: tuple, kwargs: dict) -> list:
    """The call's arrays in input order, checked against the specs (count, names, element types, ranks)."""
    return [_check_input(s, x) for s, x in zip(specs, given_inputs(specs, args, kwargs))]


def given_inputs(specs: list, args: tuple, kwargs: dict) -> list:
    """The call's values in input order, as given (positionally or by name), each input exactly once."""
    if not kwargs and len(args) == len(specs):
        return list(args)
    if len(args) > len(specs):
        raise ShapeError(f"the model takes {len(specs)} inputs, got {len(args)} positional arrays")
    given = dict(zip((s.name for s in specs), args))
    for name, x in kwargs.items():
        if name not in {s.name for s in specs}:
            raise ShapeError(f"the model has no input {name!r} (inputs: {', '.join(s.name for s in specs)})")
        if name in given:
            raise ShapeError(f"input {name!r} is given both by position and by name")
        given[name] = x
    missing = [s.name for s in specs if s.name not in given]
    if missing:
        raise ShapeError(f"missing model inputs: {', '.join(missing)}")
    return [given[s.name] for s in specs]


def _check_input(spec: TensorSpec, x) -> np.ndarray:
    arr = x if type(x) is np.ndarray and x.dtype == spec.dtype else input_array(spec.name, x, spec.dtype)
    if arr.dtype != spec.dtype:
        raise ShapeError(f"input {spec.name!r} must have element type {spec.dtype}, got {arr.dtype}")
    if arr.ndim != len(spec.shape):
        raise ShapeError(f"input {spec.name!r} must have rank {len(spec.shape)} ({spec}), got shape {arr.shape}")
    for axis, d in spec.static_dims:
        if d != arr.shape[axis]:
            raise ShapeError(f"input {spec.name!r} must have size {d} in dim {axis} ({spec}), got shape {arr.shape}")
    return to_carrier(arr, spec.elem) if spec.elem in CARRIERS else arr


class SpecializingModel(OnnxModel):
    """A model whose shapes depend on the values of some small inputs (a Reshape shape or Reduce axes given
    as a graph input). It is converted at call time, once per distinct value of those inputs, with the values
    known; `value_inputs` names them. `.module` and `.outputs` are those of the latest specialization.

    It shares OnnxModel's interface, not its state: there is no single module until a call picks one.
    """

    MAX_CACHED = 16
    MAX_ELEMENTS = 64  # inputs this small may key a specialization; larger ones are data

    def __init__(self, inputs: list, outputs: list, convert, value_inputs=frozenset()):
        self.inputs, self.outputs, self._convert = list(inputs), list(outputs), convert
        self.value_inputs: set = set(value_inputs)
        self._cache: dict = {}
        self._latest = None
        self.layout = None

    def add_value_inputs(self, e: UnsupportedError) -> None:
        """Specialize also on the inputs a conversion error says it needed; re-raise it if they are data."""
        specs = {s.name: s for s in self.inputs}
        names = set(getattr(e, "inputs", ())) - self.value_inputs
        if not names or any(n not in specs or not _small_static(specs[n], self.MAX_ELEMENTS) for n in names):
            raise e
        self.value_inputs |= names

    @property
    def module(self) -> Module:
        if self._latest is None:
            raise UnsupportedError(f"this model is converted per value of its inputs {sorted(self.value_inputs)}; "
                                   f"call it once before asking for its module")
        return self._latest.module

    def specialize(self, arrays: list) -> OnnxModel:
        """The model converted for these inputs' values (cached)."""
        named = {s.name: x for s, x in zip(self.inputs, arrays)}
        while True:
            key = tuple((n, named[n].dtype.str, named[n].shape, named[n].tobytes()) for n in sorted(self.value_inputs))
            if key in self._cache:
                break
            try:
                model = self._convert({n: named[n] for n in self.value_inputs})
            except UnsupportedError as e:
                self.add_value_inputs(e)
                continue
            if len(self._cache) >= self.MAX_CACHED:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = model
        self._latest = self._cache[key]
        self.outputs, self.layout = self._latest.outputs, self._latest.layout
        return self._latest

    def __call__(self, *args, **kwargs) -> list:
        arrays = bind_inputs(self.inputs, args, kwargs)
        return self._outputs(self.specialize(arrays)._run_any_size(arrays))

    def optimize(self, target: str = "cpu", precision: str = "fp32", enable_fuse: bool = True,
                 calibrate_dataset=None, passes=None, calibration: str = "minmax") -> "SpecializingModel":
        """The same per-value conversion, each specialization optimized for `target` at `precision`."""
        from ...quantize import check_precision

        check_precision(precision, calibration)
        options = (target, precision, enable_fuse, calibrate_dataset, passes, calibration)
        return SpecializingModel(self.inputs, self.outputs, lambda values: self._convert(values).optimize(*options),
                                 self.value_inputs)


def _small_static(spec: TensorSpec, limit: int) -> bool:
    return all(isinstance(d, int) for d in spec.shape) and int(np.prod(spec.shape)) <= limit


# -- sequences and optionals at the boundary -----------------------------------------------------------------------
@dataclass(frozen=True)
class SequenceSpec:
    """A sequence input: its name, element type and the elements' declared shape (None: not declared). A call
    gives a list of arrays; the model is converted with one input per element, named `name[i]`."""

    name: str
    elem: int
    shape: tuple | None

    @property
    def dtype(self) -> np.dtype:
        return TensorSpec(self.name, self.elem, ()).dtype

    def element(self, i: int, shape: tuple) -> TensorSpec:
        return TensorSpec(f"{self.name}[{i}]", self.elem, shape)

    def __str__(self) -> str:
        dims = "" if self.shape is None else ",".join(map(str, self.shape))
        return f"{self.name}: seq({self.dtype.name}[{dims}])"


@dataclass(frozen=True)
class OptionalSpec:
    """An optional input: None or a value of `inner` (a TensorSpec or SequenceSpec of the same name)."""

    name: str
    inner: object

    @property
    def elem(self) -> int:
        return self.inner.elem

    def __str__(self) -> str:
        return f"{self.name}: optional({str(self.inner).split(': ', 1)[1]})"


def call_structure(spec, x) -> tuple:
    """(what the conversion must know of input `x`: None for a tensor, the element shapes of a sequence, None
    or (the inner structure,) for an optional; the arrays it passes to the converted model)."""
    if isinstance(spec, TensorSpec):
        return None, [x]
    if isinstance(spec, OptionalSpec):
        if x is None:
            return False, []
        inner, arrays = call_structure(spec.inner, x)
        return (inner,), arrays
    if not isinstance(x, (list, tuple)):
        raise ShapeError(f"input {spec.name!r} is a sequence ({spec}): pass a list of arrays, got {type(x).__name__}")
    if len(x) > MAX_SEQUENCE:
        raise ShapeError(f"input {spec.name!r} has {len(x)} elements, more than Cuvil converts ({MAX_SEQUENCE})")
    arrays = [input_array(f"{spec.name}[{i}]", e, spec.dtype) for i, e in enumerate(x)]
    for i, a in enumerate(arrays):
        declared = spec.shape
        if declared is not None and (a.ndim != len(declared) or any(
                isinstance(d, int) and d != n for d, n in zip(declared, a.shape))):
            raise ShapeError(f"input {spec.name!r} element {i} has shape {a.shape}, the model declares ({spec})")
    return tuple(a.shape for a in arrays), arrays


def flat_specs(spec, structure) -> list:
    """The converted model's inputs for one graph input of this call structure."""
    if isinstance(spec, TensorSpec):
        return [spec]
    if isinstance(spec, OptionalSpec):
        return flat_specs(spec.inner, structure[0]) if structure else []
    return [spec.element(i, shape) for i, shape in enumerate(structure)]


def regroup(layout: list, flat: list) -> list:
    """The graph's outputs from the flat ones: a list for a sequence, None for an absent optional."""
    it = iter(flat)

    def one(entry):
        if entry is None:
            return next(it)
        if entry[0] == "seq":
            return [next(it) for _ in range(entry[1])]
        if entry[0] == "stacked":
            return list(next(it))
        return None if entry[1] is False else one(entry[1])
    return [one(e) for e in layout]


class StructuredModel(SpecializingModel):
    """A model with sequence or optional inputs, converted per call structure (each sequence's element shapes,
    each optional's presence) and cached; the converted model takes one input per sequence element."""

    @property
    def module(self) -> Module:
        if self._latest is None:
            raise UnsupportedError("this model is converted per length of its sequence inputs and presence of its "
                                   "optional ones; call it once before asking for its module")
        return self._latest.module

    def __call__(self, *args, **kwargs) -> list:
        model, arrays = self.specialize_call(given_inputs(self.inputs, args, kwargs))
        return model(*arrays)

    def specialize_call(self, given: list) -> tuple:
        """(the model converted for this call's structure, the flat arrays to call it with)."""
        parts = [call_structure(s, x) for s, x in zip(self.inputs, given)]
        self._latest = remember(self._cache, tuple(p[0] for p in parts), self._convert, self.MAX_CACHED)
        self.outputs, self.layout = self._latest.outputs, self._latest.layout
        return self._latest, [a for _, arrays in parts for a in arrays]

    def optimize(self, target: str = "cpu", precision: str = "fp32", enable_fuse: bool = True,
                 calibrate_dataset=None, passes=None, calibration: str = "minmax") -> "StructuredModel":
        """The same per-structure conversion, each one optimized for `target` at `precision`."""
        from ...quantize import check_precision

        check_precision(precision, calibration)
        options = (target, precision, enable_fuse, calibrate_dataset, passes, calibration)
        return StructuredModel(self.inputs, self.outputs, lambda structure: self._convert(structure).optimize(*options))
