"""What the commands run: a `.cuv` file, an ONNX model or a `file.py:function`, each opened as a `Source` with one
interface (its inputs, a call by input name, its IR and C, its metadata, a thread count)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

from .. import progress
from ..errors import ArtifactError, CuvilError, ShapeError
from ..ir.types import TensorType
from ..runtime.api import describe
from .inputs import Param, assign, random_array


def kind_of(model: str) -> str:
    """"cuv", "onnx" or "python" (`file.py:function`), from the argument's form."""
    if model.endswith(".cuv"):
        return "cuv"
    if model.endswith(".onnx"):
        return "onnx"
    path, sep, name = model.rpartition(":")
    if sep and path.endswith(".py") and name.isidentifier():
        return "python"
    raise CuvilError(f"{model!r}: expected a .cuv file, an .onnx model or FILE.py:FUNCTION")


def open_model(model: str, args) -> "Source":
    """The model for run, inspect and bench; ONNX models and Python functions are compiled in this process."""
    kind = kind_of(model)
    if kind == "cuv":
        return CuvSource(model, getattr(args, "entry", "main"))
    with progress.display(f"compiling {model}"):
        if kind == "onnx":
            return OnnxSource(model, compile_onnx(model, args, reshape=False))
        return PythonSource(model, *compile_python(model, args))


class Source:
    """A model the commands can call: `inputs` (Params), `__call__(arrays by name) -> list`, `ir()`, `c()`."""

    path: str
    inputs: list

    def output_names(self, count: int) -> list:
        return [f"output_{i}" for i in range(count)]

    def signatures(self) -> list:
        """One line per entry point: `main(x: f32[batch,784]) -> (y: f32[batch,10])` (outputs where known)."""
        return [f"main({', '.join(map(str, self.inputs))})"]

    def metadata(self) -> dict:
        return {}

    def set_num_threads(self, n: int) -> None:
        """The thread count of in-process compiled code: one per process (the kernel library's)."""
        from ..backends.cpu import backend, kernels

        kernels.load(backend.opt_level()).cuvil_set_num_threads(n)


class CuvSource(Source):
    """A `.cuv` file, through `cuvil.load` (no frontend, no compiler)."""

    def __init__(self, path: str, entry: str):
        from ..runtime import load

        self.path, self.artifact = path, load(path)
        self.function = self.artifact.function(entry)
        self.inputs = [Param(p.name, p.dtype, tuple(p.shape)) for p in self.function.inputs]

    def __call__(self, arrays: dict) -> list:
        out = self.function(*[arrays[p.name] for p in self.inputs])
        return list(out) if isinstance(out, tuple) else [out]

    def timed_call(self, arrays: dict):
        """A call into preallocated outputs (zero copy), as `cuvil-run --bench` times it."""
        ins = [arrays[p.name] for p in self.inputs]
        outs = self.function.run(ins)
        return lambda: self.function.run(ins, outs)

    def output_names(self, count: int) -> list:
        return [p.name for p in self.function.outputs]

    def signatures(self) -> list:
        lines = []
        for name in self.artifact.entries:
            e = self.artifact.metadata["entries"][name]
            consts = e.get("constants", [])
            lines += [describe(self.artifact.function(name)),
                      f"  {len(consts)} constant(s), {sum(c['nbytes'] for c in consts):,} bytes; workspace "
                      f"{e.get('arena_bytes', '?')} bytes; from {e.get('route', {}).get('kind', '?')}"]
        return lines

    def metadata(self) -> dict:
        """The `meta` section but its entries (`signatures` prints those)."""
        meta = {k: v for k, v in self.artifact.metadata.items() if k != "entries"}
        if isinstance(meta.get("features"), list):
            meta["features"] = " ".join(meta["features"])
        return meta

    def ir(self) -> str:
        return self.artifact.ir_text(self.function.name)

    def c(self) -> str:
        try:
            return self.artifact.c_text(self.function.name)
        except ArtifactError as e:
            raise ArtifactError(f"{e}: compile with `cuvil compile --c` (export(..., include_c=True)) to keep "
                                f"the generated C") from None

    def set_num_threads(self, n: int) -> None:
        self.function.set_num_threads(n)


