"""A `CudaProgram`'s host side as text, for the standalone C runtime (cuvil/runtime/c/cuvil_cuda_rt.c): the
`cuda_steps` section of a cuda `.cuv`. Every size the steps need is one value of a program in the check-program
code of cuvil_checks.h (bind each symbol from its input size, then `expr out K` per value), so the C side evaluates
them with the interpreter it already has.

    cuda-steps 1
    entry NAME
    values N c0 ... cN-1        the value program (binders, then each value's code and `out K`)
    slot V [V ...]              an arena slot: the value indices of the sizes it holds (its size is their max)
    kernel NAME                 the kernel table, in launch-index order
    launch K WORK PER_BLOCK THREADS SHARED NARGS ARG...   ARG: in0 out0 const0 slot0 err null i64:V f32:BITS i32:N
    gemm DTYPE TA TB EPILOGUE M N K BATCH SA SB A B C BIAS   (dims are value indices; BIAS a buffer or -)
    copy DST SRC NBYTES
    error NAME AXIS SIZE LOC    code k+1 of the error word: a gather's index outside axis AXIS of SIZE (a value)
    end
"""
from __future__ import annotations

import struct

from ...ir.symbolic import sym
from ..cpu.executable import binding_table
from ..cpu.fastcall import OP, _expr
from .cublaslt import EPILOGUE
from .program import Buf, Conv, Copy, CudaProgram, Gemm, Launch


class _Values:
    """The value program: each distinct size expression once, by its text."""

    def __init__(self, program: CudaProgram):
        fn = program.function
        self.index = {name: k for k, name in enumerate(program.symbols)}
        self.code: list = []
        for k, (i, ax) in enumerate(binding_table(program.symbols, [a.type for a in fn.args])):
            self.code += [OP["dim"], i, ax, OP["bind"], k]
        self.known: dict = {}

    def __call__(self, expr) -> int:
        key = str(expr)
        if key not in self.known:
            self.known[key] = len(self.known)
            self.code += [*_expr(expr, self.index), OP["out"], self.known[key]]
        return self.known[key]


def _buf(b: Buf) -> str:
    return "err" if b.kind == "err" else f"{b.kind}{b.index}"


def _arg(arg, value) -> str:
    if isinstance(arg, Buf):
        return _buf(arg)
    if arg == "null":
        return "null"
    kind, v = arg
    if kind in ("sym", "dim"):  # a symbol is the value of its own expression
        return f"i64:{value(sym(v) if kind == 'sym' else v)}"
    if kind == "f32":
        return f"f32:{struct.unpack('<I', struct.pack('<f', v))[0]:08x}"
    return f"i32:{int(v)}"


def format_steps(name: str, program: CudaProgram) -> list:
    """The `cuda_steps` lines of entry `name` (without the `cuda-steps 1` head)."""
    value = _Values(program)
    kernels = program.kernel_names
    body = []
    for slot in program.plan.slots:
        body.append(" ".join(["slot", *(str(value(d)) for d in slot)]))
    for step in program.steps:
        step = step.direct if isinstance(step, Conv) else step  # the C runtime runs the direct conv kernel
        if isinstance(step, Launch):
            k = step.kernel
            args = [_arg(a, value) for a in step.args]
            body.append(" ".join(["launch", str(kernels.index(k.name)), str(value(k.work)), str(k.per_block),
                                  str(k.threads), str(k.shared_bytes), str(len(args)), *args]))
        elif isinstance(step, Gemm):
            dims = [value(d) for d in (step.m, step.n, step.k, step.batch, step.stride_a, step.stride_b)]
            epilogue = EPILOGUE[(step.epilogue, step.bias is not None)]
            body.append(" ".join(["gemm", step.dtype, str(int(step.ta)), str(int(step.tb)), str(epilogue),
                                  *map(str, dims), _buf(step.a), _buf(step.b), _buf(step.c),
                                  _buf(step.bias) if step.bias is not None else "-"]))
        elif isinstance(step, Copy):
            body.append(f"copy {_buf(step.dst)} {_buf(step.src)} {value(step.nbytes)}")
    for op_name, loc, axis, size in program.errors:
        body.append(f"error {op_name} {axis} {value(size)} {loc or '-'}".replace("\n", " "))
    head = [f"entry {name}", " ".join(["values", str(len(value.code)), *map(str, value.code)]),
            *(f"kernel {k}" for k in kernels)]
    return head + body + ["end"]


def format_section(programs: dict) -> str:
    """The whole `cuda_steps` text of `programs` (entry name -> CudaProgram, in the file's entry order)."""
    lines = ["cuda-steps 1"]
    for name, program in programs.items():
        lines += format_steps(name, program)
    return "\n".join(lines) + "\n"
