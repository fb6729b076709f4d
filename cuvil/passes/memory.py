"""Memory planning: every intermediate buffer gets a slot in one arena, reused once its value is dead.

Liveness runs over the function in program order with nested regions inlined; a value used inside a
`while` lives to the end of the loop, since the body runs again. Buffers go into slots greedily (the
"shared objects" strategy): a slot holds buffers whose lifetimes do not overlap, and its size is the
largest of them. Sizes may be symbolic; a slot's size is then the maximum of its buffers' sizes, worked
out when a call binds the dimensions, so one plan serves every size. A size computed from the data (NonZero's
count) is planned at its upper bound (cuvil/ir/dynamic.py); the buffer then holds the run-time size packed at its
front.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from ..errors import UnsupportedError
from ..ir.core import Function, Op, Region, Value
from ..ir.dynamic import bounded, data_sizes
from ..ir.symbolic import Dim, evaluate, grows_with
from .manager import Pass

ALIGN = 64


def buffer_bytes(v: Value, bounds: Optional[dict] = None) -> Dim:
    """Bytes of `v`'s buffer, rounded up to the arena alignment, at the upper `bounds` of the data-dependent sizes
    it reads (a size that would not stay under its bound is refused)."""
    numel = v.type.numel
    if bounds and not grows_with(numel, bounds):
        raise UnsupportedError(f"the size {numel} of a buffer of {_what(v)} can shrink as the data-dependent sizes "
                               f"{', '.join(sorted(bounds))} grow, so their upper bounds do not bound it",
                               getattr(v.owner, "loc", None))
    return (bounded(numel, bounds) * v.type.dtype.itemsize + (ALIGN - 1)) // ALIGN * ALIGN


def _what(v: Value) -> str:
    return f"'{v.owner.name}' ({v.type})" if isinstance(v.owner, Op) else f"a region argument ({v.type})"


@dataclass
class MemoryPlan:
    """`slot_of[id(value)]` is the value's slot; slots[k] lists the byte sizes of the buffers it holds."""

    slots: list = field(default_factory=list)
    slot_of: dict = field(default_factory=dict)
    aliases: dict = field(default_factory=dict)  # id(value) -> the value whose buffer it shares

    def slot_size(self, k: int, env: dict) -> int:
        return max(evaluate(d, env) for d in self.slots[k])

    def arena_bytes(self, env: Optional[dict] = None) -> int:
        """The arena size for bound dimensions `env` (static plans need none)."""
        return sum(self.slot_size(k, env or {}) for k in range(len(self.slots)))

    def offset(self, k: int, env: dict) -> int:
        return sum(self.slot_size(j, env) for j in range(k))


def plan_memory(fn: Function, needs_buffer: Callable[[Value], bool], alias_of: Callable[[Value], Optional[Value]]
                ) -> MemoryPlan:
    """Assign arena slots to the values for which `needs_buffer` holds; `alias_of(v)` names a value whose
    buffer `v` shares (views such as reshapes), which extends that buffer's lifetime."""
    plan = MemoryPlan()
    start, end, order = {}, {}, []
    clock = [0]

    def root(v: Value) -> Value:
        while id(v) in plan.aliases:
            v = plan.aliases[id(v)]
        return v

    def define(v: Value) -> None:
        target = alias_of(v)
        if target is not None:
            plan.aliases[id(v)] = target
        elif needs_buffer(v):
            start[id(v)] = clock[0]
            end[id(v)] = clock[0]
            order.append(v)

    def use(v: Value, until: int) -> None:
        r = root(v)
        if id(r) in end:
            end[id(r)] = max(end[id(r)], until)

    def walk(region: Region) -> None:
        for a in region.args:
            define(a)
        for op in region.ops:
            clock[0] += 1
            for r in op.results:
                define(r)
            for sub in op.regions if op.name != "fused" else ():
                walk(sub)
            clock[0] += 1
            for v in op.operands:
                use(v, clock[0])
            if op.name == "while":
                _extend_loop_uses(op, use, clock[0])
    walk(fn.body)
    _assign_slots(plan, order, start, end, data_sizes(fn))
    return plan


def _extend_loop_uses(loop: Op, use, until: int) -> None:
    """Values read inside a loop's regions stay alive until the loop ends."""
    for r in loop.regions:
        for op in r.walk():
            for v in op.operands:
                use(v, until)


def _assign_slots(plan: MemoryPlan, order: list, start: dict, end: dict, bounds: dict) -> None:
    busy_until: list = []  # per slot: the clock at which its last buffer dies
    for v in order:
        size = buffer_bytes(v, bounds)
        free = [k for k in range(len(plan.slots)) if busy_until[k] < start[id(v)]]
        k = _best_slot(plan, free, size)
        if k is None:
            plan.slots.append([])
            busy_until.append(-1)
            k = len(plan.slots) - 1
        if size not in plan.slots[k]:
            plan.slots[k].append(size)
        busy_until[k] = end[id(v)]
        plan.slot_of[id(v)] = k


def _best_slot(plan: MemoryPlan, free: list, size: Dim) -> Optional[int]:
    """A free slot that grows least: the same size if one has it; for static sizes the smallest slot that
    fits, else the largest (it grows); a symbolic size only joins a slot that already holds it."""
    same = [k for k in free if size in plan.slots[k]]
    if same:
        return same[0]
    static = [k for k in free if all(isinstance(d, int) for d in plan.slots[k])]
    if not isinstance(size, int) or not static:
        return None
    fits = [k for k in static if max(plan.slots[k]) >= size]
    if fits:
        return min(fits, key=lambda k: max(plan.slots[k]))
    return max(static, key=lambda k: max(plan.slots[k]))


class PlanMemory(Pass):
    """Attach a `MemoryPlan` to each function as `fn.memory_plan` (an analysis; the IR is unchanged)."""

    name = "plan-memory"

    def __init__(self, needs_buffer: Callable[[Value], bool], alias_of: Callable[[Value], Optional[Value]]):
        self.needs_buffer, self.alias_of = needs_buffer, alias_of

    def run_on_operation(self, fn: Function) -> bool:
        fn.memory_plan = plan_memory(fn, self.needs_buffer, self.alias_of)
        return False
