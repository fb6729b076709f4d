"""Pass infrastructure: the `Pass` base class, pipelines that nest and print, and the pass manager that
verifies after every pass, times each one and dumps IR around the passes a user names.

    >>> import cuvil
    >>> from cuvil.passes import Pass, PipelineBuilder
    >>> class CountOps(Pass):
    ...     name = "count-ops"
    ...     def run_on_operation(self, fn):
    ...         self.count = sum(1 for _ in fn.walk())
    ...         return False   # nothing changed
    >>> print(PipelineBuilder("demo").add(CountOps()).build())
    demo(count-ops)
"""
from __future__ import annotations

import logging
import os
import sys
import time
from collections import defaultdict
from typing import Iterable, Optional, Union

from ..progress import step as progress_step
from ..errors import VerificationError
from ..ir.core import Function, Module
from ..ir.printer import print_module
from ..ir.verifier import verify

log = logging.getLogger("cuvil.passes")


class Pass:
    """A transformation. Subclasses set `name` (kebab-case) and implement `run_on_operation`.

    `scope` is "function" (called once per function, with a `Function` whose `.module` is set) or "module"
    (called once with the `Module`). `anchor` says where a user pass goes in a built-in pipeline: a
    ("before" | "after", pass-name) pair. Passes keep no state between runs that changes their result.
    """

    name = "unnamed-pass"
    scope = "function"
    anchor = ("before", "fuse")

    def run_on_operation(self, op: Union[Function, Module]) -> bool:
        """Transform `op` in place; return whether anything changed."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name


class Pipeline(Pass):
    """A named sequence of passes (pipelines nest). With `until_fixpoint`, it repeats while anything changes."""

    scope = "module"

    def __init__(self, name: str, passes: Iterable[Pass], until_fixpoint: bool = False, max_iterations: int = 8):
        self.name = name
        self.passes = list(passes)
        self.until_fixpoint = until_fixpoint
        self.max_iterations = max_iterations

    def __str__(self) -> str:
        return f"{self.name}{'*' if self.until_fixpoint else ''}({', '.join(str(p) for p in self.passes)})"

    def run_on_operation(self, module: Module, manager: Optional["PassManager"] = None) -> bool:
        manager = manager or PassManager()
        changed_any = False
        for _ in range(self.max_iterations if self.until_fixpoint else 1):
            changed = False
            for p in self.passes:
                changed |= manager.run_pass(p, module)
            changed_any |= changed
            if not changed:
                break
        return changed_any


class PassManager:
    """Runs passes on a module: verifies after each (on unless `verify=False` or CUVIL_VERIFY=0), records
    per-pass times in `timings` (seconds, summed over repeats) and logs the IR before and after the passes
    named in `dump` (or the comma-separated CUVIL_DUMP_IR; "all" dumps every pass)."""

    def __init__(self, verify: Optional[bool] = None, dump: Optional[Iterable[str]] = None):
        self.verify = verify if verify is not None else os.environ.get("CUVIL_VERIFY", "1") != "0"
        names = dump if dump is not None else filter(None, os.environ.get("CUVIL_DUMP_IR", "").split(","))
        self.dump = {n.strip() for n in names}
        self.timings: dict[str, float] = defaultdict(float)
        self.dumps: list[tuple[str, str, str]] = []  # (pass name, "before" | "after", text)

    def run(self, pipeline: Pass, module: Module) -> bool:
        return self.run_pass(pipeline, module)

    def run_pass(self, p: Pass, module: Module) -> bool:
        if isinstance(p, Pipeline):
            return p.run_on_operation(module, self)
        progress_step("passes", p.name)
        dumping = p.name in self.dump or "all" in self.dump
        if dumping:
            self._dump(p.name, "before", module)
        t0 = time.perf_counter()
        if p.scope == "module":
            changed = bool(p.run_on_operation(module))
        else:
            changed = False
            for fn in list(module.functions.values()):
                changed |= bool(p.run_on_operation(fn))
        self.timings[p.name] += time.perf_counter() - t0
        if self.verify:
            try:
                verify(module)
            except VerificationError as e:
                raise VerificationError(f"pass '{p.name}' broke the IR: {e.message}", e.loc) from None
        if dumping:
            self._dump(p.name, "after", module)
        return changed

    def _dump(self, name: str, when: str, module: Module) -> None:
        """On the "cuvil.passes" logger, or on stderr when that logger would drop it: a dump was asked for."""
        text = print_module(module, elide_constants_over=16)
        self.dumps.append((name, when, text))
        if log.isEnabledFor(logging.INFO):
            log.info("IR %s pass '%s':\n%s", when, name, text)
        else:
            sys.stderr.write(f"[cuvil] IR {when} pass '{name}':\n{text}\n")

    def timing_report(self) -> str:
        rows = sorted(self.timings.items(), key=lambda kv: -kv[1])
        return "\n".join(f"{t * 1e3:9.3f} ms  {name}" for name, t in rows)


class PipelineBuilder:
    """Composes a named pipeline; user passes are placed by their `anchor`."""

    def __init__(self, name: str):
        self.name = name
        self.passes: list[Pass] = []

    def add(self, *passes: Pass) -> "PipelineBuilder":
        self.passes.extend(passes)
        return self

    def add_fixpoint(self, name: str, *passes: Pass) -> "PipelineBuilder":
        self.passes.append(Pipeline(name, passes, until_fixpoint=True))
        return self

    def insert(self, p: Pass) -> "PipelineBuilder":
        """Insert `p` before or after the top-level pass or pipeline its anchor names (or at the end)."""
        where, target = p.anchor
        names = [q.name for q in self.passes]
        if target not in names:
            self.passes.append(p)
        else:
            i = names.index(target)
            self.passes.insert(i + (where == "after"), p)
        return self

    def build(self) -> Pipeline:
        return Pipeline(self.name, self.passes)
