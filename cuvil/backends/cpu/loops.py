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
from ..common.index import INDEX_OPS, LOOP_OPS, REDUCE_COMBINE, REDUCE_INIT, DomainRefiner, Idx, ValueEmitter, \
    group_expr, group_items, is_loop_op, kernel_symbols, wrapped_index, \
    reduce_init  # noqa: F401 (LOOP_OPS, is_loop_op: the CPU backend's loop ops are the shared ones)
from .c_exprs import STORAGE, CType, c_dim, c_string, store_value

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


OMP_REDUCTION = {"reduce_sum": "+", "reduce_prod": "*", "reduce_max": "max", "reduce_min": "min"}
REDUCE_LANES = 64  # partial results per reduction: four AVX-512 vectors of f32
# Float sums and products accumulate REDUCE_BLOCK elements in their own type (vectorised), then add each block's
# result into a wider one (double; long double for f64): a float accumulator stops growing at 2^24 times its
# increment (2^26 ones summed to 2^25), blocks keep the error near NumPy's pairwise bound. Reductions of at most one
# block are unchanged.
REDUCE_BLOCK = 4096
WIDE_REDUCTIONS = frozenset({"reduce_sum", "reduce_prod"})


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


class LoopKernel(ValueEmitter):
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
        self.symbols = kernel_symbols(op, types)

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
        self._line(depth, f"const int64_t {j} = {wrapped_index(op, raw, size)};")
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
        out_axes = tuple("0" if k in reduced else group_expr(g) for k, g in enumerate(groups))
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
        init = reduce_init(red.name, out_t.dtype)
        self._line(depth, f"{ct.name} acc = {init};")
        wide = ct.is_float and red.name in WIDE_REDUCTIONS
        lanes = not kept_loops and _lane_chunks(reduced_loops)
        units = self._lane_units(reduced_loops) if lanes else reduced_loops
        blocks = _block_split(units, REDUCE_LANES if lanes else 1) if wide else None
        if kept_loops and not wide and _lane_chunks(reduced_loops):
            self._reduce_row_in_lanes(reduced_loops, src_idx, ct.name, init, depth)
        elif blocks is not None:
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

    def _reduce_row_in_lanes(self, loops: list, src_idx: Idx, ctype: str, init: str, depth: int) -> None:
        """One long row of an exact reduction (max, min, integer sums) in REDUCE_LANES partial results, on the thread
        that runs the row: one accumulator waits on the compare-and-select's latency (ReduceMax of 262,144 floats
        144 us on a Zen 1 core, 1.8 elements a ns). The lanes combine with the op's own rule, so a NaN survives."""
        self._lanes_init(depth, ctype, init)
        inner = depth
        for var, extent in self._lane_units(loops):
            self._line(inner, f"for (int64_t {var} = 0; {var} < {c_dim(extent)}; {var}++) {{")
            inner += 1
        self._lanes_step(loops[-1][0], src_idx, inner)
        self._close(inner, depth)
        self._lanes_combine(depth)
        self._line(depth, self._combine("acc", "part[0]"))

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
        return group_items(x.type.shape, [(f"i{k}", size) for k, size in enumerate(sizes)], lambda f: f[1])

REDUCE_OPS = frozenset(REDUCE_INIT)
