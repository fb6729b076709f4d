"""Lower a fused, planned IR function to one C translation unit with a plain C entry point:

    int cuvil_main(void *const *args, void *const *outs, const int64_t *dims, uint8_t *arena,
                   const void *const *consts);
    int64_t cuvil_arena_bytes(const int64_t *dims);
    const char *cuvil_last_error(void);

`dims` holds the values of the symbolic sizes (in `CProgram.symbols` order), then one slot per data-dependent size
(`CProgram.data_sizes`, NonZero's count) that the call writes; `arena` is the workspace of
`cuvil_arena_bytes(dims)` bytes, 64-byte aligned; `consts` the module constants in `CProgram.constants`
order, used in place. Kernels are static functions named after the ops they fuse, each with its source
location in a comment. `cond` and `while` become C branches and loops, so the whole function is one call.
`cuvil_main` returns 0, or a nonzero code (cuvil_rt.h's CUVIL_ERROR_*) as soon as an op fails (an index outside its
axis); `cuvil_last_error()` is then that failure's message, for the calling thread.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...errors import UnsupportedError
from ...ir.core import Function, Module, Op, Region, Value
from ...ir.dynamic import data_sizes
from ...ir.symbolic import free_symbols
from ...passes.memory import MemoryPlan, plan_memory
from . import instrument, library
from ..common.buffers import defines_buffer as _defines_buffer, is_alias, nbytes as _nbytes
from .c_exprs import STORAGE, c_dim, index_check
from .library_util import pooled_helper
from .loops import LoopKernel

_CONST_SLOT = re.compile(r"\bconsts\[(\d+)\]")  # how generated code reads a module constant (emit_op)
PRELUDE = """#include <stdint.h>
#include <string.h>
#include <math.h>
#include "cuvil_rt.h"
#include "cuvil_kernels.h"
"""


@dataclass
class CProgram:
    source: str
    function: Function
    symbols: list
    constants: list
    plan: MemoryPlan
    direct_outputs: dict = field(default_factory=dict)  # output index -> value written in place
    timed: list = field(default_factory=list)  # instrumented builds: the TimedRegion of each timer index
    # per prepared buffer: whether a cache entry keeps it (costlier to remake than to map: not a plain repacking)
    prepared_saved: list = field(default_factory=list)
    prepared_from: list = field(default_factory=list)  # per prepared buffer: the constant slot it is made from
    direct_consts: frozenset = frozenset()  # constant slots the entry reads itself (the others only prepare reads)
    data_sizes: dict = field(default_factory=dict)  # symbol -> upper bound of each size the call computes


class CodeGen:
    def __init__(self, module: Module, fn: Function, instrument: bool = False):
        self.module, self.fn = module, fn
        self.instrument = instrument  # time each op (cuvil.profile); the default build has no timers
        self.timed: list = []
        self.data_sizes = data_sizes(fn)
        self.symbols = sorted((set().union(*(a.type.free_symbols for a in fn.args), *(
            t.free_symbols for t in fn.result_types)) | _all_symbols(fn)) - set(self.data_sizes))
        _refuse_data_relations(fn, self.data_sizes)
        self.constants: list = []
        self.ptr: dict = {}
        self.kernels: list = []
        self.kernel_names: dict = {}  # kernel text with its name as "@" -> the name it was emitted under
        self.helpers: dict = {}  # name -> C text of shared helper functions (library emitters add them)
        self.body: list = []
        self.scratch_sizes: list = []  # C expressions (bytes) of per-op scratch, shared at the arena's end
        self.prepares: list = []  # (constant slot, floats, fill call) of buffers cuvil_prepare makes once
        self.counter = 0
        ret = fn.body.terminator
        counts = {}
        for v in ret.operands:
            counts[id(v)] = counts.get(id(v), 0) + 1
        self.direct = {i: v for i, v in enumerate(ret.operands)
                       if counts[id(v)] == 1 and _defines_buffer(v) and v.owner.parent is fn.body}
        direct_ids = {id(v) for v in self.direct.values()}
        self.yield_alias = _cond_yield_aliases(fn)
        self.plan = plan_memory(fn, lambda v: _defines_buffer(v) and id(v) not in direct_ids, self.alias_of)

    def alias_of(self, v: Value):
        if isinstance(v.owner, Op) and v.owner.name == "fused" and is_alias(v.owner):
            return v.owner.operands[0]
        if id(v) in self.yield_alias:
            return self.yield_alias[id(v)]
        if not isinstance(v.owner, Op) and v.owner.parent is not None and v.owner.parent.name == "while":
            return v.owner.parent.results[v.index]
        return None

    # -- program -----------------------------------------------------------------------------------
    def generate(self) -> CProgram:
        for i, a in enumerate(self.fn.args):
            self.ptr[id(a)] = f"(({STORAGE[a.type.dtype]} *)args[{i}])"
        for i, v in self.direct.items():
            self.ptr[id(v)] = f"(({STORAGE[v.type.dtype]} *)outs[{i}])"
        self.region(self.fn.body, 1)
        source = PRELUDE + (instrument.prelude(len(self.timed)) if self.instrument else "")
        helpers = "\n".join(map(pooled_helper, self.helpers.values()))  # threaded loops on Cuvil's pool
        source += f"#define CUVIL_NCONST {len(self.constants)}\n\n" + helpers
        source += "\n" + "\n".join(self.kernels) + "\n"
        direct = frozenset(int(k) for k in _CONST_SLOT.findall(source + "\n".join(self.body)))
        source += self._entry()
        return CProgram(source, self.fn, self.symbols, self.constants, self.plan, dict(self.direct), self.timed,
                        [saved for _, _, _, saved in self.prepares], [slot for slot, _, _, _ in self.prepares],
                        direct, dict(self.data_sizes))

    def _entry(self) -> str:
        sym = "".join(f"    const int64_t s_{s} = dims[{i}];\n" for i, s in enumerate(self.symbols))
        # a data-dependent size starts at its bound (the arena's offsets are planned for it); its op sets it
        sym += "".join(f"    int64_t s_{s} = {c_dim(bound)}; (void)s_{s};\n" for s, bound in self.data_sizes.items())
        unused = "    (void)dims; (void)arena; (void)consts; (void)args; (void)outs;\n"
        found = "".join(f"    ((int64_t *)dims)[{len(self.symbols) + k}] = s_{s};\n"
                        for k, s in enumerate(self.data_sizes))
        offsets = self._offsets()
        size_fn = (f"int64_t cuvil_arena_bytes(const int64_t *dims)\n{{\n    (void)dims;\n{sym}{offsets}"
                   f"    return off_scratch + scratch_bytes;\n}}\n\n")
        entry = ("int cuvil_main(void *const *args, void *const *outs, const int64_t *dims, uint8_t *arena,\n"
                 "               const void *const *consts)\n{\n" + unused + sym + offsets +
                 "\n".join(self.body) + "\n" + found + "    return 0;\n}\n")
        last_error = "__attribute__((weak)) const char *cuvil_last_error(void) { return cuvil_error_text; }\n\n"
        return self._prepare() + size_fn + last_error + entry

    def _offsets(self) -> str:
        lines = ["    const int64_t off0 = 0;"]
        for k, sizes in enumerate(self.plan.slots):
            lines.append(f"    const int64_t off{k + 1} = off{k} + {_c_max([c_dim(s) for s in sizes])};")
        scratch = _c_max([f"({size} + 63) / 64 * 64" for size in self.scratch_sizes] or ["0"])
        lines.append(f"    const int64_t off_scratch = off{len(self.plan.slots)};")
        lines.append(f"    const int64_t scratch_bytes = {scratch};")
        lines.append("    (void)off_scratch; (void)scratch_bytes;")
        return "\n".join(lines) + "\n"

    def prepared(self, src: Value, floats: str, fill: str, saved: bool = False):
        """A buffer of `floats` f32 derived once, by `cuvil_prepare`, from module constant `src` (a packed or
        transformed weight). `fill` is the C call that fills it, reading `src` and writing `dst`; `saved`: the
        artifact cache keeps it (worth it when remaking it costs more than mapping it). None if `src` is not a
        module constant."""
        op = src.owner
        if not (isinstance(op, Op) and op.name == "constant"):
            return None
        slot = self.ptr[id(src)].split("consts[")[1].split("]")[0]
        key = (int(slot), floats, fill, saved)
        if key not in self.prepares:
            self.prepares.append(key)
        return f"((const float *)consts[CUVIL_NCONST + {self.prepares.index(key)}])"

    def packed_weight(self, b: Value, k: int, n: int, rsb: str, csb: str):
        """A GEMM-packed copy of the K x N operand stored in constant `b` with strides (rsb, csb)."""
        return self.prepared(b, f"cuvil_sgemm_packed_size({k}, {n})",
                             f"cuvil_sgemm_pack_b({k}, {n}, src, {rsb}, {csb}, dst)")

    def _prepare(self) -> str:
        """cuvil_prepare(consts, j) fills consts[n_constants + j], allocated by the caller with
        cuvil_packed_bytes(j) bytes (64-byte aligned)."""
        sizes = "".join(f"    case {j}: return ({floats}) * 4;\n" for j, (_, floats, _, _) in enumerate(self.prepares))
        fills = "".join(f"    case {j}: {{\n        const float *src = (const float *)consts[{slot}];\n"
                        f"        float *dst = (float *)consts[CUVIL_NCONST + {j}];\n        {fill};\n        break;\n"
                        "    }\n" for j, (slot, _, fill, _) in enumerate(self.prepares))
        sources = "".join(f"    case {j}: return {slot};\n" for j, (slot, _, _, _) in enumerate(self.prepares))
        count = (f"int64_t cuvil_packed_count(void) {{ return {len(self.prepares)}; }}\n\n"
                 f"int64_t cuvil_packed_source(int64_t j)\n{{\n    switch (j) {{\n{sources}"
                 "    default: return -1;\n    }\n}\n\n")
        size = (f"int64_t cuvil_packed_bytes(int64_t j)\n{{\n    switch (j) {{\n{sizes}"
                "    default: return 0;\n    }\n}\n\n")
        return count + size + (f"void cuvil_prepare(void *const *consts, int64_t j)\n{{\n    (void)consts;\n"
                               f"    switch (j) {{\n{fills}    default: break;\n    }}\n}}\n\n")

    def scratch(self, nbytes: str, ctype: str = "float") -> str:
        """Scratch memory for one op (an im2col buffer, say): valid only while that op runs."""
        self.scratch_sizes.append(nbytes)
        return f"(({ctype} *)(arena + off_scratch))"

    def line(self, depth: int, text: str) -> None:
        self.body.append("    " * depth + text)

    # -- regions and ops ---------------------------------------------------------------------------
    def region(self, region: Region, depth: int) -> list:
        """Emit `region`'s ops; returns the values its terminator passes on."""
        for op in region.ops:
            if op.name in ("yield", "return"):
                if op.name == "return":
                    self._return(op, depth)
                return list(op.operands)
            self.define_results(op, depth)
            if self.instrument:
                instrument.emit_timed(self, op, depth)
            else:
                self.emit_op(op, depth)
        return []

    def define_results(self, op: Op, depth: int) -> None:
        for r in op.results:
            if id(r) in self.ptr:
                continue
            alias = self.alias_of(r)
            if alias is not None:
                self.ptr[id(r)] = self.ptr[id(alias)]
            elif id(r) in self.plan.slot_of:
                name = f"b{self.counter}"
                self.counter += 1
                self.line(depth, f"{STORAGE[r.type.dtype]} *{name} = ({STORAGE[r.type.dtype]} *)"
                                 f"(arena + off{self.plan.slot_of[id(r)]});")
                self.ptr[id(r)] = name

    def emit_op(self, op: Op, depth: int) -> None:
        if op.name == "constant":
            k = len(self.constants)
            self.constants.append(op.attrs["name"])
            self.ptr[id(op.results[0])] = f"((const {STORAGE[op.results[0].type.dtype]} *)consts[{k}])"
        elif op.name == "fused" and op.attrs["kind"] == "library":
            library.emit_fused(self, op, depth)
        elif op.name == "fused":
            if not is_alias(op):
                self._kernel(op, depth)
        elif op.name == "cond":
            self._cond(op, depth)
        elif op.name == "while":
            self._while(op, depth)
        elif op.name in library.EMITTERS:
            library.EMITTERS[op.name](self, op, depth)
        else:
            raise UnsupportedError(f"the CPU backend cannot compile '{op.name}': declare it with a c_expr (C for one "
                                   f"element, if it is elementwise) or a decompose into existing ops", op.loc)

    def args_of(self, values) -> list:
        return [self.ptr[id(v)] for v in values]

    def symbol_args(self, names) -> list:
        return [f"s_{s}" for s in names]

    def _kernel(self, op: Op, depth: int) -> None:
        fresh = f"k{len(self.kernels)}_{op.attrs['name']}"
        kernel = LoopKernel(op, fresh)
        text = kernel.emit("__attribute__((noinline)) ")
        if kernel.checks:  # its diagnosing copy names the ops and locations, so it is part of what must be equal
            text += "\n__attribute__((noinline, cold)) " + LoopKernel(op, fresh + "_diagnose", diagnose=True).emit()
        # A kernel identical to an earlier one (the same layer repeated: BERT-base's 88 loop kernels are 10
        # distinct ones) is called, not emitted again. Kernels are never inlined: GCC would paste every kernel
        # called once into cuvil_main, and optimising that one huge function costs more than its parts (BERT-base
        # at -O3: 4.8 s as emitted before, 0.9 s deduplicated and not inlined).
        name = self.kernel_names.setdefault(text.replace(fresh, "@"), fresh)
        if name == fresh:
            locs = sorted({str(o.loc) for o in op.regions[0].ops if str(o.loc)})
            comment = f"/* {', '.join(o.name for o in op.regions[0].ops[:-1])}" + (
                f" at {', '.join(locs[:4])}" if locs else "") + " */\n"
            self.kernels.append(comment + text)
        for gather in (o for o in op.regions[0].ops if id(o) in kernel.prechecked):
            indices = op.operands[kernel.prechecked[id(gather)]]
            data = gather.operands[0].type
            self.line(depth, index_check(gather, self.ptr[id(indices)], indices.type, data.shape[gather.attrs["axis"]]))
        args = ", ".join(self.args_of(op.operands) + self.args_of(op.results) + self.symbol_args(kernel.symbols))
        if kernel.checks:
            self.line(depth, f"if ({name}({args})) CUVIL_TRY({name}_diagnose({args}));")
        else:
            self.line(depth, f"{name}({args});")

    def copy(self, depth: int, dst: Value, src: Value) -> None:
        if self.ptr[id(dst)] != self.ptr[id(src)]:
            self.line(depth, f"memcpy({self.ptr[id(dst)]}, {self.ptr[id(src)]}, {c_dim(_nbytes(src))});")

    def _cond(self, op: Op, depth: int) -> None:
        self.line(depth, f"if ({self.ptr[id(op.operands[0])]}[0]) {{")
        for i, region in enumerate(op.regions):
            if i == 1:
                self.line(depth, "} else {")
            for dst, src in zip(op.results, self.region(region, depth + 1)):
                self.copy(depth + 1, dst, src)
        self.line(depth, "}")

    def _while(self, op: Op, depth: int) -> None:
        for dst, src in zip(op.results, op.operands):
            self.copy(depth, dst, src)
        cond_region, body_region = op.regions
        for region in op.regions:
            for a, r in zip(region.args, op.results):
                self.ptr[id(a)] = self.ptr[id(r)]
        self.line(depth, "for (;;) {")
        (pred,) = self.region(cond_region, depth + 1)
        self.line(depth + 1, f"if (!{self.ptr[id(pred)]}[0]) break;")
        nexts = self.region(body_region, depth + 1)
        self._carry(op, body_region, nexts, depth + 1)
        self.line(depth, "}")

    def _carry(self, op: Op, body: Region, nexts: list, depth: int) -> None:
        """Copy the body's results into the carried buffers, through temporaries when one of them is a
        carried buffer at another position (a swap would otherwise read an overwritten value)."""
        arg_pos = {id(a): i for i, a in enumerate(body.args)}
        crossing = any(arg_pos.get(id(v), i) != i for i, v in enumerate(nexts))
        if not crossing:
            for dst, src in zip(op.results, nexts):
                self.copy(depth, dst, src)
            return
        self.line(depth, "{")
        for i, src in enumerate(nexts):
            t = STORAGE[src.type.dtype]
            self.line(depth + 1, f"{t} tmp{i}[{c_dim(src.type.numel)} > 0 ? {c_dim(src.type.numel)} : 1];")
            self.line(depth + 1, f"memcpy(tmp{i}, {self.ptr[id(src)]}, {c_dim(_nbytes(src))});")
        for i, dst in enumerate(op.results):
            self.line(depth + 1, f"memcpy({self.ptr[id(dst)]}, tmp{i}, {c_dim(_nbytes(dst))});")
        self.line(depth, "}")

    def _return(self, op: Op, depth: int) -> None:
        for i, v in enumerate(op.operands):
            if i not in self.direct:
                self.line(depth, f"memcpy(outs[{i}], {self.ptr[id(v)]}, {c_dim(_nbytes(v))});")


