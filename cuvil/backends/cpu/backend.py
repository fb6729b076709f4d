"""The CPU backend's entry: what it implements (for the pipeline) and building a module into a callable.

    fused, planned IR --codegen--> C --toolchain (cached by source, flags, compiler)--> .so --> CpuFunction
"""
from __future__ import annotations

import ctypes
import logging
import threading

from ...progress import step as progress_step
from ...ir.core import Module
from . import codegen, fastcall, kernels, library_rows, standalone
from .flags import model_flags, opt_level, runtime_dir  # noqa: F401 (callers ask the backend)
from .kernels import conv_block  # noqa: F401 (the passes and tests ask the backend)
from .executable import CpuFunction
from .library import EMITTERS
from .loops import LOOP_OPS, REDUCE_OPS

log = logging.getLogger("cuvil.backends.cpu")

# Composite ops the loop kernels compute directly (everything else composite is decomposed first).
NATIVE_COMPOSITES = frozenset({"leaky_relu", "elu", "selu", "gelu", "softplus", "hardsigmoid", "hardswish", "silu",
                               "clip"})


def keeps_composite(op) -> bool:
    """Whether the backend computes composite `op` itself (the decompose pass leaves it alone)."""
    if op.name == "conv_nchwc":  # the kernel library's blocked conv has one block size: the host's vector
        return op.operands[1].type.shape[5] == conv_block()
    if op.name == "dwconv_nchwc":
        return op.operands[1].type.shape[3] == conv_block()
    if op.name == "spatial_sum_nchwc":
        return op.operands[0].type.shape[4] == conv_block()
    return op.name in NATIVE_COMPOSITES or library_rows.keeps(op)


SUPPORTED = LOOP_OPS | REDUCE_OPS | frozenset(EMITTERS) | {"constant", "cond", "while", "fused", "yield", "return"}


def build(module: Module, instrument: bool = False) -> CpuFunction:
    """Generate, compile (or find in the cache) and load C for `module`'s main function; `instrument` adds
    per-op timers (what `cuvil.profile` reads)."""
    program, lib = build_library(module, instrument)
    return CpuFunction(program, lib, module.constants)


def _quietly(fn) -> None:
    """Runs a build whose failure the caller meets again when it asks for the result (in its own thread)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (reported by the caller's own call)
        log.debug("background build failed: %s", e)


_PREFETCHED: dict = {}  # opt level -> the threads building what every model compiled at that level needs


def prefetch() -> None:
    """Starts building the kernel library's core and the C call path, which every CPU model links, while the passes
    run: on a new machine they take about two and a half seconds of compiler time (the GEMM's three units 0.3-0.7
    each, the call path 0.4), so they build at once, each in its own thread (the compiler is a subprocess), and the
    passes hide what they can."""
    level = opt_level()
    if level not in _PREFETCHED:
        _PREFETCHED[level] = builders = [threading.Thread(target=_quietly, args=(fn,), daemon=True)
                                         for fn in (lambda: kernels.load(level), fastcall.extension)]
        for t in builders:
            t.start()


def build_library(module: Module, instrument: bool = False) -> tuple[codegen.CProgram, ctypes.CDLL]:
    """The generated program and its loaded library (the profiler reads an instrumented one's timers)."""
    program = codegen.generate(module, instrument=instrument)
    progress_step("C compilation", f"{program.source.count('static void k')} kernels")
    # On a new machine several compilations wait: the kernel units this model calls, the model and the C call path;
    # they run at once (the compiler is a subprocess), and the model loads after the kernel library, whose ABI it
    # resolves (RTLD_GLOBAL).
    units = kernels.units_for(program.source)
    builds = [threading.Thread(target=_quietly, args=(fn,), daemon=True)
              for fn in (lambda: kernels.load(opt_level(), units=units), fastcall.extension)]
    for t in builds:
        t.start()
    try:
        obj = standalone.entry_object(program.source, opt_level())  # what an export or a cache entry links
    finally:
        for t in builds:
            t.join()
    kernels.load(opt_level(), units=units)  # loaded by now, or raises the error its thread met
    lib = standalone.load_entry(obj)
    log.debug("compiled %s: %d kernels, arena %s", module.main.name, program.source.count("static void k"),
              program.plan.slots)
    return program, lib
