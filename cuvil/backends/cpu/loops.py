"""Loop kernels: one C function per `fused` group of elementwise, data-movement and reduction ops.

Every value of the group is computed at an index of the iteration domain; data-movement ops only change
the index (a broadcast drops coordinates, a transpose permutes them, a reshape keeps the flat offset), so
the whole chain reads each input once and writes each output once. Loads that a select may discard
(concat, pad) read at a clamped index, and a gather checks its index (see LoopKernel), so no input is read out of
bounds for any input the signature accepts.

Loop shapes: a flat `omp parallel for simd` loop when no op needs per-axis coordinates, else a nest whose
outer axes are threaded and whose innermost axis is `omp simd`. A `reduce` group nests the reduced axes
inside the kept ones and accumulates in a register; a long float sum or product in blocks of REDUCE_BLOCK elements
whose results add into a wider type, so 2^26 ones sum to 2^26 and the error stays near NumPy's pairwise bound.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...ir.core import Op, Value
from ...ir.dtypes import DType
from ...ir.symbolic import free_symbols
from ...ops import registry
from .c_exprs import ELEMENTWISE, STORAGE, CType, c_dim, c_string, elementwise_expr, is_user_elementwise, load, \
    store_value

PARALLEL_MIN_ELEMENTS = 1 << 15  # below this a kernel runs on one thread: forking costs more than it saves
FLAT_CHUNK = 1024  # elements per item of a flat loop on the pool: whole vectors and cache lines per chunk


def parallel_clause(work: str) -> str:
    """OpenMP clauses for a threaded loop over `work` elements: the team size is CUVIL_NUM_THREADS (as the
    kernel library's), and small loops stay on one thread."""
    return f"if(({work}) >= {PARALLEL_MIN_ELEMENTS}) num_threads(cuvil_get_num_threads()) schedule(static)"


@dataclass
class PoolRange:
    """A kernel's threaded loop run on Cuvil's pool (cuvil_parallel_for): `items` iterations of `work` elements each,
    its lines from `start` in the kernel's body moved into a range function over [lo_, hi_)."""

    items: str
    work: str
    start: int
INDEX_OPS = {"broadcast_to", "transpose", "slice", "pad", "concat", "gather", "iota"}
REDUCE_INIT = {"reduce_sum": "0", "reduce_prod": "1", "reduce_max": "-INFINITY", "reduce_min": "INFINITY"}
OMP_REDUCTION = {"reduce_sum": "+", "reduce_prod": "*", "reduce_max": "max", "reduce_min": "min"}
REDUCE_LANES = 64  # partial results per reduction: four AVX-512 vectors of f32
# Float sums and products accumulate REDUCE_BLOCK elements in their own type (vectorised), then add each block's
# result into a wider one (double; long double for f64): a float accumulator stops growing at 2^24 times its
# increment (2^26 ones summed to 2^25), blocks keep the error near NumPy's pairwise bound. Reductions of at most one
# block are unchanged.
REDUCE_BLOCK = 4096
WIDE_REDUCTIONS = frozenset({"reduce_sum", "reduce_prod"})
REDUCE_INT_INIT = {"reduce_max": "{t}_MIN", "reduce_min": "{t}_MAX"}
REDUCE_COMBINE = {"reduce_sum": "{a} + {x}", "reduce_prod": "{a} * {x}", "reduce_max": "CUVIL_MAX({a}, {x})",
                  "reduce_min": "CUVIL_MIN({a}, {x})"}
_INT_LIMITS = {DType.i64: "INT64", DType.i32: "INT32", DType.i16: "INT16", DType.i8: "INT8", DType.u8: "UINT8",
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
            self.flat = _group_expr(self.factors)
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
            self.axes = tuple(_group_expr(g) for g in groups)
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
        return None if self.factors is None else _group_items(self.shape, self.factors, lambda f: f[1])


def _product(sizes) -> str:
    """The C product of loop extents (1 for none)."""
    return " * ".join(f"({c_dim(d)})" for d in sizes) or "1"


def _lane_chunks(loops: list) -> bool:
    """Whether the innermost reduced loop is long enough, and a static multiple of REDUCE_LANES, to run in lanes."""
    size = loops[-1][1] if loops else 1
    return isinstance(size, int) and size >= 4 * REDUCE_LANES and size % REDUCE_LANES == 0


def _block_split(loops: list, unit: int) -> Optional[tuple]:
    """How a reduction's loops (outermost first; `unit` elements an iteration of the innermost) split into blocks of
    about REDUCE_BLOCK elements: (k, step) where loops[k:] run whole inside a block and loop k - 1 advances `step`
    iterations a block; None when the whole reduction is one block (static and at most REDUCE_BLOCK)."""
    inner, k = unit, len(loops)
    while k and isinstance(loops[k - 1][1], int) and inner * loops[k - 1][1] <= REDUCE_BLOCK:
        inner *= loops[k - 1][1]
        k -= 1
    return None if k == 0 else (k, max(1, REDUCE_BLOCK // inner))


def _positive(d) -> bool:
    return isinstance(d, int) and d > 0


def _group_expr(group: list) -> str:
    terms, stride = [], 1
    for var, size in reversed(group):
        terms.append(var if stride == 1 else f"{var} * {stride}")
        stride *= size
    expr = " + ".join(reversed(terms)) or "0"
    return expr if len(terms) < 2 else f"({expr})"


def _group_items(shape, items, size, split=None) -> Optional[list]:
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
        groups = _group_items(shape, self._expand(factors), self.sizes.__getitem__, self._split)
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


class LoopKernel:
    """Emits the C function for one `fused` op of kind "loop" or "reduce".

    A gather's indices are checked against its axis. Indices that are an input of the kernel (`prechecked`: gather op
    id -> input number) are checked by the caller before the call (codegen, c_exprs.index_check). A kernel that
    computes indices itself (`checks`: an arange of positions) returns an int: nonzero when some index was outside
    its axis, which it then reads as 0 instead. Its caller then runs the `diagnose` copy, the same loops in order
    without OpenMP, which returns the error of the first index out of range (cuvil_index_error), or 0 after
    computing the outputs."""

    def __init__(self, op: Op, name: str, diagnose: bool = False):
        self.op, self.name, self.diagnose = op, name, diagnose
        region = op.regions[0]
        self.arg_index = {id(a): i for i, a in enumerate(region.args)}
        gathers = [o for o in region.ops if o.name == "gather"]
        self.prechecked = {id(o): self.arg_index[id(o.operands[1])] for o in gathers
                           if id(o.operands[1]) in self.arg_index}
        self.checks = any(id(o) not in self.prechecked for o in gathers)
        region = op.regions[0]
        self.args = region.args
        self.outputs = list(region.terminator.operands)
        self.lines: list[str] = []
        self.memo: list[dict] = [{}]
        self.counter = 0
        self.pool: Optional[PoolRange] = None  # set by the threaded loop, if it runs on the pool
        self.reduce_op = next((o for o in region.ops if o.name in REDUCE_INIT), None) if op.attrs["kind"] == "reduce" \
            else None
        types = [a.type for a in self.args] + [v.type for v in self.outputs]
        if self.reduce_op is not None:
            types.append(self.reduce_op.operands[0].type)
        self.symbols = sorted(set().union(*(t.free_symbols for t in types)) | self._attr_symbols())

    def _attr_symbols(self) -> set:
        out = set()
        for o in self.op.regions[0].ops:
            for k, v in o.attrs.items():
                if registry.get_op(o.name).attrs[k].kind == "dims":
                    for d in v:
                        out |= free_symbols(d)
        return out

    # -- the C function ----------------------------------------------------------------------------
    def emit(self, attributes: str = "") -> str:
        """The kernel's C (after the struct and range function of a loop on the pool), `attributes` on its head."""
        params = [(f"const {STORAGE[a.type.dtype]} *restrict", f"in{i}") for i, a in enumerate(self.args)]
        params += [(f"{STORAGE[v.type.dtype]} *restrict", f"out{i}") for i, v in enumerate(self.outputs)]
        params += [("int64_t", f"s_{s}") for s in self.symbols]
        ret = "int" if self.checks else "void"
        head = f"{attributes}static {ret} {self.name}({', '.join(f'{t} {n}' for t, n in params) or 'void'})"
        if self.checks and not self.diagnose:
            self._line(1, "int bad = 0;")
            for o in self.op.regions[0].ops:  # an empty axis has no element to read instead: diagnose at once
                if o.name == "gather" and id(o) not in self.prechecked and \
                        not _positive(o.operands[0].type.shape[o.attrs["axis"]]):
                    self._line(1, f"if ({c_dim(o.operands[0].type.shape[o.attrs['axis']])} <= 0) return 1;")
        if self.reduce_op is not None:
            self._emit_reduce()
        else:
            self._emit_pointwise()
        prefix = ""
        if self.pool is not None:
            prefix = self._range_function(params)
        if self.checks:
            self._line(1, "return 0;" if self.diagnose else "return bad;")
        return prefix + head + "\n{\n" + "\n".join(self.lines) + "\n}\n"

    def _range_function(self, params: list) -> str:
        """Moves the threaded loop into `NAME_range(args, lo_, hi_)` and calls it through the pool, which runs small
        loops on the calling thread; returns the struct of arguments and the range function."""
        r, name = self.pool, self.name
        body, self.lines = self.lines[r.start:], self.lines[:r.start]
        fields = "".join(f" {t.replace(' *restrict', ' *')} {n};" for t, n in params)  # an output at least
        unpack = "".join(f"    {t} {n} = a_->{n};\n" for t, n in params)
        bad = "    int bad = 0;\n" if self.checks else ""
        out = (f"typedef struct {{{fields} }} {name}_args;\n"
               f"static int {name}_range(void *p_, int64_t lo_, int64_t hi_)\n{{\n"
               f"    const {name}_args *a_ = p_;\n{unpack}{bad}" + "\n".join(body) +
               f"\n    return {'bad' if self.checks else '0'};\n}}\n")
        args = ", ".join(n for _, n in params)
        self._line(1, f"{name}_args a_ = {{{args}}};")
        call = f"cuvil_parallel_for({r.items}, {r.work}, {name}_range, &a_)"
        self._line(1, f"bad |= {call};" if self.checks else f"(void){call};")
        return out

    def _open_threaded(self, depth: int, joined: list, work: str) -> int:
        """The outer loops of a nest, threaded: one loop, or two as one (OpenMP's collapse(2)), run on the pool over
        [lo_, hi_) of their iterations, each of `work` elements; a kernel's diagnosing copy keeps plain loops."""
        if self.diagnose or depth != 1:
            for var, size in joined:
                self._line(depth, f"for (int64_t {var} = 0; {var} < {c_dim(size)}; {var}++) {{")
                depth += 1
            return depth
        items = " * ".join(f"({c_dim(size)})" for _, size in joined)
        self.pool = PoolRange(items, work, len(self.lines))
        if len(joined) == 1:
            self._line(depth, f"for (int64_t {joined[0][0]} = lo_; {joined[0][0]} < hi_; {joined[0][0]}++) {{")
            return depth + 1
        (v0, _), (v1, n1) = joined  # the chunk's rows of v0, each over its part of v1: one division per chunk
        n1 = f"(int64_t)({c_dim(n1)})"
        self._line(depth, f"for (int64_t {v0} = lo_ / {n1}; {v0} * {n1} < hi_; {v0}++) {{")
        self._line(depth + 1, f"for (int64_t {v1} = CUVIL_MAX(lo_ - {v0} * {n1}, (int64_t)0); "
                              f"{v1} < CUVIL_MIN(hi_ - {v0} * {n1}, {n1}); {v1}++) {{")
        return depth + 2

    def checked_index(self, op: Op, raw: str, axis: int, size: str, depth: int) -> str:
        """Index `raw` of `op` into an axis of `size`, negative ones counted from the end: a C expression inside the
        axis. Unless the caller checked it, the checked kernel ORs an index outside it into `bad` (one compare, shared
        with the select), and the diagnosing copy returns its error."""
        j = f"t{self.counter}"
        self.counter += 1
        self._line(depth, f"const int64_t {j} = (int64_t){raw} < 0 ? (int64_t){raw} + {size} : (int64_t){raw};")
        inside = f"((uint64_t){j} < (uint64_t){size})"
        if id(op) in self.prechecked:
            return j
        if self.diagnose:
            self._line(depth, f"if (!{inside}) return cuvil_index_error({c_string(op.name)}, {c_string(str(op.loc))}, "
                              f"(int64_t){raw}, {axis}, {size});")
            return j
        self._line(depth, f"bad |= !{inside};")
        return f"({inside} ? {j} : 0)"

    def _line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def _pragma(self, depth: int, directive: str, flags: bool = True) -> None:
        """An OpenMP directive. The diagnosing copy of a checked kernel has none: it runs in order, so it can return
        at the first index out of range. The checked kernel ORs `bad` across the threads and lanes of every construct
        that may take the clause (`flags`; not a worksharing loop inside a parallel region that already has it)."""
        if self.diagnose:
            return
        self._line(depth, f"#pragma {directive}" + (" reduction(|:bad)" if flags and self.checks else ""))

    def _needs_axes(self) -> bool:
        return any(o.name in INDEX_OPS for o in self.op.regions[0].ops)

    def _emit_pointwise(self) -> None:
        shape = self.outputs[0].type.shape
        numel = c_dim(self.outputs[0].type.numel)
        if not self._needs_axes() or len(shape) <= 1:
            self._flat_loop(numel)
            idx = Idx(shape, ("i",) if len(shape) == 1 else None, "i")
            self._store_outputs(idx, 2)
            self._line(1, "}")
            return
        sizes = DomainRefiner(self.outputs, self.arg_index).factor_sizes()
        if sizes:
            factors = tuple((f"i{k}", size) for k, size in enumerate(sizes))
            depth = self._open_nest(tuple(v for v, _ in factors), sizes)
            self._store_outputs(Idx(shape, factors=factors), depth)
        else:
            axes = tuple(f"i{k}" for k in range(len(shape)))
            depth = self._open_nest(axes, shape)
            self._store_outputs(Idx(shape, axes), depth)
        self._close(depth)

    def _flat_loop(self, numel: str) -> None:
        """`for i` over all elements, in chunks of FLAT_CHUNK on the pool (the diagnosing copy: one plain loop)."""
        if self.diagnose:
            self._line(1, f"for (int64_t i = 0; i < {numel}; i++) {{")
            return
        items = f"(({numel}) + {FLAT_CHUNK - 1}) / {FLAT_CHUNK}"
        self.pool = PoolRange(items, str(FLAT_CHUNK), len(self.lines))
        self._line(1, f"const int64_t end_ = CUVIL_MIN(hi_ * {FLAT_CHUNK}, (int64_t)({numel}));")
        self._pragma(1, "omp simd")
        self._line(1, f"for (int64_t i = lo_ * {FLAT_CHUNK}; i < end_; i++) {{")

    def _open_nest(self, axes, shape, depth: int = 1) -> int:
        """A nest over `shape`, its outer loops threaded, its innermost `omp simd`."""
        loops = list(zip(axes, shape))
        joined = 2 if len(loops) > 2 else 1
        depth = self._open_threaded(depth, loops[:joined], _product(size for _, size in loops[joined:]))
        for k in range(joined, len(loops)):
            a, size = loops[k]
            if k == len(loops) - 1:
                self._pragma(depth, "omp simd")
            self._line(depth, f"for (int64_t {a} = 0; {a} < {c_dim(size)}; {a}++) {{")
            depth += 1
        return depth

    def _close(self, depth: int, until: int = 1) -> None:
        for d in range(depth - 1, until - 1, -1):
            self._line(d, "}")

    def _store_outputs(self, idx: Idx, depth: int) -> None:
        for i, v in enumerate(self.outputs):
            at = idx if v.type.shape == idx.shape else Idx(v.type.shape, None, idx.get_flat(), idx.factors)  # reshaped
            expr = self.value(v, at, depth)
            self._line(depth, f"out{i}[{idx.get_flat()}] = {store_value(v.type.dtype, expr)};")

    def _emit_reduce(self) -> None:
        red = self.reduce_op
        src, out_t = red.operands[0].type, red.results[0].type
        reduced = set(red.attrs["axes"])
        groups = self._source_groups(red.operands[0])
        if groups is None:  # one loop per axis
            groups = [[(f"i{k}", d)] for k, d in enumerate(src.shape)]
            src_idx = Idx(src.shape, tuple(g[0][0] for g in groups))
        else:
            src_idx = Idx(src.shape, factors=tuple(f for g in groups for f in g))
        kept_loops = [f for k, g in enumerate(groups) if k not in reduced for f in g]
        reduced_loops = [f for k, g in enumerate(groups) if k in reduced for f in g]
        out_axes = tuple("0" if k in reduced else _group_expr(g) for k, g in enumerate(groups))
        if not red.attrs["keepdims"]:
            out_axes = tuple(a for k, a in enumerate(out_axes) if k not in reduced)
        par = parallel_clause(c_dim(src.numel))
        joined = min(2, len(kept_loops))
        rest = _product(size for _, size in kept_loops[joined:] + reduced_loops)
        depth = self._open_threaded(1, kept_loops[:joined], rest) if kept_loops else 1
        for var, size in kept_loops[joined:]:
            self._line(depth, f"for (int64_t {var} = 0; {var} < {c_dim(size)}; {var}++) {{")
            depth += 1
        ct = CType(out_t.dtype)
        init = REDUCE_INIT[red.name]
        if not ct.is_float and red.name in REDUCE_INT_INIT:
            unsigned_min = out_t.dtype in (DType.u8, DType.bool) and red.name == "reduce_max"
            init = "0" if unsigned_min else REDUCE_INT_INIT[red.name].format(t=_INT_LIMITS[out_t.dtype])
        self._line(depth, f"{ct.name} acc = {init};")
        lanes = not kept_loops and _lane_chunks(reduced_loops)
        units = self._lane_units(reduced_loops) if lanes else reduced_loops
        blocks = _block_split(units, REDUCE_LANES if lanes else 1) if ct.is_float and red.name in WIDE_REDUCTIONS \
            else None
        if blocks is not None:
            self._reduce_in_blocks(units, blocks, src_idx, ct.name, init, par, depth,
                                   reduced_loops[-1][0] if lanes else None, not kept_loops)
        elif lanes:
            self._reduce_in_lanes(reduced_loops, src_idx, ct.name, init, par, depth)
        else:
            self._reduce_in_order(reduced_loops, src_idx, par, depth, threaded=not kept_loops)
        out_idx = Idx(out_t.shape, out_axes)
        self.memo.append({(id(red.results[0]), out_axes): "acc", (id(red.results[0]), out_idx.get_flat()): "acc"})
        self._store_outputs(out_idx, depth)
        self.memo.pop()
        self._close(depth)

    def _combine(self, acc: str, x: str) -> str:
        return f"{acc} = {REDUCE_COMBINE[self.reduce_op.name].format(a=acc, x=x)};"

    def _reduce_in_order(self, loops: list, src_idx: Idx, par: str, depth: int, threaded: bool) -> None:
        """One accumulator, `omp simd` on the innermost loop (or, for a full reduction, threads splitting it).
        OpenMP combines vector lanes and threads with a plain max/min, which drops a NaN, so a float max/min also
        ORs a NaN flag that restores it."""
        red = self.reduce_op
        clause = f"reduction({OMP_REDUCTION[red.name]}:acc)"
        flag = red.name in ("reduce_max", "reduce_min") and CType(red.results[0].type.dtype).is_float
        if flag:
            self._line(depth, "int nan_seen = 0;")
            clause += " reduction(|:nan_seen)"
        inner = depth
        for n, (var, size) in enumerate(loops):
            if threaded and n == 0:
                collapse = f" collapse({len(loops)})" if len(loops) > 1 else ""
                self._pragma(inner, f"omp parallel for simd {clause}{collapse} {par}")
            elif not threaded and n == len(loops) - 1:
                self._pragma(inner, f"omp simd {clause}")
            self._line(inner, f"for (int64_t {var} = 0; {var} < {c_dim(size)}; {var}++) {{")
            inner += 1
        self.memo.append({})
        x = self.value(red.operands[0], src_idx, inner)
        self.memo.pop()
        if flag:
            self._line(inner, f"nan_seen |= {x} != {x};")
        self._line(inner, self._combine("acc", x))
        self._close(inner, depth)
        if flag:
            self._line(depth, "if (nan_seen) acc = NAN;")

    def _reduce_in_lanes(self, loops: list, src_idx: Idx, ctype: str, init: str, par: str, depth: int) -> None:
        """A full reduction with the innermost loop in chunks of REDUCE_LANES, each lane its own partial result, so
        the vector operations do not wait on one another: one accumulator is bound by the add's latency (a 2 MB sum
        held in the two cores' L2: 21 us one way, 9 us in lanes; max 32 and 18.5 us). Each thread combines its lanes,
        then its result into the shared one, with the op's own combination (a NaN survives max and min)."""
        self._pragma(depth, f"omp parallel {par.replace(' schedule(static)', '')}")
        self._line(depth, "{")
        body = depth + 1
        self._lanes_init(body, ctype, init)
        inner, shared = body, True
        for outer_var, extent in self._lane_units(loops):
            if shared and extent != 1:  # threads share the first loop that has more than one iteration
                self._pragma(inner, "omp for schedule(static)", flags=False)
                shared = False
            self._line(inner, f"for (int64_t {outer_var} = 0; {outer_var} < {c_dim(extent)}; {outer_var}++) {{")
            inner += 1
        self._lanes_step(loops[-1][0], src_idx, inner)
        self._close(inner, body)
        self._lanes_combine(body)
        self._pragma(body, "omp critical", flags=False)
        self._line(body, self._combine("acc", "part[0]"))
        self._line(depth, "}")

    @staticmethod
    def _lane_units(loops: list) -> list:
        """The loops of a reduction in lanes: the innermost counts chunks of REDUCE_LANES elements."""
        var, size = loops[-1]
        return loops[:-1] + [(f"{var}_c", size // REDUCE_LANES)]

    def _lanes_init(self, depth: int, ctype: str, init: str) -> None:
        self._line(depth, f"{ctype} part[{REDUCE_LANES}];")
        self._line(depth, f"for (int j = 0; j < {REDUCE_LANES}; j++) part[j] = {init};")

    def _lanes_step(self, var: str, src_idx: Idx, depth: int) -> None:
        """One chunk: element `var` of each lane into the lane's partial result."""
        self._pragma(depth, "omp simd")
        self._line(depth, f"for (int64_t {var}_l = 0; {var}_l < {REDUCE_LANES}; {var}_l++) {{")
        self._line(depth + 1, f"const int64_t {var} = {var}_c * {REDUCE_LANES} + {var}_l;")
        self.memo.append({})
        x = self.value(self.reduce_op.operands[0], src_idx, depth + 1)
        self.memo.pop()
        self._line(depth + 1, self._combine(f"part[{var}_l]", x))
        self._line(depth, "}")

    def _lanes_combine(self, depth: int) -> None:
        width = REDUCE_LANES // 2
        while width:  # halving, so the lanes combine in vectors rather than one after another
            self._line(depth, f"for (int j = 0; j < {width}; j++) {self._combine('part[j]', f'part[j + {width}]')}")
            width //= 2

    def _reduce_in_blocks(self, units: list, blocks: tuple, src_idx: Idx, ctype: str, init: str, par: str,
                          depth: int, lane_var: Optional[str], threaded: bool) -> None:
        """A long float sum or product in blocks (see REDUCE_BLOCK): each block accumulates in `ctype`, in order or
        in lanes (of `lane_var`), and adds into the wider `wide`; for a full reduction, threads share the blocks."""
        red, (k, step) = self.reduce_op, blocks
        var, size = units[k - 1]
        wide = "long double" if ctype == "double" else "double"
        self._line(depth, f"{wide} wide = {init};")
        d = depth
        if threaded:
            collapse = f" collapse({k})" if k > 1 else ""
            self._pragma(d, f"omp parallel for reduction({OMP_REDUCTION[red.name]}:wide){collapse} {par}")
        for outer_var, extent in units[:k - 1]:
            self._line(d, f"for (int64_t {outer_var} = 0; {outer_var} < {c_dim(extent)}; {outer_var}++) {{")
            d += 1
        self._line(d, f"for (int64_t {var}_b = 0; {var}_b < {c_dim(size)}; {var}_b += {step}) {{")
        self._line(d + 1, f"const int64_t {var}_e = CUVIL_MIN({var}_b + {step}, (int64_t){c_dim(size)});")
        part = self._block(var, units[k:], src_idx, ctype, init, d + 1, lane_var)
        self._line(d + 1, self._combine("wide", part))
        self._close(d + 1, depth)
        self._line(depth, f"acc = ({ctype})wide;")

    def _block(self, var: str, inner: list, src_idx: Idx, ctype: str, init: str, depth: int,
               lane_var: Optional[str]) -> str:
        """One block: `var` from {var}_b to {var}_e around the `inner` loops; returns the block's result."""
        red = self.reduce_op
        if lane_var is not None:
            self._lanes_init(depth, ctype, init)
        else:
            self._line(depth, f"{ctype} blk = {init};")
            collapse = f" collapse({len(inner) + 1})" if inner else ""
            self._pragma(depth, f"omp simd reduction({OMP_REDUCTION[red.name]}:blk){collapse}")
        self._line(depth, f"for (int64_t {var} = {var}_b; {var} < {var}_e; {var}++) {{")
        e = depth + 1
        for inner_var, extent in inner:
            self._line(e, f"for (int64_t {inner_var} = 0; {inner_var} < {c_dim(extent)}; {inner_var}++) {{")
            e += 1
        if lane_var is not None:
            self._lanes_step(lane_var, src_idx, e)
        else:
            self.memo.append({})
            x = self.value(red.operands[0], src_idx, e)
            self.memo.pop()
            self._line(e, self._combine("blk", x))
        self._close(e, depth)
        if lane_var is None:
            return "blk"
        self._lanes_combine(depth)
        return "part[0]"

    def _source_groups(self, x: Value) -> Optional[list]:
        """The loop variables of each axis of the reduced value, when the refiner splits some axis (a reduction
        behind a layout change: reshape and transpose then map whole variables, dividing no index)."""
        sizes = DomainRefiner([x], self.arg_index).factor_sizes()
        if sizes is None or len(sizes) == sum(d != 1 for d in x.type.shape):
            return None
        return _group_items(x.type.shape, [(f"i{k}", size) for k, size in enumerate(sizes)], lambda f: f[1])

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
            return load(v.type.dtype, f"in{self.arg_index[id(v)]}", idx.get_flat())
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
        return elementwise_expr(op.name, operands, op.attrs, op.operands[-1].type.dtype)


# -- index rules: how each data-movement op maps its output index to its operand's ------------------------
def _broadcast(k: LoopKernel, op: Op, v: Value, idx: Idx, depth: int) -> str:
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


def _reshape(k: LoopKernel, op: Op, v: Value, idx: Idx, depth: int) -> str:
    x = op.operands[0]
    if idx.factors is not None:
        return k.value(x, Idx(x.type.shape, factors=idx.factors), depth)
    return k.value(x, Idx(x.type.shape, None, idx.get_flat()), depth)


def _transpose(k: LoopKernel, op: Op, v: Value, idx: Idx, depth: int) -> str:
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


def _slice(k: LoopKernel, op: Op, v: Value, idx: Idx, depth: int) -> str:
    x, a = op.operands[0], op.attrs
    sub = list(idx.get_axes())
    for axis, start, step in zip(a["axes"], a["starts"], a["steps"]):
        sub[axis] = f"({c_dim(start)} + {sub[axis]} * {step})"
    return k.value(x, Idx(x.type.shape, tuple(sub)), depth)


def _pad(k: LoopKernel, op: Op, v: Value, idx: Idx, depth: int) -> str:
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


def _concat(k: LoopKernel, op: Op, v: Value, idx: Idx, depth: int) -> str:
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


def _gather(k: LoopKernel, op: Op, v: Value, idx: Idx, depth: int) -> str:
    data, indices = op.operands
    axis, q = op.attrs["axis"], indices.type.rank
    axes = idx.get_axes()
    raw = k.value(indices, Idx(indices.type.shape, axes[axis:axis + q]), depth)
    j = k.checked_index(op, raw, axis, c_dim(data.type.shape[axis]), depth)
    sub = axes[:axis] + (j,) + axes[axis + q:]
    return k.value(data, Idx(data.type.shape, sub), depth)


def _iota(k: LoopKernel, op: Op, v: Value, idx: Idx, depth: int) -> str:
    return f"({CType(op.attrs['dtype']).name}){idx.get_axes()[op.attrs['axis']]}"


_INDEX_RULES = {"broadcast_to": _broadcast, "reshape": _reshape, "transpose": _transpose, "slice": _slice,
                "pad": _pad, "concat": _concat, "gather": _gather, "iota": _iota}
LOOP_OPS = frozenset(_INDEX_RULES) | {"full", "dim_size", "cast"} | frozenset(ELEMENTWISE)


def is_loop_op(name: str) -> bool:
    """Built-in loop ops, and user elementwise ops that brought a C expression."""
    return name in LOOP_OPS or is_user_elementwise(name)
REDUCE_OPS = frozenset(REDUCE_INIT)
