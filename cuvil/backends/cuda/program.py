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
class Conv:
    """A 2-D NCHW convolution, y = act(conv(x, w) + bias), through cuDNN when it loads (cudnn.py); `direct` is the
    Launch of Cuvil's conv kernel (the whole epilogue on its way out) that runs otherwise. `act` is what cuDNN fuses
    ("none", "relu"); `after`: the launches of an epilogue it cannot fuse, run on y after it."""

    x: Buf
    w: Buf
    bias: Optional[Buf]
    y: Buf
    x_shape: tuple  # [N, C, H, W] (dims may be symbolic)
    w_shape: tuple  # [K, C / groups, R, S]
    y_shape: tuple
    pads: tuple  # (top, left): cuDNN pads both sides alike
    strides: tuple
    dilations: tuple
    groups: int
    dtype: str
    act: str
    direct: Launch
    after: list = field(default_factory=list)


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
        return list(dict.fromkeys(s.kernel.name for s in self.launches()))

    def launches(self) -> list:
        """Every kernel launch a step may make, a Conv's direct kernel and its epilogue included."""
        out = []
        for s in self.steps:
            out += [s] if isinstance(s, Launch) else [s.direct, *s.after] if isinstance(s, Conv) else []
        return out
