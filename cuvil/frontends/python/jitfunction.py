"""`JitFunction`: the object `@cuvil.jit` returns. It translates the function's source for each new call
signature, compiles the module once per signature, and converts arguments and results at the boundary."""
from __future__ import annotations

import functools
import inspect
import logging
import operator
import sys
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ...compiler import TARGETS, Executable
from ...errors import CuvilError, ShapeError, UnsupportedError
from ...ir.builder import Builder
from ...ir.core import Module
from ...ir.symbolic import SymExpr
from ...quantize import check_precision, compile_module
from . import emit as E
from .merge import flatten, unflatten
from .signature import CallSpec, Leaf, numpy_to_torch, take_apart
from .source import Source
from .translator import FunctionTranslator
from .accumulate import items_of
from .values import TV, StackedList, Undefined

log = logging.getLogger("cuvil.frontends.python")

OPTIONS = {
    "target": "cpu", "enable_fusion": True, "dynamic": False, "dynamic_dims": None, "fallback": None,
    "passes": (), "runtime_args": (), "unroll": 16, "level": 2, "num_threads": None,
    "precision": "fp32", "calibrate_dataset": None, "calibration": "minmax",  # docs/precision.md
}
_PRECISION_OPTIONS = ("precision", "calibrate_dataset", "calibration")


@dataclass
class Compiled:
    """One signature's compilation: the translated module, its executable and how to rebuild the result."""

    module: Module
    executable: Executable
    structure: Any
    static: list  # per output leaf: a Python value, or OUTPUT where a tensor output goes
    mode: str


_FALLBACK = "python"
_STATIC = "static"  # a signature with symbolic sizes that does not compile: its calls compile their own sizes
_PLAIN_CALL = Executable.__call__
OUTPUT = object()  # marks the result leaves the executable computes


