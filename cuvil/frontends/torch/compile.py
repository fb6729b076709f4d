"""`cuvil.compile` for PyTorch: export, convert, compile, and a callable that takes and returns tensors.

    >>> import torch, cuvil
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())
    >>> x = torch.randn(3, 4)
    >>> compiled = cuvil.compile(model, (x,))
    >>> torch.allclose(compiled(x), model(x), atol=1e-5)
    True
"""
from __future__ import annotations

import logging

import numpy as np
import torch
import torch.utils._pytree as pytree

from ... import compiler, quantize
from ...cache import store
from ...errors import UnsupportedError
from ...ir.core import Module
from ...quantize import check_precision
from .signature import Signature, signature_from_json, signature_json, tensor_to_numpy

log = logging.getLogger("cuvil.frontends.torch")
_OPTIONS = ("dynamic_shapes", "dynamic", "passes", "target", "level", "cache", "num_threads", "precision",
            "calibrate_dataset", "calibration")
_PRECISION_OPTIONS = ("precision", "calibrate_dataset", "calibration")


class CompiledModule:
    """A compiled PyTorch module or function: call it like the original (tensors or NumPy arrays in, tensors
    out, in the original's output structure). `.module` is the IR (for `cuvil.inspect_ir`)."""

    def __init__(self, executable, signature: Signature, program=None):
        self.executable = executable
        self.signature = signature
        self.program = program

    @property
    def module(self) -> Module:
        return self.executable.module

    def __call__(self, *args, **kwargs):
        flat = _flatten_inputs(self.signature, args, kwargs)
        outs = self.executable(*[_to_numpy(flat[i]) for i in self.signature.inputs])
        for position, k in self.signature.mutations:  # in-place updates of inputs, as the eager module makes
            _write_back(flat[position], outs[k])
        leaves = [_to_torch(outs[k]) if kind == "ir" else k for kind, k in self.signature.outputs]
        return pytree.tree_unflatten(leaves, self.signature.out_spec)

    def __repr__(self) -> str:
        return f"<cuvil.CompiledModule {self.executable!r}>"


def _flatten_inputs(sig: Signature, args, kwargs) -> list:
    """The user's inputs in the exported order: positional leaves, then keyword leaves as the export saw them."""
    kw_spec = sig.in_spec.child(1) if sig.in_spec.num_children == 2 else None
    names = list(kw_spec.context) if kw_spec is not None else []
    missing = [n for n in names if n not in kwargs]
    extra = [n for n in kwargs if n not in names]
    if missing or extra:
        raise TypeError(f"the compiled module was exported with keyword arguments {names}; "
                        f"got {sorted(kwargs)}")
    flat = pytree.tree_leaves(tuple(args)) + [leaf for n in names for leaf in pytree.tree_leaves(kwargs[n])]
    if len(flat) != sig.n_flat_inputs:
        raise TypeError(f"the compiled module takes {sig.n_flat_inputs} tensor inputs (as exported), got {len(flat)}")
    return flat


def _write_back(target, value: np.ndarray) -> None:
    if isinstance(target, torch.Tensor):
        target.copy_(_to_torch(value))
    else:
        np.copyto(target, value)


def _to_numpy(x) -> np.ndarray:
    return tensor_to_numpy(x) if isinstance(x, torch.Tensor) else np.asarray(x)


def _to_torch(arr: np.ndarray) -> torch.Tensor:
    """Zero-copy where NumPy allows it; read-only arrays (module constants) are copied, since torch tensors
    must be writable."""
    if arr.dtype.name == "bfloat16":
        arr = arr if arr.flags.c_contiguous else arr.copy()  # not ascontiguousarray: it makes a 0-d array 1-d
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr if arr.flags.writeable else arr.copy())


def convert(obj, example_inputs, dynamic_shapes=None, dynamic: bool = False) -> tuple[Module, Signature, object]:
    """Export `obj` with `example_inputs` and convert the program: (IR module, signature, program)."""
    from .exporter import as_module, export_program, forward_arg_names
    from .program import ProgramWalker  # here, not at the top: the converters import sympy (0.8 s)
    from .symbols import dim_names

    args, kwargs = _split_inputs(example_inputs)
    if dynamic and dynamic_shapes is None:
        dynamic_shapes = _every_size_dynamic(args, kwargs)
    program = export_program(obj, args, kwargs, dynamic_shapes)
    names = dim_names(program, dynamic_shapes, forward_arg_names(as_module(obj)))
    module, signature = ProgramWalker(program, names).build()
    return module, signature, program


def _every_size_dynamic(args: tuple, kwargs: dict):
    """`dynamic=True`: every axis of every tensor input may vary (`Dim.AUTO`: export keeps static what the model
    fixes, such as the features a Linear layer takes)."""
    def spec(x):
        return {axis: torch.export.Dim.AUTO for axis in range(x.dim())} if isinstance(x, torch.Tensor) else None

    return {k: spec(v) for k, v in kwargs.items()} if kwargs and not args else tuple(spec(a) for a in args) + \
        tuple(spec(v) for v in kwargs.values())


def _split_inputs(example_inputs) -> tuple[tuple, dict]:
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