class OnnxSource(Source):
    """An ONNX model compiled in this process (`cuvil.load_onnx(path).optimize()`)."""

    def __init__(self, path: str, compiled):
        self.path, self.compiled = path, compiled
        self.inputs = [Param(s.name, str(s.ir_dtype), tuple(_dim(d) for d in s.shape)) for s in compiled.inputs]

    def __call__(self, arrays: dict) -> list:
        return list(self.compiled(**arrays))

    def timed_call(self, arrays: dict):
        return lambda: self.compiled(**arrays)

    def output_names(self, count: int) -> list:
        return [s.name for s in self.compiled.outputs]

    def signatures(self) -> list:
        return [f"main({', '.join(map(str, self.compiled.inputs))}) -> "
                f"({', '.join(map(str, self.compiled.outputs))})"]

    def metadata(self) -> dict:
        import onnx

        proto = onnx.load(self.path, load_external_data=False)
        return {"producer": f"{proto.producer_name} {proto.producer_version}".strip(), "ir_version": proto.ir_version,
                "opsets": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
                "nodes": len(proto.graph.node), "initializers": len(proto.graph.initializer)}

    def ir(self) -> str:
        from .. import inspect_ir

        return inspect_ir(self.compiled.module)

    def c(self) -> str:
        return generated_c(self.compiled.module)


class PythonSource(Source):
    """A `file.py:function`, compiled by `@cuvil.jit` for the `--input` arrays."""

    def __init__(self, path: str, jitted, examples: dict):
        self.path, self.jitted, self.examples = path, jitted, examples
        self.inputs = _jit_signature(jitted, [Param(n, _dtype_name(a), tuple(a.shape)) for n, a in examples.items()])

    def signatures(self) -> list:
        module = self.jitted.module
        outs = ", ".join(map(str, module.main.result_types)) if module is not None else "?"
        return [f"{self.jitted.__wrapped__.__name__}({', '.join(map(str, self.inputs))}) -> ({outs})"]

    def __call__(self, arrays: dict) -> list:
        out = self.jitted(**arrays)
        return [np.asarray(o) for o in out] if isinstance(out, (tuple, list)) else [np.asarray(out)]

    def timed_call(self, arrays: dict):
        return lambda: self.jitted(**arrays)

    def metadata(self) -> dict:
        return {"function": self.jitted.__wrapped__.__qualname__, "file": self.path.rpartition(":")[0],
                "options": {k: v for k, v in self.jitted.options.items() if v not in (None, (), {})}}

    def ir(self) -> str:
        from .. import inspect_ir

        return inspect_ir(self.jitted)

    def c(self) -> str:
        return generated_c(self.jitted.module)


# -- compiling ---------------------------------------------------------------------------------------------------
def compile_onnx(path: str, args, reshape: bool):
    """`cuvil.load_onnx(path).optimize()`, the inputs' sizes first made symbolic by `--dynamic` and, with
    `reshape` (`cuvil compile`), fixed by `--input` shapes (run and bench take those as the values' shapes)."""
    import cuvil

    shapes = onnx_shapes(path, args.inputs if reshape else [], args.dynamic)
    progress.phase("frontend", os.path.basename(path))
    model = cuvil.load_onnx(with_input_shapes(path, shapes) if shapes else path)
    return model.optimize(target=getattr(args, "target", "cpu"), precision=getattr(args, "precision", "fp32"))


def onnx_shapes(path: str, given: list, dynamic: list) -> dict:
    """Input name -> new dims (ints and symbol names) from `--input` shapes and `--dynamic` symbols."""
    if not given and not dynamic:
        return {}
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    inits = {t.name for t in graph.initializer}
    dims = {i.name: [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                     for d in i.type.tensor_type.shape.dim] for i in graph.input if i.name not in inits}
    for name, arg in assign([a for a in given if a.shape is not None], list(dims)).items():
        if len(arg.shape) != len(dims[name]):
            raise ShapeError(f"--input {name}: {len(arg.shape)} sizes given, but input {name!r} has rank "
                             f"{len(dims[name])}")
        dims[name] = list(arg.shape)
    for name, axis, symbol in dynamic:
        if name not in dims:
            raise ShapeError(f"--dynamic names input {name!r}; the model's inputs are {', '.join(dims)}")
        if not -len(dims[name]) <= axis < len(dims[name]):
            raise ShapeError(f"--dynamic {name}:{axis}: input {name!r} has rank {len(dims[name])}")
        dims[name][axis] = symbol
    return dims


