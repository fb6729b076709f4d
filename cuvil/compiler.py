"""The one path every frontend takes after translation: passes, then a backend, giving an `Executable`.

Frontends build an IR module and call `compile_module`; what comes back runs NumPy arrays in and out.
Frontends wrap it to take and return their own kinds (torch tensors, named ONNX inputs).
"""
from __future__ import annotations

import copy
import logging
from typing import Iterable, Optional

import numpy as np

from .interpreter import interpret
from .ir.core import Module

log = logging.getLogger("cuvil.compiler")
TARGETS = ("cpu", "interpreter")


class Executable:
    """A compiled module: call it with NumPy arrays (positional, in the function's argument order)."""

    def __init__(self, module: Module, target: str, run, pass_timings: Optional[dict] = None):
        self.module = module
        self.target = target
        self._run = run
        self.pass_timings = pass_timings or {}

    @property
    def input_types(self):
        return [a.type for a in self.module.main.args]

    @property
    def output_types(self):
        return self.module.main.result_types

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        return self._run(list(inputs))

    def __repr__(self) -> str:
        ins = ", ".join(str(t) for t in self.input_types)
        outs = ", ".join(str(t) for t in self.output_types)
        return f"<cuvil.Executable ({ins}) -> ({outs}) on {self.target}>"


def compile_module(module: Module, target: str = "cpu", passes: Iterable = (), level: int = 2,
                   copy_module: bool = True, enable_fusion: Optional[bool] = None) -> Executable:
    """Optimise `module` with the default pipeline (plus user `passes`) and build it for `target`.

    The module is copied first unless `copy_module=False`, so the caller's IR stays as it was.
    `enable_fusion=False` gives every op a kernel of its own (default: on, or the module's
    `enable_fusion` metadata).
    """
    from .passes import default_pipeline, run_pipeline

    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
    module = clone_module(module) if copy_module else module
    if enable_fusion is None:
        enable_fusion = module.metadata.get("enable_fusion", "true") != "false"
    manager = run_pipeline(module, default_pipeline(target, level, passes, enable_fusion))
    log.debug("pass timings:\n%s", manager.timing_report())
    if target == "cpu":
        from .backends.cpu.backend import build

        return Executable(module, target, build(module), dict(manager.timings))
    return Executable(module, target, lambda inputs: interpret(module, inputs), dict(manager.timings))


def clone_module(module: Module) -> Module:
    """A deep copy of the IR that shares the constant arrays (weights are never copied)."""
    memo = {id(arr): arr for arr in module.constants.values()}
    return copy.deepcopy(module, memo)