def compile_module(obj, example_inputs, **options) -> CompiledModule:
    """Compile a `torch.nn.Module` (or a function of tensors) for the example inputs.

    `example_inputs` is a tensor, a tuple of positional inputs or a dict of keyword inputs. Options:
    `dynamic_shapes` (as `torch.export` takes them, with `torch.export.Dim`s; they become symbolic dims named after
    the Dims; an example size of 1 on a dynamic axis is fine), `dynamic=True` (every size may vary, except those the
    model fixes: `Dim.AUTO` on every axis, symbols named `x_0` for input x's axis 0), `passes` (extra IR passes),
    `target` ("cpu" or "interpreter"), `level` (0-2), `cache` (default True: look in the artifact cache first, keyed
    by the module's code, attributes and weights, and save what is compiled; a hit runs neither `torch.export` nor a
    pass; see `cache_key.py`), `num_threads` (this module's thread count; default: the process's), `precision`
    ("fp32", "bf16", "fp16", "int8", "int4"; the integer ones calibrate on `calibrate_dataset` by `calibration`:
    docs/precision.md).
    """
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise TypeError(f"cuvil.compile got unknown options {unknown}; it takes {', '.join(_OPTIONS)}")
    if example_inputs is None:
        raise TypeError("cuvil.compile of a PyTorch module needs example_inputs (a tensor, tuple or dict)")
    threads = options.pop("num_threads", None)  # not part of the cache key: the same code runs on any count
    check_precision(options.get("precision", "fp32"), options.get("calibration", "minmax"))
    key = _cache_key(obj, example_inputs, options)
    hit = store.load(key, rebuild=lambda: _compile(obj, example_inputs, options, key).executable) if key else None
    compiled = CompiledModule(hit[0], signature_from_json(hit[1])) if hit is not None else \
        _compile(obj, example_inputs, options, key)
    if threads is not None:
        compiled.executable.set_num_threads(threads)
    return compiled


def _compile(obj, example_inputs, options: dict, key) -> CompiledModule:
    """Export, convert and compile (the artifact cache's miss), saving the result under `key` if there is one."""
    module, signature, program = convert(obj, example_inputs, options.get("dynamic_shapes"),
                                         options.get("dynamic", False))
    executable = quantize.compile_module(module, target=options.get("target", "cpu"),
                                         passes=options.get("passes", ()), level=options.get("level", 2),
                                         **{k: options[k] for k in _PRECISION_OPTIONS if k in options})
    if key:
        executable.cache = "miss"
        try:
            store.save(key, executable, signature_json(signature))
        except (TypeError, ValueError, NotImplementedError) as e:  # an output structure pytree cannot write
            log.info("not saving the compiled module in the artifact cache: %s", e)
    return CompiledModule(executable, signature, program)


def _cache_key(obj, example_inputs, options: dict) -> str | None:
    """The artifact cache's key (see cache_key.py), or None: cache off, user passes, another target, a calibration
    dataset (an iterable the key cannot read without using it up). The precision is one of the options keyed."""
    if not options.pop("cache", True) or not store.enabled() or options.get("passes") or \
            options.get("target", "cpu") != "cpu" or options.get("calibrate_dataset") is not None:
        return None
    from .cache_key import module_key

    defaults = {("precision", "fp32"), ("calibration", "minmax"), ("calibrate_dataset", None)}  # keyed as if unset
    keyed = {k: v for k, v in options.items() if k != "passes" and (k, v) not in defaults}
    return module_key(obj, example_inputs, keyed)


_MODES = ("inference", "train")


def build_ir(model, input_spec: dict, target: str = "cpu", mode: str = "inference", dynamic_shapes=None) -> Module:
    """The IR module of `model` for inputs described by `input_spec`, without compiling it.

    `input_spec` maps argument names to a shape (float32), a `(shape, dtype)` pair or an example tensor. A
    string in a shape is a symbolic size (`{"x": ("batch", 3, 224, 224)}`); equal strings are one size. Names
    that are not all parameters of the model's forward are taken as positional inputs, in order.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if mode == "train":
        raise UnsupportedError("mode='train' is not supported: Cuvil compiles inference graphs (no autograd, "
                               "batch norm on running statistics); use mode='inference'")
    if target not in compiler.TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {', '.join(compiler.TARGETS)}")
    from .exporter import as_module, forward_arg_names

    examples, spec_dims = example_from_spec(input_spec)
    if not set(examples) <= set(forward_arg_names(as_module(model))):  # names that do not match: by position
        examples, spec_dims = tuple(examples.values()), tuple(spec_dims.values()) if spec_dims else None
    module, _, _ = convert(model, examples, dynamic_shapes or spec_dims or None)
    module.metadata["target"] = target
    return module


def example_from_spec(input_spec: dict) -> tuple[dict, dict]:
    """Example tensors for `input_spec` and the `torch.export` dynamic shapes its named sizes ask for."""
    dims: dict = {}
    examples, dynamic = {}, {}
    for name, spec in input_spec.items():
        if isinstance(spec, torch.Tensor):
            examples[name] = spec
            continue
        shape, dtype = (spec[0], spec[1]) if len(spec) == 2 and isinstance(spec[1], torch.dtype) else (spec, None)
        sizes = [2 if isinstance(d, str) else int(d) for d in shape]  # torch specialises sizes 0 and 1
        named = {i: dims.setdefault(d, torch.export.Dim(d)) for i, d in enumerate(shape) if isinstance(d, str)}
        examples[name] = _example(sizes, dtype or torch.float32)
        if named:
            dynamic[name] = named
    if dynamic:
        dynamic = {name: dynamic.get(name) for name in examples}
    return examples, dynamic


def _example(sizes, dtype):
    if dtype.is_floating_point:
        return torch.randn(sizes, dtype=dtype)
    return torch.zeros(sizes, dtype=dtype)  # valid indices for embeddings and gathers
