"""`cuvil.export`: anything Cuvil compiled, written to a `.cuv` file that `cuvil.load` (cuvil/runtime) runs with no
frontend, pass or compiler (docs/artifact.md).

    >>> import numpy as np, cuvil, tempfile, os
    >>> @cuvil.jit
    ... def affine(x, w):
    ...     return x @ w + 1.0
    >>> path = os.path.join(tempfile.mkdtemp(), "affine.cuv")
    >>> x, w = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    >>> cuvil.export(affine, path, example_inputs=(x, w))
    >>> cuvil.load(path)(x, w).tolist()
    [[4.0, 4.0, 4.0, 4.0], [4.0, 4.0, 4.0, 4.0]]
"""
from __future__ import annotations

import os

from .compiler import Executable
from .errors import UnsupportedError


def export(obj, path, target: str = "cpu", *, entry: str = "main", example_inputs=None,
           include_c: bool = False) -> None:
    """Write `obj` to `path` as a `.cuv`: a `@cuvil.jit` function (every signature compiled so far, or those of
    `example_inputs`: a tuple of arguments, or a list of such tuples), a `cuvil.compile`d torch module, an optimised
    ONNX model (`load_onnx(p).optimize()`), a `cuvil.Executable`, or `{entry name: obj}` for several entry points.
    `include_c` adds the generated C (`cuvil inspect --c` prints it). `target` (docs/targets.md): "cpu" (this
    machine), a row ("x86_64-v3", "aarch64"), a family ("x86_64": every level, the loader picks the best), a list
    of rows of one architecture (a jit function with `example_inputs` is compiled for it), "wasm32" (WebAssembly
    modules, SIMD128 and relaxed-SIMD, that cuvil.js and cuvil.runtime.wasm run; compile for it for 4-lane
    convolution blocks), or "cuda" (PTX and sm_80/sm_90 cubins, built here, GPU or not)."""
    named = obj if isinstance(obj, dict) else {entry: obj}
    if target == "cuda":  # PTX and cubins built here, GPU or not (backends/cuda/artifact.py)
        from .backends.cuda import artifact as cuda_artifact

        exes = {name: _executables(item, example_inputs if not isinstance(obj, dict) else None, target)[0][0]
                for name, item in named.items()}
        cuda_artifact.write(path, cuda_artifact.export_target_cuda(exes))
        return
    from .backends.cpu import export as cpu_export
    from .backends.cpu import targets

    targets.levels(target)  # an unknown name fails before anything compiles
    executables: dict = {}
    for name, item in named.items():
        variants = _executables(item, example_inputs if not isinstance(obj, dict) else None, target)
        for k, (exe, route) in enumerate(variants):
            if exe.target == "interpreter":
                raise UnsupportedError(f"cuvil.export: {name!r} was compiled for the interpreter, not native code")
            executables[name if k == 0 else f"{name}__{k}"] = (exe, {**route, **({"variant_of": name} if k else {})})
    if not _copied_from_cache(executables, path, target, include_c):
        cpu_export.write(os.fspath(path), executables, include_c=include_c, target=target)


def _copied_from_cache(executables: dict, path, target, include_c: bool) -> bool:
    """Write one artifact cache hit by copying its entry (cache/store.py), which holds this machine's code and
    the weights as compiled: writing it anew needs its IR, which an entry that stores packed weights lacks. False
    (written anew, compiled again) where Winograd transforms replace its weights (weights are stored once)."""
    if target != "cpu" or include_c or len(executables) != 1:
        return False
    ((name, (exe, route)),) = executables.items()
    if getattr(exe, "cache_entry", None) is None:
        return False
    from .cache import store

    return store.export_entry(exe, path, name, route)


def _executables(obj, example_inputs, target="cpu") -> list:
    """[(Executable, route data)] of one exported object, one per compiled signature."""
    if isinstance(obj, Executable):
        return [(obj, {"kind": "ir"})]
    if getattr(obj, "_cuvil_jit", False):
        return _jit(_for_target(obj, target) if example_inputs is not None else obj, example_inputs)
    exe = getattr(obj, "executable", None)
    if isinstance(exe, Executable) and hasattr(obj, "signature"):  # a cuvil.compile'd torch module
        out_spec = obj.signature.out_spec
        single = out_spec.num_leaves == 1 and out_spec.num_children == 0
        return [(exe, {"kind": "torch", "torch": True, "single": single})]
    if isinstance(exe, Executable) and hasattr(obj, "inputs"):  # an optimised ONNX model
        return [(exe, {"kind": "onnx", "names": [s.name for s in obj.inputs],
                       "output_names": [s.name for s in obj.outputs]})]
    if hasattr(obj, "optimize") and hasattr(obj, "inputs"):
        raise UnsupportedError("cuvil.export: an ONNX model is exported once optimised: "
                               "cuvil.export(cuvil.load_onnx(path).optimize(), ...)")
    raise UnsupportedError(f"cuvil.export cannot export a {type(obj).__name__}: give a @cuvil.jit function, a "
                           "cuvil.compile'd module, an optimised ONNX model or a cuvil.Executable")


def _jit(fn, example_inputs) -> list:
    if example_inputs is not None:
        calls = example_inputs if isinstance(example_inputs, list) else [example_inputs]
        compiled = [fn._compile_for(tuple(args) if isinstance(args, (tuple, list)) else (args,), {})[1]
                    for args in calls]
    else:
        compiled = [fn._cache[k] for k in fn.signatures]
    compiled = [c for c in compiled if hasattr(c, "executable")]
    if not compiled:
        raise UnsupportedError(f"cuvil.export: {fn.__wrapped__.__qualname__} has no compiled signature; call it "
                               "once or give example_inputs=")
    return [(c.executable, _jit_route(c)) for c in compiled]


def _for_target(fn, target):
    """The jit function compiling for `target` (its layout depends on the target's vector width)."""
    if not isinstance(target, str) or fn.options["target"] == target:
        return fn
    return type(fn)(fn.python_function, receiver=fn.receiver, **{**fn.options, "target": target})


def _jit_route(c) -> dict:
    from .frontends.python.jitfunction import OUTPUT

    if any(s is not OUTPUT for s in c.static):
        raise UnsupportedError("cuvil.export: this function returns Python values beside its tensors; a .cuv "
                               "entry returns tensors only")
    return {"kind": "jit", "torch": c.mode == "torch", "single": c.structure is None}