class JitFunction:
    """A Python function compiled from its source, once per input signature.

    Python scalar arguments are compile-time constants (an `if` on them is decided when compiling, and
    each value is its own signature) unless named in `runtime_args`. Globals and closure variables are
    read when a signature is compiled.
    """

    _cuvil_jit = True

    def __init__(self, fn: Callable, *, receiver: tuple = (), **options):
        if not callable(fn):
            raise TypeError(f"cuvil.jit needs a function, got {type(fn).__name__}")
        if inspect.ismethod(fn) and not receiver:  # cuvil.jit(obj.method)
            fn, receiver = fn.__func__, (fn.__self__,)
        functools.update_wrapper(self, fn)
        self.python_function = fn
        self.receiver = receiver  # (self,) for a method bound to its object: a compile-time constant
        self.options = _check_options(fn, options)
        self._full_signature = inspect.signature(fn)
        params = list(self._full_signature.parameters.values())
        self._signature = self._full_signature.replace(parameters=params[len(receiver):])
        self._bound: dict = {}  # id(obj) -> (obj or a weak reference to it, this method bound to obj)
        self.compile_count = 0
        self._source: Optional[Source] = None
        self._cache: dict = {}
        self._last: Optional[Compiled] = None
        self._hot: dict = {}  # the types of positional arguments -> a call that skips binding (see _hot_call)

    def __get__(self, obj, objtype=None):
        """`@cuvil.jit` on a method: `obj.method` is compiled with `self` bound (its attributes are read when a
        signature is compiled, as globals are); each object has its own compilations."""
        if obj is None or self.receiver:
            return self
        hit = self._bound.get(id(obj))
        if hit is not None and _deref(hit[0]) is obj:
            return hit[1]
        if not self._signature.parameters:
            raise TypeError(f"{self.__wrapped__.__qualname__} has no parameter to bind the object to")
        bound = JitFunction(self.python_function, receiver=(obj,), **self.options)
        self._bound[id(obj)] = (_weak(obj), bound)
        return bound

    # -- introspection -------------------------------------------------------------------------------------------
    @property
    def source(self) -> Source:
        if self._source is None:
            self._source = Source(self.python_function)
        return self._source

    @property
    def signatures(self) -> list:
        """The keys compiled so far (one per distinct input signature)."""
        return [k for k, v in self._cache.items() if v is not _FALLBACK and v is not _STATIC]

    @property
    def module(self) -> Optional[Module]:
        """The optimised module of the most recent compilation (what `cuvil.inspect_ir` prints)."""
        return self._last.executable.module if self._last is not None else None

    def lower(self, *args, **kwargs) -> Module:
        """The module the source translates to for these arguments, before any pass runs."""
        return self._translate(self._bind(args, kwargs))[0]

    def inspect(self, *args, **kwargs) -> str:
        """The optimised IR text for these arguments (compiling them if needed)."""
        from ...ir.printer import print_module  # as cuvil.inspect_ir prints (the package is a layer above)

        compiled = self._compile_for(args, kwargs)[1]
        module = compiled.executable.module if compiled is not _FALLBACK else self.lower(*args, **kwargs)
        return print_module(module, 16)

    def __repr__(self) -> str:
        return f"<cuvil.jit {self.__wrapped__.__qualname__}: {len(self.signatures)} signature(s)>"

    # -- calling --------------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if not kwargs:
            hot = self._hot.get(tuple(map(type, args)))
            if hot is not None:  # arguments of these types matched a compiled signature before
                out = hot(args)
                if out is not None:
                    return out
        if any(_is_jax_array(a) for a in (*args, *kwargs.values())):
            return self._jax_route()(*args, **kwargs)
        try:
            spec, compiled = self._compile_for(args, kwargs)
        except Exception as e:  # noqa: BLE001 (with fallback='python', anything that stops compiling falls back)
            if self.options["fallback"] != "python":
                raise
            warnings.warn(f"cuvil.jit: running {self.__wrapped__.__qualname__} as plain Python: {e}", stacklevel=2)
            compiled = _FALLBACK
        if compiled is _FALLBACK:
            return self.python_function(*self.receiver, *args, **kwargs)
        try:
            outputs = compiled.executable(*spec.inputs)
        except ShapeError:
            if not _has_symbolic_sizes(spec):
                raise
            # sizes the symbolic compilation cannot serve (a slice past the end, an index past a size): compile
            # these sizes as they are, where Python's clamping and bounds checks apply
            log.debug("%s: sizes outside the dynamic compilation's range; compiling them statically",
                      self.__wrapped__.__qualname__)
            spec = self._bind(args, kwargs, self._static_options)
            compiled = self._compiled(spec)
            return self._finish(compiled, compiled.executable(*spec.inputs))
        if not kwargs and len(self._hot) < 64:
            hot = _hot_call(args, spec, compiled, self.options["runtime_args"], self._signature)
            if hot is not None:
                self._hot[tuple(map(type, args))] = hot
        return self._finish(compiled, outputs)

    @staticmethod
    def _finish(compiled, outputs):
        outs = iter(outputs)
        leaves = [next(outs) if s is OUTPUT else s for s in compiled.static]
        return unflatten(compiled.structure, [_to_caller(x, compiled.mode) for x in leaves])

    def _jax_route(self):
        """JAX arrays in: the function is JAX code, so it compiles through its jaxpr instead of its source."""
        if getattr(self, "_jax", None) is None:
            from ..jax import jit as jax_jit

            keep = {k: self.options[k] for k in ("target", "passes", "level", *_PRECISION_OPTIONS) if k in self.options}
            self._jax = jax_jit(self.python_function, **keep)
        return self._jax

    def _bind(self, args, kwargs, options=None) -> CallSpec:
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__wrapped__.__qualname__}(): {e}") from None
        bound = self._full_signature.bind(*self.receiver, *args, **kwargs)
        bound.apply_defaults()
        static = tuple(self._full_signature.parameters)[:len(self.receiver)]
        return take_apart(dict(bound.arguments), options or self.options, static)

    @property
    def _static_options(self) -> dict:
        return {**self.options, "dynamic": False, "dynamic_dims": {}}

    def _compile_for(self, args, kwargs) -> tuple:
        """(spec, compiled) for a call. A function that does not compile with symbolic sizes (a split by a
        size, a roll of a dynamic axis) compiles each call's sizes instead, as without `dynamic`."""
        spec = self._bind(args, kwargs)
        if self._cache.get(spec.key) is _STATIC:
            spec = self._bind(args, kwargs, self._static_options)
            return spec, self._compiled(spec)
        try:
            return spec, self._compiled(spec)
        except CuvilError as e:
            if not _has_symbolic_sizes(spec):
                raise
            log.info("%s does not compile with symbolic sizes (%s); compiling each call's sizes",
                     self.__wrapped__.__qualname__, e.message)
            self._cache[spec.key] = _STATIC
        spec = self._bind(args, kwargs, self._static_options)
        return spec, self._compiled(spec)

    def _compiled(self, spec: CallSpec):
        hit = self._cache.get(spec.key)
        if hit is not None:
            return hit
        if self.options["fallback"] == "python":
            self._cache[spec.key] = _FALLBACK  # if this compilation fails, later calls go straight to Python
        module, structure, static = self._translate(spec)
        executable = compile_module(module, target=self.options["target"], passes=self.options["passes"],
                                    level=self.options["level"], num_threads=self.options["num_threads"],
                                    **{k: self.options[k] for k in _PRECISION_OPTIONS})
        self.compile_count += 1
        self._last = self._cache[spec.key] = Compiled(module, executable, structure, static, spec.mode)
        log.debug("compiled %s for %s", self.__wrapped__.__qualname__, spec.key)
        return self._last

    def _translate(self, spec: CallSpec):
        module = Module()
        src = self.source
        module.metadata.update({"source": f"{src.file}:{src.first_line}", "function": src.name,
                                "enable_fusion": str(bool(self.options["enable_fusion"])).lower()})
        b = Builder.new_function(module, "main", [leaf.type for leaf in spec.leaves],
                                 [leaf.name for leaf in spec.leaves])
        args = iter(b.args)
        env = {name: _fill(v, args) for name, v in spec.template.items()}
        cx = E.Context(module, b, spec.mode, self.options)
        result = FunctionTranslator(cx, src).run(env)
        leaves, structure = flatten(_listed(cx, result))
        cx.at(src.location(src.tree))
        outputs, static = [], []
        for leaf in leaves:
            if isinstance(leaf, Undefined):
                raise CuvilError(leaf.why)
            tensor = _is_output_tensor(leaf)
            if tensor:
                outputs.append(E.tensor(cx, leaf).value)
            static.append(OUTPUT if tensor else leaf)
        b.ret(*outputs)
        return module, structure, static


