"""Call signatures: what about the arguments a compilation depends on, and how values cross the boundary.

The key of a call holds, per argument: for tensors the framework, dtype and sizes (a symbolic size stands
for all sizes), for Python scalars their value (they are compile-time constants unless named in
`runtime_args`), and the structure of tuples and lists. Equal keys share one compilation.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import UnsupportedError
from ...ir.symbolic import sym
from ...ir.types import TensorType
from ...ir.dtypes import DType
from .values import dtype_of_array, is_torch_tensor, torch_dtype, torch_module


@dataclass
class Leaf:
    """A run-time input: an IR argument of `type`; `weak` for a Python scalar passed at run time."""

    name: str
    type: TensorType
    weak: bool = False


@dataclass
class CallSpec:
    """One call, taken apart: the cache key, the run-time inputs and how to rebuild the arguments."""

    mode: str = "numpy"
    key: list = field(default_factory=list)
    leaves: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    template: dict = field(default_factory=dict)  # name -> value with Leaf where an input goes


def take_apart(arguments: dict, options: dict, static: tuple = ()) -> CallSpec:
    """`static` names arguments that are compile-time objects of their own (a method's `self`)."""
    spec = CallSpec()
    spec.mode = "torch" if any(_has_torch(v) for v in arguments.values()) else "numpy"
    for name, value in arguments.items():
        spec.template[name] = value if name in static else _arg(spec, name, name, value, options)
    spec.key = (spec.mode, tuple(spec.key))
    return spec


def _has_torch(v) -> bool:
    if isinstance(v, (tuple, list)):
        return any(_has_torch(x) for x in v)
    return is_torch_tensor(v)


def _arg(spec: CallSpec, param: str, path: str, value, options: dict):
    if isinstance(value, (np.ndarray, np.generic)) or is_torch_tensor(value):
        return _tensor(spec, param, path, value, options)
    if isinstance(value, (bool, int, float)) and param in options.get("runtime_args", ()):
        dtype = DType.bool if isinstance(value, bool) else DType.i64 if isinstance(value, int) else DType.f64
        return _input(spec, path, TensorType(dtype, ()), np.asarray(value, dtype.numpy), ("scalar", dtype), True)
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        spec.key.append(("seq", type(value).__name__, len(value)))
        return type(value)(_arg(spec, param, f"{path}_{i}", v, options) for i, v in enumerate(value))
    if value is None or isinstance(value, (bool, int, float, str, type, slice, type(Ellipsis))) \
            or _is_dtype(value):
        spec.key.append(("py", type(value).__name__, value if _hashable(value) else repr(value)))
        return value
    raise UnsupportedError(f"argument '{param}' of type {type(value).__name__} is not supported; pass NumPy arrays, "
                           "torch CPU tensors, Python scalars, or tuples and lists of those")


def _tensor(spec: CallSpec, param: str, path: str, value, options: dict):
    if is_torch_tensor(value):
        if value.device.type != "cpu":
            raise UnsupportedError(f"argument '{param}' is on {value.device}; only CPU tensors are supported")
        arr = torch_to_numpy(value)
    else:
        arr = np.asarray(value)
    dtype = dtype_of_array(arr.dtype)
    shape = tuple(_dim(param, path, i, n, arr.ndim, options) for i, n in enumerate(arr.shape))
    kind = "torch" if is_torch_tensor(value) else "numpy"
    return _input(spec, path, TensorType(dtype, shape), arr, (kind, dtype, tuple(map(str, shape))), False)


def _input(spec: CallSpec, path: str, ttype: TensorType, arr, key, weak: bool) -> Leaf:
    leaf = Leaf(path, ttype, weak)
    spec.key.append(key)
    spec.leaves.append(leaf)
    spec.inputs.append(arr)
    return leaf


def _dim(param: str, path: str, axis: int, n: int, rank: int, options: dict):
    """A static size, or a symbol: named in dynamic_dims, or any size but 0 and 1 with dynamic=True
    (those two stay static, as torch.compile does, so broadcasting stays decidable)."""
    named = {a % rank if rank else a: s for a, s in options.get("dynamic_dims", {}).get(param, {}).items()}
    if path == param and axis in named:
        return sym(named[axis])
    if options.get("dynamic") and n not in (0, 1):
        return sym(f"{path}_{axis}")
    return n


def _is_dtype(v) -> bool:
    torch = torch_module()
    return isinstance(v, np.dtype) or torch is not None and isinstance(v, torch.dtype)


def _hashable(v) -> bool:
    try:
        hash(v)
        return True
    except TypeError:
        return False


# -- crossing the boundary ------------------------------------------------------------------------------------------
def torch_to_numpy(t) -> np.ndarray:
    """Zero-copy for CPU tensors (bf16 through an int16 view, since NumPy has no native bf16)."""
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    torch = torch_module()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def numpy_to_torch(arr: np.ndarray):
    """Zero-copy where torch can share the buffer; a copy for read-only or negatively strided arrays."""
    torch = torch_module()
    if not arr.flags.writeable or any(s < 0 for s in arr.strides):
        arr = np.array(arr)
    if arr.dtype.name == "bfloat16":
        return torch.from_numpy(arr.view(np.int16)).view(torch_dtype(DType.bf16))
    return torch.from_numpy(arr)
