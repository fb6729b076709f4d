"""What the CUDA code generator hands the runtime: the kernels' source and the host's steps over named buffers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ...ir.core import Function
from ...passes.memory import MemoryPlan
from .kernels import KernelLaunch


@dataclass(frozen=True)
class Buf:
    """A device buffer by kind ("in", "out", "const", "slot", "err") and number."""

    kind: str
    index: int = 0


@dataclass
class Launch:
    """A kernel launch: `args` are Bufs and ("sym", name) pairs, in the kernel's parameter order."""

    kernel: KernelLaunch
    args: list


@dataclass
class Gemm:
    """C[batch, M, N] = act(op(A) @ op(B) + bias) through cuBLASLt; `ta`/`tb`: the buffer holds the operand with its
    last two axes swapped. Strides are elements between batch items (0: shared by every item)."""

    a: Buf
    b: Buf
    c: Buf
    m: object
    n: object
    k: object
    batch: object
    ta: bool
    tb: bool
    stride_a: object
    stride_b: object
    dtype: str
    bias: Optional[Buf] = None
    epilogue: str = "none"  # "none", "relu", "gelu" (tanh form): what cuBLASLt applies with the bias


@dataclass
class Copy:
    dst: Buf
    src: Buf
    nbytes: object


@dataclass
class CudaProgram:
    source: str
    function: Function
    symbols: list
    constants: list  # module constant names, in Buf("const", k) order
    plan: MemoryPlan
    steps: list
    errors: list = field(default_factory=list)  # code - 1 -> (op name, location, axis, axis size)

    @property
    def kernel_names(self) -> list:
        return list(dict.fromkeys(s.kernel.name for s in self.steps if isinstance(s, Launch)))
