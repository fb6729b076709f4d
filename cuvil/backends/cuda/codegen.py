"""Lower a fused, planned IR function to a `CudaProgram`: one CUDA C translation unit holding every kernel, and the
host's steps in order (kernel launches, cuBLASLt GEMMs, device copies) over buffers named by kind.

Buffers: the function's inputs and outputs (`in`, `out`: allocated by the runtime for each shape), module constants
(`const`: uploaded once), arena slots of the memory plan (`slot`: one device arena; passes/memory.py), and the
run's error word (`err`: at the arena's end). The runtime captures the steps into one CUDA Graph per shape.
`cond` and `while` need values on the host between kernels, so they are refused here (UnsupportedError).
"""
from __future__ import annotations

from ...errors import UnsupportedError
from ...ir.core import Function, Module, Op, Value
from ...ir.dynamic import defined_sizes
from ...passes.memory import plan_memory
from ..common.buffers import defines_buffer, is_alias, nbytes
from .kernels import CudaKernel, KernelLaunch
from .library import EMITTERS, emit_fused_library
from .program import Buf, Copy, CudaProgram, Launch

PRELUDE = '#include "cuvil_cuda.h"\n\n'


def _refuse_data_sizes(fn: Function) -> None:
    """The host sizes every buffer and captures one CUDA Graph per shape before a kernel runs."""
    for op in fn.walk():
        for name in defined_sizes(op):
            raise UnsupportedError(f"the CUDA backend (target='cuda') cannot compile '{op.name}': the size {name} of "
                                   "its result is computed from the data at run time (compile for the CPU)", op.loc)


class CudaCodeGen:
    def __init__(self, module: Module, fn: Function):
        self.module, self.fn = module, fn
        _refuse_data_sizes(fn)
        self.symbols = sorted(set().union(*(a.type.free_symbols for a in fn.args),
                                          *(t.free_symbols for t in fn.result_types)))
        self.constants: list = []
        self.buf: dict = {}
        self.kernels: list = []
        self.kernel_names: dict = {}  # kernel text with its name as "@" -> (name, launch)
        self.helpers: dict = {}  # name -> CUDA C of a library kernel (rows, conv, pooling)
        self.steps: list = []
        self.errors: list = []
        ret = fn.body.terminator
        counts: dict = {}
        for v in ret.operands:
            counts[id(v)] = counts.get(id(v), 0) + 1
        self.direct = {i: v for i, v in enumerate(ret.operands)
                       if counts[id(v)] == 1 and defines_buffer(v) and v.owner.parent is fn.body}
        direct_ids = {id(v) for v in self.direct.values()}
        self.plan = plan_memory(fn, lambda v: defines_buffer(v) and id(v) not in direct_ids, self.alias_of)

    @staticmethod
    def alias_of(v: Value):
        if isinstance(v.owner, Op) and v.owner.name == "fused" and is_alias(v.owner):
            return v.owner.operands[0]
        return None

    def generate(self) -> CudaProgram:
        for i, a in enumerate(self.fn.args):
            self.buf[id(a)] = Buf("in", i)
        for i, v in self.direct.items():
            self.buf[id(v)] = Buf("out", i)
        for op in self.fn.body.ops:
            if op.name == "return":
                self._return(op)
            else:
                self._define(op)
                self.emit_op(op)
        source = PRELUDE + "\n".join(self.helpers.values()) + "\n" + "\n".join(self.kernels)
        return CudaProgram(source, self.fn, self.symbols, self.constants, self.plan, self.steps, self.errors)

    def _define(self, op: Op) -> None:
        for r in op.results:
            if id(r) in self.buf:
                continue
            alias = self.alias_of(r)
            if alias is not None:
                self.buf[id(r)] = self.buf[id(alias)]
            elif id(r) in self.plan.slot_of:
                self.buf[id(r)] = Buf("slot", self.plan.slot_of[id(r)])

    def bufs(self, values) -> list:
        return [self.buf[id(v)] for v in values]

    def error_code(self, op: Op) -> int:
        """The code a kernel records when `op` (a gather) meets an index outside its axis."""
        data = op.operands[0].type
        entry = (op.name, str(op.loc), op.attrs["axis"], data.shape[op.attrs["axis"]])
        self.errors.append(entry)
        return len(self.errors)

    def emit_op(self, op: Op) -> None:
        if op.name == "constant":
            self.constants.append(op.attrs["name"])
            self.buf[id(op.results[0])] = Buf("const", len(self.constants) - 1)
        elif op.name == "fused" and op.attrs["kind"] == "library":
            emit_fused_library(self, op)
        elif op.name == "fused":
            if not is_alias(op):
                self._kernel(op)
        elif op.name in EMITTERS:
            EMITTERS[op.name](self, op)
        else:
            what = "data-dependent control flow (a graph replays a fixed sequence)" if op.name in ("cond", "while") \
                else "no CUDA kernel for it yet"
            raise UnsupportedError(f"the CUDA backend (target='cuda') cannot compile '{op.name}' ({what}); compile "
                                   "this model with target='cpu'", op.loc)

    def add_kernel(self, text: str, launch: KernelLaunch, fresh: str, comment: str) -> KernelLaunch:
        """Emit a kernel once: an identical earlier one (the same layer repeated) is launched instead."""
        name, known = self.kernel_names.setdefault(text.replace(fresh, "@"), (fresh, launch))
        if name == fresh:
            self.kernels.append(comment + text)
        return known

    def _kernel(self, op: Op) -> None:
        fresh = f"k{len(self.kernels)}_{op.attrs['name']}"
        text, launch = CudaKernel(op, fresh, self.error_code).emit()
        locs = sorted({str(o.loc) for o in op.regions[0].ops if str(o.loc)})
        comment = f"/* {', '.join(o.name for o in op.regions[0].ops[:-1])}" + (
            f" at {', '.join(locs[:4])}" if locs else "") + " */\n"
        known = self.add_kernel(text, launch, fresh, comment)
        self.launch(known, op.operands, op.results, launch.params)

    def launch(self, kernel: KernelLaunch, ins, outs, kinds: list) -> None:
        ins, outs = iter(self.bufs(ins)), iter(self.bufs(outs))
        args = [next(ins) if k == "in" else next(outs) if k == "out" else Buf("err") if k == "err" else k
                for k in kinds]
        self.steps.append(Launch(kernel, args))

    def _return(self, op: Op) -> None:
        for i, v in enumerate(op.operands):
            if i not in self.direct:
                self.steps.append(Copy(Buf("out", i), self.buf[id(v)], nbytes(v)))


def generate(module: Module, fn_name: str | None = None) -> CudaProgram:
    fn = module.functions[fn_name] if fn_name else module.main
    complex_value = next((v for v in fn.args + [r for op in fn.walk() for r in op.results] if v.type.dtype.is_complex),
                         None)
    if complex_value is not None:
        raise UnsupportedError(f"the CUDA backend (target='cuda') has no complex element type yet (a value of type "
                               f"{complex_value.type}); compile this model with target='cpu'")
    return CudaCodeGen(module, fn).generate()
