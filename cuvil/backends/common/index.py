"""The index layer the C backends share: how each value of a fused group is computed at an index of the group's
iteration domain.

A data-movement op only changes the index (a broadcast drops coordinates, a transpose permutes them, a reshape keeps
the flat offset), so a whole chain reads each input once and writes each output once. `Idx` is an index as per-axis
C expressions, a flat offset, or the loop variables it is made of; `DomainRefiner` splits a kernel's domain into
loop variables that each data-movement op maps whole; `ValueEmitter` computes values at an index through the
per-op index rules and the elementwise table (c_exprs), memoised per index. A backend's kernel class subclasses
`ValueEmitter`, gives it `_line` and `checked_index`, and lays out the loops or threads around it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...ir.core import Op, Value
from ...ir.dtypes import DType
from ...ir.symbolic import free_symbols
from ...ops import registry
from .c_exprs import ELEMENTWISE, CType, c_dim, elementwise_expr, is_user_elementwise, load

INDEX_OPS = {"broadcast_to", "transpose", "slice", "pad", "concat", "gather", "iota"}
# What a reduction starts from and how it combines (CUVIL_MAX/MIN propagate NaN); integer max/min start at the
# type's limits (INT_LIMITS: the prefix of its C limit macros).
REDUCE_INIT = {"reduce_sum": "0", "reduce_prod": "1", "reduce_max": "-INFINITY", "reduce_min": "INFINITY"}
REDUCE_INT_INIT = {"reduce_max": "{t}_MIN", "reduce_min": "{t}_MAX"}
REDUCE_COMBINE = {"reduce_sum": "{a} + {x}", "reduce_prod": "{a} * {x}", "reduce_max": "CUVIL_MAX({a}, {x})",
                  "reduce_min": "CUVIL_MIN({a}, {x})"}
INT_LIMITS = {DType.i64: "INT64", DType.i32: "INT32", DType.i16: "INT16", DType.i8: "INT8", DType.u8: "UINT8",
              DType.bool: "UINT8"}


@dataclass
class Idx:
    """An index into a tensor of `shape`: per-axis C expressions, a flat C offset, or the loop variables it is made
    of (`factors`: (variable, extent) pairs in the tensor's flat order), from which either follows."""

    shape: tuple
    axes: Optional[tuple] = None
    flat: Optional[str] = None
    factors: Optional[tuple] = None

    def get_flat(self) -> str:
        if self.flat is None and self.axes is None:
            self.flat = group_expr(self.factors)
        if self.flat is None:
            terms, stride = [], "1"
            for axis, size in reversed(list(zip(self.axes, self.shape))):
                if size != 1 and axis != "0":
                    terms.append(axis if stride == "1" else f"{axis} * {stride}")
                stride = c_dim(size) if stride == "1" else f"{stride} * {c_dim(size)}"
            self.flat = " + ".join(reversed(terms)) or "0"
        return self.flat

    def get_axes(self) -> tuple:
        groups = self.groups() if self.axes is None else None
        if groups is not None:
            self.axes = tuple(group_expr(g) for g in groups)
        if self.axes is None:
            axes, stride = [], "1"
            for size in reversed(self.shape):
                axes.append(f"(({self.get_flat()}) / ({stride}) % {c_dim(size)})" if stride != "1"
                            else f"(({self.get_flat()}) % {c_dim(size)})")
                stride = c_dim(size) if stride == "1" else f"{stride} * {c_dim(size)}"
            self.axes = tuple(reversed(axes))
        return self.axes

    def groups(self) -> Optional[list]:
        """The factors that make up each axis, when every axis is made of whole factors."""
        return None if self.factors is None else group_items(self.shape, self.factors, lambda f: f[1])


def group_expr(group: list) -> str:
    terms, stride = [], 1
    for var, size in reversed(group):
        terms.append(var if stride == 1 else f"{var} * {stride}")
        stride *= size
    expr = " + ".join(reversed(terms)) or "0"
    return expr if len(terms) < 2 else f"({expr})"


def group_items(shape, items, size, split=None) -> Optional[list]:
    """`items` (a flat index's factors, outermost first; `size(item)` is its extent) grouped by the axis of
    `shape` they make up. A factor that straddles two axes is split by `split(item, inner extent)` into its
    (outer, inner) parts, or makes the result None when there is no `split`, or when the factor cannot split."""
    items, groups, j = list(items), [], len(items)
    for d in reversed(shape):
        group, need = [], d
        while need != 1:
            if not isinstance(need, int) or j == 0:
                return None
            n = size(items[j - 1])
            if need % n == 0:
                group.append(items[j - 1])
                need //= n
                j -= 1
            elif split is not None and n % need == 0:
                items[j - 1:j] = split(items[j - 1], need)
                j += 1
            else:
                return None
        groups.append(group[::-1])
    return groups[::-1] if j == 0 else None


class _NotRefinable(Exception):
    pass


class DomainRefiner:
    """The loop nest of a pointwise kernel whose reshapes meet transposes or broadcasts: the output's flat index
    split at every axis boundary that the chain of reshapes, transposes and broadcasts behind it reaches, so that
    each of those ops maps whole loop variables to whole coordinates. No index is divided, and the innermost loop
    runs along the data wherever the data allows (an attention head's 64 floats, not a gather over 768)."""

    def __init__(self, outputs: list, args: dict):
        self.outputs, self.args = outputs, args
        self.sizes: list[int] = []
        self.halves: dict[int, tuple] = {}  # a factor split in two: its outer and inner factor

    def factor_sizes(self) -> Optional[list]:
        """The loop extents, outermost first, or None where a shape is symbolic or two boundaries cross."""
        shape = self.outputs[0].type.shape
        if not all(isinstance(d, int) and d > 0 for d in shape):
            return None
        domain = [self._new(d) for d in shape if d != 1]
        try:
            while True:
                self.changed, seen = False, set()
                for v in self.outputs:
                    self._visit(v, domain, seen)
                if not self.changed:
                    return [self.sizes[f] for f in self._expand(domain)]
        except _NotRefinable:
            return None

    def _new(self, size: int) -> int:
        self.sizes.append(size)
        return len(self.sizes) - 1

    def _expand(self, factors: list) -> list:
        out = []
        for f in factors:
            out += self._expand(list(self.halves[f])) if f in self.halves else [f]
        return out

    def _align(self, shape, factors: list) -> tuple[list, list]:
        """Split factors until each axis of `shape` is made of whole ones; returns the groups and the factors."""
        groups = group_items(shape, self._expand(factors), self.sizes.__getitem__, self._split)
        if groups is None:
            raise _NotRefinable
        return groups, [f for g in groups for f in g]

    def _split(self, f: int, inner: int) -> tuple:
        self.halves[f] = (self._new(self.sizes[f] // inner), self._new(inner))
        self.changed = True
        return self.halves[f]

    def _visit(self, v: Value, factors: list, seen: set) -> None:
        groups, factors = self._align(v.type.shape, factors)
        key = (id(v), tuple(factors))
        if key in seen or id(v) in self.args:
            return
        seen.add(key)
        op, x = v.owner, v.owner.operands[0] if v.owner.operands else None
        if op.name == "reshape":
            self._visit(x, factors, seen)
        elif op.name == "transpose":
            inverse = {p: i for i, p in enumerate(op.attrs["perm"])}
            self._visit(x, [f for p in range(len(groups)) for f in groups[inverse[p]]], seen)
        elif op.name == "broadcast_to":
            lead = v.type.rank - x.type.rank
            self._visit(x, [f for i, d in enumerate(x.type.shape) if d != 1 for f in groups[lead + i]], seen)
        elif op.name not in INDEX_OPS:
            for operand in op.operands:
                if operand.type.shape == v.type.shape:
                    self._visit(operand, factors, seen)


def kernel_symbols(op: Op, types: list) -> list:
    """The size symbols a kernel for fused `op` takes: those of `types` and of its ops' dims attributes."""
    out = set().union(*(t.free_symbols for t in types))
    for o in op.regions[0].ops:
        for k, v in o.attrs.items():
            if registry.get_op(o.name).attrs[k].kind == "dims":
                for d in v:
                    out |= free_symbols(d)
    return sorted(out)


def reduce_init(name: str, dtype: DType) -> str:
    """The C start value of reduction `name` accumulating `dtype`."""
    if dtype.is_float or name not in REDUCE_INT_INIT:
        return REDUCE_INIT[name]
    if dtype in (DType.u8, DType.bool) and name == "reduce_max":
        return "0"
    return REDUCE_INT_INIT[name].format(t=INT_LIMITS[dtype])


class ValueEmitter:
    """Values of a fused group at an index, as C statements: subclasses set `arg_index` (id of a region argument ->
    input number), `memo` (a stack of {(value, index): C name}) and `counter`, and define `_line(depth, text)` and
    `checked_index` (a gather's index inside its axis)."""

    arg_index: dict
    memo: list
    counter: int

    def load_input(self, v: Value, flat: str) -> str:
        """Input `v` (a region argument) at flat offset `flat`."""
        return load(v.type.dtype, f"in{self.arg_index[id(v)]}", flat)

    def elementwise(self, op: Op, operands: list) -> str:
        return elementwise_expr(op.name, operands, op.attrs, op.operands[-1].type.dtype)

    # -- values at an index ------------------------------------------------------------------------
    def value(self, v: Value, idx: Idx, depth: int) -> str:
        key = (id(v), idx.axes if idx.axes is not None else idx.get_flat())
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        expr = self._compute(v, idx, depth)
        name = f"t{self.counter}"
        self.counter += 1
        self._line(depth, f"{CType(v.type.dtype).name} {name} = {expr};")
        self.memo[-1][key] = name
        return name

    def _compute(self, v: Value, idx: Idx, depth: int) -> str:
        if id(v) in self.arg_index:
            return self.load_input(v, idx.get_flat())
        op: Op = v.owner
        rule = _INDEX_RULES.get(op.name)
        if rule is not None:
            return rule(self, op, v, idx, depth)
        if op.name == "full":
            return CType(op.attrs["dtype"]).lit(op.attrs["value"])
        if op.name == "dim_size":
            return f"({CType(op.attrs['dtype']).name}){c_dim(op.attrs['dim'][0])}"
        same = [x.type.shape == idx.shape for x in op.operands]
        operands = [self.value(x, Idx(x.type.shape, idx.axes, idx.flat, idx.factors if s else None), depth)
                    for x, s in zip(op.operands, same)]
        return self.elementwise(op, operands)



# -- index rules: how each data-movement op maps its output index to its operand's ------------------------
def _broadcast(k: "ValueEmitter", op: Op, v: Value, idx: Idx, depth: int) -> str:
    x = op.operands[0]
    if x.type.numel == 1:
        return k.value(x, Idx(x.type.shape, ("0",) * x.type.rank, "0"), depth)
    groups, lead = idx.groups(), v.type.rank - x.type.rank
    if groups is not None:
        kept = tuple(f for i, d in enumerate(x.type.shape) if d != 1 for f in groups[lead + i])
        return k.value(x, Idx(x.type.shape, factors=kept), depth)
    axes = idx.get_axes()
    sub = tuple("0" if d == 1 else axes[lead + i] for i, d in enumerate(x.type.shape))
    return k.value(x, Idx(x.type.shape, sub), depth)


def _reshape(k: "ValueEmitter", op: Op, v: Value, idx: Idx, depth: int) -> str:
    x = op.operands[0]
    if idx.factors is not None:
        return k.value(x, Idx(x.type.shape, factors=idx.factors), depth)
    return k.value(x, Idx(x.type.shape, None, idx.get_flat()), depth)


def _transpose(k: "ValueEmitter", op: Op, v: Value, idx: Idx, depth: int) -> str:
    x, perm, groups = op.operands[0], op.attrs["perm"], idx.groups()
    if groups is not None:
        inverse = {p: i for i, p in enumerate(perm)}
        return k.value(x, Idx(x.type.shape, factors=tuple(f for p in range(len(perm)) for f in groups[inverse[p]])),
                       depth)
    axes = idx.get_axes()
    sub = [None] * len(perm)
    for i, p in enumerate(perm):
        sub[p] = axes[i]
    return k.value(x, Idx(x.type.shape, tuple(sub)), depth)


def _slice(k: "ValueEmitter", op: Op, v: Value, idx: Idx, depth: int) -> str:
    x, a = op.operands[0], op.attrs
    sub = list(idx.get_axes())
    for axis, start, step in zip(a["axes"], a["starts"], a["steps"]):
        sub[axis] = f"({c_dim(start)} + {sub[axis]} * {step})"
    return k.value(x, Idx(x.type.shape, tuple(sub)), depth)


def _pad(k: "ValueEmitter", op: Op, v: Value, idx: Idx, depth: int) -> str:
    x, a = op.operands[0], op.attrs
    rank = x.type.rank
    axes = idx.get_axes()
    sub, inside = [], []
    for i in range(rank):
        size = c_dim(x.type.shape[i])
        j = f"({axes[i]} - {c_dim(a['pads'][i])})"
        if a["mode"] == "edge":
            j = f"CUVIL_CLAMP({j}, 0, {size} - 1)"
        elif a["mode"] == "reflect":
            j = f"({j} < 0 ? -{j} : ({j} >= {size} ? 2 * ({size} - 1) - {j} : {j}))"
            j = f"CUVIL_CLAMP({j}, 0, {size} - 1)"
        else:
            inside.append(f"({j} >= 0 && {j} < {size})")
            j = f"CUVIL_CLAMP({j}, 0, {size} - 1)"
        sub.append(j)
    loaded = k.value(x, Idx(x.type.shape, tuple(sub)), depth)
    if not inside:
        return loaded
    fill = CType(v.type.dtype).lit(a["value"])
    return f"(({' && '.join(inside)}) ? {loaded} : {fill})"


def _concat(k: "ValueEmitter", op: Op, v: Value, idx: Idx, depth: int) -> str:
    axis = op.attrs["axis"]
    axes = idx.get_axes()
    offset, pieces = "0", []
    for x in op.operands:
        size = c_dim(x.type.shape[axis])
        local = f"CUVIL_CLAMP({axes[axis]} - {offset}, 0, {size} - 1)"
        sub = axes[:axis] + (local,) + axes[axis + 1:]
        pieces.append((f"{axes[axis]} < {offset} + {size}", k.value(x, Idx(x.type.shape, sub), depth)))
        offset = f"({offset} + {size})"
    expr = pieces[-1][1]
    for cond, val in reversed(pieces[:-1]):
        expr = f"({cond} ? {val} : {expr})"
    return expr


def wrapped_index(op: Op, raw: str, size: str) -> str:
    """C for gather index `raw` into an axis of `size`: negative ones count from the end unless the op says they are
    errors (torch's embedding), in which case they stay negative and fail the caller's [0, size) check."""
    return f"((int64_t){raw} < 0 ? (int64_t){raw} + {size} : (int64_t){raw})" if op.attrs.get("negative", True) else \
        f"(int64_t){raw}"


def _gather(k: "ValueEmitter", op: Op, v: Value, idx: Idx, depth: int) -> str:
    data, indices = op.operands
    axis, q = op.attrs["axis"], indices.type.rank
    axes = idx.get_axes()
    raw = k.value(indices, Idx(indices.type.shape, axes[axis:axis + q]), depth)
    j = k.checked_index(op, raw, axis, c_dim(data.type.shape[axis]), depth)
    sub = axes[:axis] + (j,) + axes[axis + q:]
    return k.value(data, Idx(data.type.shape, sub), depth)


def _iota(k: "ValueEmitter", op: Op, v: Value, idx: Idx, depth: int) -> str:
    return f"({CType(op.attrs['dtype']).name}){idx.get_axes()[op.attrs['axis']]}"


_INDEX_RULES = {"broadcast_to": _broadcast, "reshape": _reshape, "transpose": _transpose, "slice": _slice,
                "pad": _pad, "concat": _concat, "gather": _gather, "iota": _iota}
LOOP_OPS = frozenset(_INDEX_RULES) | {"full", "dim_size", "cast"} | frozenset(ELEMENTWISE)


def is_loop_op(name: str) -> bool:
    """Built-in loop ops, and user elementwise ops that brought a C expression."""
    return name in LOOP_OPS or is_user_elementwise(name)