def _weak(obj):
    try:
        return weakref.ref(obj)
    except TypeError:  # an object without weak references is kept alive with its compilations
        return obj


def _deref(ref):
    return ref() if isinstance(ref, weakref.ref) else ref


def _listed(cx, value):
    """The result with lists grown at run time as the Python lists they are (their length known by now)."""
    if isinstance(value, StackedList):
        return items_of(cx, value)
    if isinstance(value, dict):
        return {k: _listed(cx, v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        items = [_listed(cx, v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def _fill(value, args):
    """The argument template with IR arguments where the run-time inputs go."""
    if isinstance(value, Leaf):
        return TV(next(args), value.weak)
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(_fill(v, args) for v in value)
    return value


def _is_output_tensor(leaf) -> bool:
    from ...ir.symbolic import SymExpr

    if isinstance(leaf, (TV, SymExpr, np.ndarray, np.generic)):
        return True
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return False
    raise UnsupportedError(f"a {type(leaf).__name__} cannot be returned from compiled code")


def _to_caller(x, mode: str):
    if not isinstance(x, np.ndarray):
        return x
    return numpy_to_torch(x) if mode == "torch" else x


def _check_options(fn, options: dict) -> dict:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"cuvil.jit got unknown option(s) {', '.join(unknown)}; accepted: {', '.join(OPTIONS)}")
    out = {**OPTIONS, **options}
    if out["target"] not in TARGETS:
        raise ValueError(f"cuvil.jit target must be one of {', '.join(TARGETS)}, got {out['target']!r}")
    check_precision(out["precision"], out["calibration"])
    if out["fallback"] not in (None, "error", "python"):
        raise ValueError(f"cuvil.jit fallback must be 'python' or None, got {out['fallback']!r}")
    params = set(inspect.signature(fn).parameters)
    for what in ("dynamic_dims", "runtime_args"):
        names = set(out[what] or ())
        if names - params:
            raise ValueError(f"cuvil.jit {what} names {', '.join(sorted(names - params))}, which "
                             f"{fn.__qualname__} has no parameter for")
    out["dynamic_dims"] = {k: dict(v) for k, v in (out["dynamic_dims"] or {}).items()}
    out["runtime_args"] = tuple(out["runtime_args"])
    out["passes"] = tuple(out["passes"])
    return out


def _has_symbolic_sizes(spec: CallSpec) -> bool:
    return any(isinstance(d, SymExpr) for leaf in spec.leaves for d in leaf.type.shape)


def _is_jax_array(x) -> bool:
    return type(x).__module__.startswith("jax") and hasattr(x, "shape")  # without importing jax


def _hot_call(args: tuple, spec: CallSpec, compiled: Compiled, runtime_args: tuple, signature):
    """For later calls with arguments of the same types: a function of the arguments that hands the arrays
    straight to the C path, whose exact check of dtypes and sizes (symbolic ones bound) decides whether they
    still fit this compilation; Python scalars must equal this call's. It returns None on any mismatch (the
    general path then binds, converts or compiles). None where the C path or this shape of call is missing."""
    exact = getattr(getattr(compiled.executable, "_run", None), "call_exact", None)
    params = list(signature.parameters)[:len(args)]
    arrays = [i for i, a in enumerate(args) if type(a) in _array_types()]
    scalars = [(i, a) for i, a in enumerate(args) if i not in arrays]
    if exact is None or len(spec.inputs) != len(arrays) or any(
            type(a) not in (bool, int, float) or params[i] in runtime_args for i, a in scalars):
        return None
    finish, convert = _finisher(compiled), any(type(args[i]) is not np.ndarray for i in arrays)

    def hot(args):
        if Executable.__call__ is not _PLAIN_CALL:
            return None  # a profiler wraps Executable calls: the general path goes through them
        if scalars:
            if any(args[i] != v for i, v in scalars):
                return None
            args = [args[i] for i in arrays]
        if convert:
            try:  # tensors that need grad, conjugate or negative views and bf16 refuse .numpy(): the general path
                args = [a if type(a) is np.ndarray else a.numpy() for a in args]
            except (RuntimeError, TypeError):
                return None
        outs = exact(*args)
        return None if outs is None else finish(outs)
    return hot


def _finisher(compiled: Compiled):
    """The outputs as the caller gets them: one array as it is, or as a torch tensor for torch callers."""
    if compiled.structure is not None or compiled.static != [OUTPUT]:
        return functools.partial(JitFunction._finish, compiled)
    if compiled.mode != "torch":
        return operator.itemgetter(0)
    if any(t.dtype.name == "bf16" for t in compiled.executable.output_types):
        return lambda outs: numpy_to_torch(outs[0])
    from_numpy = sys.modules["torch"].from_numpy  # fresh, writable, contiguous outputs: torch shares them
    return lambda outs: from_numpy(outs[0])


def _array_types() -> tuple:
    torch = sys.modules.get("torch")
    return (np.ndarray, torch.Tensor) if torch is not None else (np.ndarray,)
