"""SSA merging: what a variable is after an `if` on a tensor or a run-time loop.

A value that is the same on every path stays as it is (a Python constant stays a constant); tensors and
numbers that differ become one tensor type (a `cond` result or a loop-carried value); anything else
that differs, or a name bound on one path only, becomes `Undefined` and fails where it is used.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from ...ir.types import TensorType
from .emit import Context, tensor
from .values import TV, Undefined, dtype_of_array, is_tensorish, to_dtype, torch_dtype, torch_module, weak_kind


class Slot(NamedTuple):
    """The type a merged value has: a tensor type and whether it stands for a Python number."""

    type: TensorType
    weak: bool


def slot_of(v) -> Slot:
    if isinstance(v, TV):
        return Slot(v.type, v.weak)
    if isinstance(v, np.generic):
        return Slot(TensorType(dtype_of_array(v.dtype), ()), False)
    return Slot(TensorType(weak_kind(v), ()), True)


def join(slots, what: str, promote: str = None) -> Slot:
    """One type for values that meet: weak ones (Python numbers) adapt; strong dtypes must agree, or with
    `promote` (a framework: "numpy" or "torch") take their common dtype, as np.where / torch.where would."""
    strong = [s for s in slots if not s.weak]
    if strong:
        dtypes = {s.type.dtype for s in strong}
        if len(dtypes) > 1 and promote is None:
            raise ShapeError(f"{what} is {' on one path and '.join(sorted(map(str, dtypes)))} on another; "
                             "give it one dtype on every path (cast with astype/to)")
        dtype = promoted(sorted(dtypes, key=str), promote) if len(dtypes) > 1 else strong[0].type.dtype
    else:
        dtype = _weak_join([s.type.dtype for s in slots])
    shaped = [s.type.shape for s in slots if s.type.rank or not s.weak]
    shape = shaped[0] if shaped else ()
    for s in slots:
        if s.type.shape != shape and not (s.weak and s.type.rank == 0) and not _compatible(s.type.shape, shape):
            raise ShapeError(f"{what} has shape [{','.join(map(str, s.type.shape))}] on one path and "
                             f"[{','.join(map(str, shape))}] on another; a merged value keeps one shape")
    return Slot(TensorType(dtype, shape), not strong)


def promoted(dtypes, framework: str) -> DType:
    """The framework's promotion of several dtypes (int32 and float32: float64 in NumPy, float32 in torch)."""
    torch = torch_module()
    if framework == "torch" and torch is not None:
        out = torch_dtype(dtypes[0])
        for d in dtypes[1:]:
            out = torch.promote_types(out, torch_dtype(d))
        return to_dtype(out)
    return dtype_of_array(np.result_type(*[d.numpy for d in dtypes]))


def _weak_join(dtypes) -> DType:
    """Python's own order: bool < int < float."""
    if any(d.is_float for d in dtypes):
        return DType.f64
    return DType.i64 if any(d.is_int for d in dtypes) else DType.bool


def _compatible(a: tuple, b: tuple) -> bool:
    """Equal ranks whose sizes may still be equal at run time (symbolic ones; the op records the relation)."""
    return len(a) == len(b) and all(x == y or isinstance(x, SymExpr) or isinstance(y, SymExpr) for x, y in zip(a, b))


def coerce(cx: Context, v, slot: Slot):
    """`v` as a value of the slot's type, emitted in the current region."""
    return tensor(cx, v, slot.type.dtype, slot.type.shape).value


def same(a, b) -> bool:
    """Values that need no merging: the very same object, or equal Python constants of one type."""
    if a is b:
        return True
    if isinstance(a, (TV, Undefined)) or isinstance(b, (TV, Undefined)) or type(a) is not type(b):
        return False
    try:
        return bool(a == b) if not isinstance(a, (tuple, list)) else len(a) == len(b) and all(map(same, a, b))
    except Exception:  # noqa: BLE001 (objects whose == is not a bool do not merge)
        return False


# -- pytrees of values: tuples of tensors merge leaf by leaf -------------------------------------------------------
def flatten(v) -> tuple:
    """(leaves, structure); tuples (named ones too), lists and dicts are walked, everything else is a leaf."""
    if isinstance(v, dict):
        parts = [flatten(x) for x in v.values()]
        return [leaf for p in parts for leaf in p[0]], ((dict, tuple(v)), tuple(p[1] for p in parts))
    if isinstance(v, (tuple, list)):
        parts = [flatten(x) for x in v]
        return [leaf for p in parts for leaf in p[0]], (type(v), tuple(p[1] for p in parts))
    return [v], None


def unflatten(structure, leaves):
    return _build(structure, iter(leaves))


def _build(structure, leaves):
    """A module-level function: a nested recursive one is a reference cycle that keeps the leaves (a compiled
    call's outputs) alive until the garbage collector runs."""
    if structure is None:
        return next(leaves)
    kind, children = structure
    items = [_build(c, leaves) for c in children]
    if isinstance(kind, tuple):  # (dict, keys)
        return dict(zip(kind[1], items))
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


class Plan(NamedTuple):
    """How one merged leaf comes out: unchanged (`value`), a tensor (`slot`), or undefined (`why`)."""

    value: object = None
    slot: Slot = None
    why: str = None


def plan_leaf(values, what: str, promote: str = None) -> Plan:
    """Decide one leaf across paths (the branches of a cond promote dtypes as the framework would)."""
    if any(isinstance(v, Undefined) for v in values):
        return Plan(why=next(v for v in values if isinstance(v, Undefined)).why)
    if all(same(values[0], v) for v in values[1:]):
        return Plan(value=values[0])
    if all(is_tensorish(v) or isinstance(v, np.generic) and v.dtype.kind in "biuf" for v in values):
        return Plan(slot=join([slot_of(v) for v in values], what, promote))
    kinds = " and ".join(sorted({_kind(v) for v in values}))
    return Plan(why=f"{what} is {kinds} on different paths; give it one kind of value on every path")


def _kind(v) -> str:
    return "a tensor" if isinstance(v, TV) else "None" if v is None else f"a {type(v).__name__}"
