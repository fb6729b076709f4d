"""The one path every frontend takes after translation: passes, then a backend, giving an `Executable`.

Frontends build an IR module and call `compile_module`; what comes back runs NumPy arrays in and out.
Frontends wrap it to take and return their own kinds (torch tensors, named ONNX inputs).
"""
from __future__ import annotations

import copy
import logging
import os
from typing import Iterable, Optional

import numpy as np

from .backends.cpu import targets as native_targets
from .errors import UnsupportedError, VerificationError
from .interpreter import interpret
from .ir.core import Module
from .ir.verifier import verify

log = logging.getLogger("cuvil.compiler")
# "cpu" is the host; the C backend's other rows and families (backends/cpu/targets.py) compile for a `.cuv`.
TARGETS = ("cpu", "cuda", "interpreter", *native_targets.NAMES[1:])


class Executable:
    """A compiled module: call it with NumPy arrays (positional, in the function's argument order).

    `module` is the optimised IR. An executable loaded from the artifact cache (`cache == "hit"`) parses it
    only when asked, so a warm start runs no frontend, no pass and no parser.
    """

    def __init__(self, module, target: str, run, pass_timings: Optional[dict] = None, signature=None,
                 cache: Optional[str] = None):
        self._module = module  # a Module, or a function that loads it
        self._signature = signature  # (input types, output types) while the module is not loaded
        self.target = target
        self._run = run
        self.pass_timings = pass_timings or {}
        self.cache = cache  # "hit" or "miss" when the artifact cache was consulted, else None
        self.cache_entry = None  # the artifact cache entry a hit was loaded from (cache/store.py): export may copy it

    @property
    def module(self) -> Module:
        if not isinstance(self._module, Module):
            self._module = self._module()
        return self._module

    @property
    def input_types(self):
        return self._signature[0] if self._signature else [a.type for a in self.module.main.args]

    @property
    def output_types(self):
        return self._signature[1] if self._signature else self.module.main.result_types

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        return self._run(list(inputs))

    def set_num_threads(self, n: int) -> None:
        """Run this executable's kernels on `n` threads (0: the process's count, CUVIL_NUM_THREADS or the cores)."""
        run = self._run.resolve() if hasattr(self._run, "resolve") else self._run  # an artifact cache hit: load it
        setter = getattr(run, "set_num_threads", None)
        if setter is None:
            raise UnsupportedError(f"the {self.target} target has no thread count")
        setter(n)

    def __repr__(self) -> str:
        ins = ", ".join(str(t) for t in self.input_types)
        outs = ", ".join(str(t) for t in self.output_types)
        return f"<cuvil.Executable ({ins}) -> ({outs}) on {self.target}>"


def compile_module(module: Module, target: str = "cpu", passes: Iterable = (), level: int = 2,
                   copy_module: bool = True, enable_fusion: Optional[bool] = None,
                   num_threads: Optional[int] = None) -> Executable:
    """Optimise `module` with the default pipeline (plus user `passes`) and build it for `target`.

    The module is copied first unless `copy_module=False`, so the caller's IR stays as it was.
    `enable_fusion=False` gives every op a kernel of its own (default: on, or the module's
    `enable_fusion` metadata). `num_threads` sets this executable's thread count (default: the process's).
    """
    from .passes import default_pipeline, run_pipeline

    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
    module = clone_module(module) if copy_module else module
    if enable_fusion is None:
        enable_fusion = module.metadata.get("enable_fusion", "true") != "false"
    each_pass = verify_passes()
    if target == "cpu":
        from .backends.cpu.backend import prefetch

        prefetch()  # the per-machine builds, while the passes run
    if target in ("interpreter", "cuda"):
        manager = run_pipeline(module, default_pipeline(target, level, passes, enable_fusion), verify=each_pass)
    else:
        with native_targets.use(target):  # the layout passes read the target's vector width
            manager = run_pipeline(module, default_pipeline(target, level, passes, enable_fusion), verify=each_pass)
    if not each_pass:
        _verify_result(module)
    log.debug("pass timings:\n%s", manager.timing_report())
    if target == "cuda":
        from .backends.cuda.backend import build as cuda_build

        return Executable(module, target, cuda_build(module), dict(manager.timings))
    if target != "interpreter" and target != "cpu":
        return Executable(module, target, _runs_elsewhere(target), dict(manager.timings))
    if target == "cpu":
        from .backends.cpu.backend import build_library
        from .backends.cpu.executable import CpuFunction

        program, lib = build_library(module)
        exe = Executable(module, target, CpuFunction(program, lib, module.constants), dict(manager.timings))
        if num_threads is not None:
            exe.set_num_threads(num_threads)
        return exe
    return Executable(module, target, lambda inputs: interpret(module, inputs), dict(manager.timings))


def _runs_elsewhere(target: str):
    """The call of an executable compiled for another machine: only the host's code is loaded in-process."""
    def run(inputs):
        raise UnsupportedError(f"this function was compiled for target {target!r}, which this process does not run: "
                               f"write it with cuvil.export(..., target={target!r}) and cuvil.load it on a machine "
                               "that has that CPU (docs/targets.md)")
    return run


def verify_passes() -> bool:
    """Verify the IR after every pass in tests (`CUVIL_VERIFY=1`) and debug mode (`cuvil.set_log_level("debug")`),
    unless `CUVIL_VERIFY=0`: on ResNet-18 the verifier costs ten times what the passes do. The frontend's module
    and the final one are verified always."""
    flag = os.environ.get("CUVIL_VERIFY", "")
    return flag == "1" or (flag != "0" and log.isEnabledFor(logging.DEBUG))


def _verify_result(module: Module) -> None:
    try:
        verify(module)
    except VerificationError as e:
        raise VerificationError(f"the optimised IR does not verify (CUVIL_VERIFY=1 names the pass that broke it): "
                                f"{e.message}", e.loc) from None


def clone_module(module: Module) -> Module:
    """A deep copy of the IR that shares the constant arrays (weights are never copied)."""
    memo = {id(arr): arr for arr in module.constants.values()}
    return copy.deepcopy(module, memo)

