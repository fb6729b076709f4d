"""`cuvil.load_onnx(path).optimize()` through the artifact cache.

The key is the model file's digest (remembered by its stat, see keys.py), the options and the environment.
The first time a model is seen it is converted at once, as without the cache (so a bad model still fails in
`load_onnx`), and a marker records that it converts; later `load_onnx` calls return a `LazyOnnxModel` that
converts only when something needs its IR. A warm `.optimize()` then loads the saved artifact and imports
neither `onnx` nor the frontend: no parsing, no conversion, no pass, no C compiler. A cold `.optimize()` saves the
entry and then serves it the same way, its weights mapped from the file rather than held twice in private memory.

A model with external data files (as `torch.onnx.export` writes them) is keyed by those files' digests too,
each remembered by its stat like the model's; the marker lists the files. Models given as bytes with external
data, quantised element types carried in other dtypes, inputs whose values shape the graph
(`SpecializingModel`), or sequence and optional inputs or outputs take the uncached path.
"""
from __future__ import annotations

import os

import numpy as np

from ..cache import store
from ..cache.keys import Key, bytes_digest, environment, file_digest
from ..errors import ShapeError
from .common import input_array, remember


def load_onnx(model, mmap: bool = False):
    """What `cuvil.load_onnx` returns, through the cache where the model is a path or bytes (`mmap`: see
    `frontends.onnx.loader.read_model`)."""
    if not store.enabled() or not isinstance(model, (str, os.PathLike, bytes, bytearray, memoryview)):
        from .onnx import load_onnx as load

        return load(model, mmap)
    digest = file_digest(model, store.folder() / "stat") if isinstance(model, (str, os.PathLike)) \
        else bytes_digest(model)
    try:
        return LazyOnnxModel(model, _with_data(model, digest, _marker(digest).read_text()), mmap=mmap)
    except OSError:  # no marker (first sight), or an external data file gone: convert now, which says what is wrong
        return _first_load(model, digest, mmap)


def _with_data(model, digest: str, files: str) -> str:
    """The model's digest together with those of the external data files the marker lists (one per line)."""
    if not files:
        return digest
    folder = os.path.dirname(os.path.abspath(os.fspath(model)))
    parts = [digest] + [f"{name}\0{file_digest(os.path.join(folder, name), store.folder() / 'stat')}"
                        for name in files.split("\n")]
    return bytes_digest("\n".join(parts).encode())


def _marker(digest: str):
    return store.folder() / "onnx" / f"{digest}-{environment()[:16]}.ok"


def _first_load(model, digest: str, mmap: bool):
    from .onnx import loader
    from .onnx.carriers import CARRIERS
    from .onnx.model import SpecializingModel

    proto, base_dir = loader.read_model(model, mmap)
    converted = loader.load_proto(proto, base_dir)
    specs = converted.inputs + converted.outputs
    files = loader.external_files(proto, base_dir and os.path.basename(os.fspath(model)))
    sequences = converted.layout is not None  # sequence or optional outputs: the cache's route keeps tensors only
    carried = any(s.elem in CARRIERS for s in specs)
    if files and base_dir is None or isinstance(converted, SpecializingModel) or carried or sequences:
        return converted
    marker = "\n".join(files)
    store.toolchain.write_text_atomic(_marker(digest), marker)
    return LazyOnnxModel(model, _with_data(model, digest, marker), converted, mmap)


