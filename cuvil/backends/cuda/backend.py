"""The CUDA backend's entry: what it implements (for the pipeline), and building a module into images and a program.

    fused, planned IR --codegen--> CUDA C + host steps --toolchain (NVRTC or nvcc, cached)--> PTX, cubins
        --runtime (driver API; a CUDA Graph per shape)--> CudaFunction
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.core import Module
from ...progress import step as progress_step
from ..common.index import LOOP_OPS, REDUCE_INIT
from . import codegen, toolchain
from .library import EMITTERS, keeps

# Composite ops the loop kernels compute directly, as on the CPU (the shared elementwise table has them).
NATIVE_COMPOSITES = frozenset({"leaky_relu", "elu", "selu", "gelu", "softplus", "hardsigmoid", "hardswish", "silu",
                               "clip"})
REDUCE_OPS = frozenset(REDUCE_INIT)
SUPPORTED = LOOP_OPS | REDUCE_OPS | frozenset(EMITTERS) | {"constant", "fused", "yield", "return"}


def keeps_composite(op) -> bool:
    """Whether the backend computes composite `op` itself (the decompose pass leaves it alone)."""
    return op.name in NATIVE_COMPOSITES or keeps(op)


@dataclass
class CudaBuild:
    """A module built for CUDA: its program (kernels and host steps) and the images of its kernels by arch."""

    program: codegen.CudaProgram
    images: dict


def build_images(module: Module, archs=None) -> CudaBuild:
    """Generate and compile (or find in the cache) the kernels of `module`'s main function; needs no GPU."""
    archs = toolchain.default_archs() if archs is None else archs
    program = codegen.generate(module)
    progress_step("CUDA compilation", f"{len(program.kernel_names)} kernels, {', '.join(archs)}")
    return CudaBuild(program, toolchain.build_images(program.source, archs))


class CudaRun:
    """The callable of a `target="cuda"` Executable: the build is made at once (no GPU needed, so a CPU-only machine
    can export it); the driver is opened and the kernels loaded at the first call."""

    def __init__(self, built: CudaBuild, constants: dict, driver=None, blas=None, stream_priority: int = 0):
        self.built, self.constants = built, constants
        self._driver, self._blas, self.stream_priority = driver, blas, stream_priority
        self._function = None

    @property
    def function(self):
        """The `CudaFunction` on the device (UnsupportedError on a machine without an NVIDIA driver)."""
        if self._function is None:
            from .driver import CudaDriver
            from .runtime import CudaFunction

            self._function = CudaFunction(self.built.program, self.built.images, self.constants,
                                          self._driver or CudaDriver.load(), self._blas, self.stream_priority)
        return self._function

    def __call__(self, inputs: list) -> list:
        return self.function(inputs)

    def run_device(self, inputs: list) -> list:
        return self.function.run_device(inputs)


def build(module: Module, archs=None, driver=None, blas=None, stream_priority: int = 0) -> CudaRun:
    """`module` built for CUDA (see CudaRun): loaded through `driver` (default: libcuda) when first called."""
    return CudaRun(build_images(module, archs), module.constants, driver, blas, stream_priority)