def with_input_shapes(path: str, shapes: dict) -> bytes:
    """The model's bytes with these input dims (and its outputs' sizes left for the frontend to infer)."""
    import onnx

    proto = onnx.load(path)
    for value in proto.graph.input:
        if value.name in shapes:
            _set_dims(value, shapes[value.name])
    for value in proto.graph.output:  # sizes written for the old inputs' shapes would contradict the new ones
        _set_dims(value, [None] * len(value.type.tensor_type.shape.dim))
    return proto.SerializeToString()


def _set_dims(value, dims: list) -> None:
    shape = value.type.tensor_type.shape
    shape.ClearField("dim")
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif d is not None and d != "?":
            dim.dim_param = d


def compile_python(model: str, args) -> tuple:
    """(the `@cuvil.jit` function, its example arrays by parameter name), compiled by one call on those arrays."""
    import cuvil

    fn = load_function(model)
    options = dict(fn.options) if getattr(fn, "_cuvil_jit", False) else {}
    base = fn.python_function if getattr(fn, "_cuvil_jit", False) else fn
    dynamic = getattr(args, "dynamic", None) or []
    if dynamic:
        options["dynamic_dims"] = {**options.get("dynamic_dims", {})}
        for name, axis, symbol in dynamic:
            options["dynamic_dims"].setdefault(name, {})[axis] = symbol
    options["precision"] = getattr(args, "precision", "fp32")
    options["target"] = getattr(args, "target", None) or options.get("target", "cpu")
    progress.phase("frontend", f"{base.__qualname__} from its source")
    jitted = cuvil.jit(base, **options)
    examples = example_arrays(base, args.inputs)
    jitted(**examples)
    return jitted, examples


def example_arrays(fn, given: list) -> dict:
    """The arrays of `--input` (files, or random of a shape) by parameter name; every parameter without a
    default needs one."""
    import inspect

    params = inspect.signature(fn).parameters
    chosen = assign(given, list(params))
    missing = [n for n, p in params.items() if n not in chosen and p.default is inspect.Parameter.empty]
    if missing:
        raise ShapeError(f"{fn.__qualname__} needs an --input for {', '.join(missing)} (NAME=D0,D1,...[:DTYPE] "
                         f"or NAME=FILE.npy)")
    rng = np.random.default_rng(0)
    return {n: np.load(a.file, allow_pickle=False) if a.file else random_array(rng, a.shape, a.dtype or "f32")
            for n, a in chosen.items()}


def load_function(model: str):
    """The function `FUNCTION` of `FILE.py:FUNCTION`, the file run as a module (its folder on sys.path)."""
    file, _, name = model.rpartition(":")
    path = Path(file).resolve()
    if not path.is_file():
        raise CuvilError(f"{file}: no such file")
    spec = importlib.util.spec_from_file_location(f"cuvil_cli_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    sys.modules[spec.name] = module  # dataclasses and pickling look their module up by name
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(k for k, v in vars(module).items() if _defined_here(v, spec.name) and not k.startswith("_"))
        raise CuvilError(f"{file} defines no function {name!r} (functions there: {', '.join(found) or 'none'})")
    return fn


def _defined_here(value, module_name: str) -> bool:
    return callable(value) and getattr(value, "__module__", None) == module_name


def generated_c(module) -> str:
    """The C the CPU backend generates for an optimised module (what it compiled)."""
    from ..backends.cpu import codegen

    return codegen.generate(module).source


def _dim(d):
    return d if isinstance(d, int) else str(d)


def _dtype_name(a: np.ndarray) -> str:
    from ..ir.dtypes import DType

    return str(DType.from_numpy(np.asarray(a).dtype))


def _jit_signature(jitted, fallback: list) -> list:
    """The compiled signature's inputs (with their symbolic sizes), named after the function's parameters."""
    module = jitted.module
    if module is None:
        return fallback
    args = module.main.args
    if len(args) != len(fallback):
        return fallback
    return [Param(p.name, str(a.type.dtype), tuple(_dim(d) for d in a.type.shape))
            for p, a in zip(fallback, args) if isinstance(a.type, TensorType)]