class LazyOnnxModel:
    """An ONNX model the artifact cache knows: an `OnnxModel` (same attributes and calls) whose conversion
    waits until something needs the IR, so that a cached `.optimize()` skips it."""

    def __init__(self, source, digest: str, converted=None, mmap: bool = False):
        self._source, self.digest, self._converted, self._mmap = source, digest, converted, mmap

    def converted(self):
        """The `OnnxModel` (converting the file now, the first time)."""
        if self._converted is None:
            from .onnx import load_onnx

            self._converted = load_onnx(self._source, self._mmap)
        return self._converted

    module = property(lambda self: self.converted().module)
    weights = property(lambda self: self.converted().weights)
    inputs = property(lambda self: self.converted().inputs)
    outputs = property(lambda self: self.converted().outputs)

    def __call__(self, *args, **kwargs) -> list:
        return self.converted()(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self.converted())

    def optimize(self, target: str = "cpu", precision: str = "fp32", enable_fuse: bool = True,
                 calibrate_dataset=None, passes=None, calibration: str = "minmax"):
        """`OnnxModel.optimize`; compiled code comes from the artifact cache when it holds this model (keyed by the
        precision too; a calibrated one compiles every time)."""
        if target != "cpu" or passes or calibrate_dataset is not None:
            return self.converted().optimize(target, precision, enable_fuse, calibrate_dataset, passes, calibration)
        key = Key("onnx").add("model", self.digest).add("fuse", enable_fuse).add("precision", precision) \
            .add("env", environment()).hexdigest()
        hit = store.load(key, rebuild=lambda: self._compile(key, enable_fuse, precision, mapped=False).executable)
        if hit is not None:
            return CompiledOnnxModel(*hit, for_sizes=lambda shapes: self._for_sizes(shapes, enable_fuse, precision))
        return self._compile(key, enable_fuse, precision)

    def _for_sizes(self, shapes, enable_fuse: bool, precision: str):
        """The model compiled for these input sizes (not cached on disk): see OnnxModel.for_sizes."""
        sized = self.converted().for_sizes
        if sized is None:
            return None
        return sized(shapes).optimize(enable_fuse=enable_fuse, precision=precision)

    def _compile(self, key: str, enable_fuse: bool, precision: str, mapped: bool = True):
        """Convert, compile and save; then, with `mapped`, serve the saved entry (see `_mapped`). A rebuild (the IR
        asked of a mapped entry) keeps what it compiled: it is what the IR was asked for."""
        from ..quantize import compile_module
        from .onnx.model import OnnxModel

        model = self.converted()
        exe = compile_module(model.module, target="cpu", enable_fusion=enable_fuse, precision=precision)
        exe.cache = "miss"
        route = {"inputs": [_spec_json(s) for s in model.inputs], "outputs": [_spec_json(s) for s in model.outputs]}
        rebuild = lambda: self._compile(key, enable_fuse, precision, mapped=False).executable  # noqa: E731
        if not mapped:
            store.save(key, exe, route)
        hit = store.load_saved(key, exe, route, rebuild) if mapped else None
        if hit is not None:  # served as a warm start serves it
            del exe, model
            return self._mapped(hit, enable_fuse, precision)
        compiled = OnnxModel(exe.module, model.inputs, model.outputs, lambda arrays: exe(*arrays),
                             model.for_sizes and (lambda shapes: self._for_sizes(shapes, enable_fuse, precision)))
        compiled.executable = exe
        return compiled

    def _mapped(self, hit: tuple, enable_fuse: bool, precision: str):
        """The entry just saved, loaded as a warm start loads it: its weights are pages of the file (shared with the
        page cache, evictable) and the compile's private arrays (the converted initializers and the packed forms made
        from them, 1.85x BERT-base's weights) are freed, with the converted model, until something asks for the IR
        (converted and compiled again then, as after a warm start)."""
        hit[0].cache = "miss"
        self._converted = None
        store.return_freed_memory()
        return CompiledOnnxModel(*hit, for_sizes=lambda shapes: self._for_sizes(shapes, enable_fuse, precision))


def _spec_json(spec) -> list:
    return [spec.name, spec.elem, np.dtype(spec.dtype).str, [str(d) for d in spec.shape]]


class CompiledOnnxModel:
    """An optimised ONNX model loaded from the artifact cache: called like `OnnxModel` (positionally or by input
    name, a list of outputs back); `.inputs`, `.outputs` and `.module` are built when first read."""

    def __init__(self, executable, route: dict, for_sizes=None):
        self.executable = executable
        self._for_sizes, self._sized = for_sizes, {}
        self._in, self._out = route["inputs"], route["outputs"]
        self._dtypes = [np.dtype(dt) for _, _, dt, _ in self._in]
        self._static = [[int(d) if d.lstrip("-").isdigit() else None for d in shape] for _, _, _, shape in self._in]

    module = property(lambda self: self.executable.module)
    weights = property(lambda self: self.module.constants)
    inputs = property(lambda self: _tensor_specs(self._in))
    outputs = property(lambda self: _tensor_specs(self._out))

    def __call__(self, *args, **kwargs) -> list:
        arrays = self._bind(args, kwargs)
        try:
            return self.executable(*arrays)
        except ShapeError:  # sizes a symbolic dimension's relations refuse: OnnxModel.for_sizes
            sized = self._for_sizes and remember(self._sized, tuple(a.shape for a in arrays), self._for_sizes)
            if sized is None:
                raise
            return sized(*arrays)

    def _bind(self, args: tuple, kwargs: dict) -> list:
        names = [spec[0] for spec in self._in]
        if len(args) > len(names) or set(kwargs) - set(names[len(args):]):
            raise ShapeError(f"the model takes the inputs {', '.join(names)}; got {len(args)} positional and "
                             f"{sorted(kwargs)} by name")
        given = list(args) + [kwargs[n] for n in names[len(args):] if n in kwargs]
        if len(given) != len(names):
            raise ShapeError(f"missing model inputs: {', '.join(n for n in names[len(args):] if n not in kwargs)}")
        return [self._check(i, x) for i, x in enumerate(given)]

    def _check(self, i: int, x) -> np.ndarray:
        name, want = self._in[i][0], self._dtypes[i]
        arr = input_array(name, x, want)
        if arr.dtype != want:
            raise ShapeError(f"input {name!r} must have element type {want}, got {arr.dtype}")
        static = self._static[i]
        if arr.ndim != len(static) or any(d is not None and d != n for d, n in zip(static, arr.shape)):
            raise ShapeError(f"input {name!r} must have shape ({', '.join(self._in[i][3])}), got {arr.shape}")
        return arr

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {np.dtype(dt).name}[{','.join(s)}]" for n, _, dt, s in self._in)
        return f"OnnxModel(({ins}) -> {len(self._out)} outputs, from the artifact cache)"


def _tensor_specs(rows: list) -> list:
    from .onnx.model import TensorSpec
    from ..ir.symbolic import parse_dim

    return [TensorSpec(name, elem, tuple(parse_dim(d) for d in shape)) for name, elem, _, shape in rows]

