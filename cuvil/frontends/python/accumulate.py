"""Lists grown by `append` in a loop that runs at run time: a stacked buffer with one row per iteration.

The loop carries a tensor of shape [trips, *item] (zeros at first); the k-th `append` writes row k. After the
loop the list is a `StackedList`, which np.stack / torch.stack / concatenation, len(), indexing and iteration
(for a static trip count) read like the Python list. The trip count must be known before the loop runs (a
range over sizes or ints), and the body must append exactly once per iteration, so the length is fixed.
"""
from __future__ import annotations

import ast
from typing import NamedTuple

from ...errors import UnsupportedError
from ...ir.symbolic import SymExpr
from ...ir.types import TensorType
from .emit import tensor
from .indexing import getitem
from .merge import Slot, slot_of
from .setitem import setitem
from .values import TV, RunTimeValue, StackedList, is_tensorish


class Accumulator(RunTimeValue):
    """The list inside the loop body: `append` writes row `k` of `buffer` (the loop-carried tensor)."""

    def __init__(self, name: str, buffer: TV, k: TV, level: int):
        self.name, self.buffer, self.k, self.level = name, buffer, k, level
        self.item: Slot = None  # the type of what the body appends
        self.appends = 0

    def wanted(self, trips) -> Slot:
        """The buffer's type once the appended items' type is known."""
        return Slot(TensorType(self.item.type.dtype, (trips,) + self.item.type.shape), False)

    def append(self, cx, value) -> None:
        if cx.nesting != self.level:
            raise UnsupportedError(f"{self.name}.append() inside a branch on a tensor value, in a loop that runs at "
                                   "run time, makes the list's length depend on the data; append on every iteration "
                                   "(np.where picks what to append)")
        self.appends += 1
        if self.appends > 1:
            raise UnsupportedError(f"{self.name}.append() runs more than once per iteration of a loop that runs at "
                                   "run time; append one tensor per iteration (np.stack several into one first)")
        if not is_tensorish(value):
            raise UnsupportedError(f"{self.name}.append() of a {type(value).__name__} in a loop that runs at run time: "
                                   "only tensors and numbers can be stacked")
        self.item = slot_of(value)
        if self.buffer.shape[1:] == self.item.type.shape and self.buffer.rank:
            self.buffer = setitem(cx, self.buffer, self.k, value)


def appended_lists(body, env: dict) -> list:
    """Names of lists from before the loop that its body calls `.append` on (and does not rebind)."""
    names = set()
    for node in ast.walk(ast.Module(body=list(body), type_ignores=[])):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.attr in ("append", "extend", "insert", "pop"):
            name = node.func.value.id
            if isinstance(env.get(name), (list, StackedList)):
                names.add(name)
    return sorted(names)


def trip_count(rng):
    """How many times range(start, stop, step) runs, when its bounds are ints or sizes; else None."""
    start, stop, step = rng.start, rng.stop, rng.step
    if not all(isinstance(v, (int, SymExpr)) for v in (start, stop)):
        return None
    n = (stop - start + step - 1) // step if step > 0 else (start - stop - step - 1) // -step
    return max(n, 0) if isinstance(n, int) else n


def stacked(cx, before, rows: TV) -> StackedList:
    """The list after the loop: what it held before, then one item per row."""
    parts = list(before.parts) if isinstance(before, StackedList) else [(tensor(cx, v), False) for v in before]
    return StackedList(parts + [(rows, True)])


class ListMethod(NamedTuple):
    """`out.append` before the call, `out` being an Accumulator or a StackedList."""

    owner: object
    name: str


def list_method(cx, owner, name: str, args, kwargs):
    """`.append` on a list inside (an Accumulator) or after (a StackedList) a loop that runs at run time."""
    if name != "append" or kwargs or len(args) != 1:
        raise UnsupportedError(f".{name}() on a list that a loop running at run time appends to is not supported; "
                               "only .append(item) is")
    if isinstance(owner, Accumulator):
        return owner.append(cx, args[0])
    if cx.nesting:
        raise UnsupportedError("appending inside a branch on a tensor value or a loop that runs at run time is not "
                               "supported here")
    owner.parts.append((tensor(cx, args[0]), False))
    return None


def items_of(cx, sl: StackedList) -> list:
    """The list's items as tensors, when its length is known at compile time."""
    out = []
    for t, rows in sl.parts:
        if rows and not isinstance(t.shape[0], int):
            raise UnsupportedError(f"this list's length ({t.shape[0]}) is only known at run time; use it whole "
                                   "(np.stack / torch.stack / torch.cat of it) instead of its items")
        out.extend([getitem(cx, t, i) for i in range(t.shape[0])] if rows else [t])
    return out