def _c_max(exprs: list) -> str:
    """The largest of C size expressions: literal ints folded here, the rest through cuvil_imax calls (a
    function, not a macro, so nesting does not re-expand its arguments)."""
    static = [int(e) for e in exprs if e.isdigit()]
    out = str(max(static)) if static else None
    for e in exprs:
        if not e.isdigit():
            out = e if out is None else f"cuvil_imax({out}, {e})"
    return out


def _cond_yield_aliases(fn: Function) -> dict:
    """A value a `cond` branch computes only to yield it is computed straight into the cond's result."""
    uses: dict = {}
    for op in fn.walk():
        for v in op.operands:
            uses[id(v)] = uses.get(id(v), 0) + 1
    out = {}
    for op in fn.walk():
        if op.name != "cond":
            continue
        for region in op.regions:
            for y, r in zip(region.terminator.operands, op.results):
                owner = y.owner
                if isinstance(owner, Op) and owner.parent is region and uses[id(y)] == 1 and _defines_buffer(y) \
                        and not (owner.name == "fused" and is_alias(owner)):
                    out[id(y)] = r
    return out


def _refuse_data_relations(fn: Function, sizes: dict) -> None:
    """Relations are checked before the call, when a data-dependent size has no value yet."""
    for r in fn.constraints:
        names = sorted((free_symbols(r.lhs) | free_symbols(r.rhs)) & set(sizes))
        if names:
            raise UnsupportedError(f"the CPU backend cannot check {r} ({r.what or 'a relation between sizes'}): it "
                                   f"reads the data-dependent size {', '.join(names)}, which the call computes", r.loc)


def _all_symbols(fn: Function) -> set:
    out: set = set()
    for op in fn.walk():
        for r in op.results:
            out |= r.type.free_symbols
        for r in op.regions:
            for a in r.args:
                out |= a.type.free_symbols
    return out


def generate(module: Module, fn_name: str | None = None, instrument: bool = False) -> CProgram:
    fn = module.functions[fn_name] if fn_name else module.main
    return CodeGen(module, fn, instrument).generate()

