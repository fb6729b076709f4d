"""`cuvil.profile`: where a compiled function's time goes, kernel by kernel, back to the user's source.

    >>> import numpy as np, cuvil
    >>> from cuvil.ir import Builder, Module, TensorType
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType("f32", (64, 32)), TensorType("f32", (32, 16))], ["x", "w"])
    >>> b.ret(b.exp(b.matmul(*b.args)))
    >>> report = cuvil.profile(cuvil.compile_module(m), np.ones((64, 32), np.float32),
    ...                        np.ones((32, 16), np.float32) / 32, repeat=3)
    >>> sorted(row.kernel for row in report.rows)
    ['cuvil_sgemm', 'k0_exp']

Profiling runs an instrumented build of the same optimised IR (two clock reads around every op that emits
code, see `cuvil/backends/cpu/instrument.py`) in place of the normal one, so it works on whatever ends in a
`cuvil.Executable`: `cuvil.jit` functions, `cuvil.compile` modules, `.optimize()`d ONNX models, executables.
The context-manager form profiles every compiled call made inside it:

    with cuvil.profile() as prof:
        model(x)
    print(prof.report())
"""
from __future__ import annotations

import ctypes
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from .compiler import Executable, clone_module
from .ir.core import Op
from .ir.symbolic import evaluate

MOVEMENT = frozenset({"reshape", "broadcast_to", "transpose", "slice", "pad", "concat", "gather", "iota", "cast",
                      "full", "yield", "constant"})
REDUCTIONS = frozenset({"reduce_sum", "reduce_prod", "reduce_max", "reduce_min"})
ROW_OPS = {"softmax": 5, "log_softmax": 5, "layer_norm": 8}  # FLOPs per element (estimates)


# -- cost estimates: FLOPs and bytes moved per op, for the sizes of one call ------------------------------------
def _numel(t, env) -> int:
    return int(evaluate(t.numel, env))


def _prod(dims, env) -> int:
    return int(np.prod([evaluate(d, env) for d in dims], dtype=np.int64))


def _flops_matmul(op, env):
    return 2 * _numel(op.results[0].type, env) * int(evaluate(op.operands[0].type.shape[-1], env))


def _flops_conv(op, env):
    return 2 * _numel(op.results[0].type, env) * _prod(op.operands[1].type.shape[1:], env)


def _flops_conv_transpose(op, env):
    return 2 * _numel(op.operands[0].type, env) * _prod(op.operands[1].type.shape[1:], env)


def _flops_conv_nchwc(op, env):
    """A direct convolution's FLOPs on whole blocks (padding channels included); Winograd executes about a
    quarter of them, so its GFLOP/s are direct-equivalent, comparable across algorithms."""
    n, _, oh, ow = op.results[0].type.shape[:4]
    return 2 * _prod((n, oh, ow), env) * _prod(op.operands[1].type.shape, env)


def _flops_dwconv_nchwc(op, env):
    return 2 * _numel(op.results[0].type, env) * _prod(op.operands[1].type.shape[1:3], env)


def _flops_pool(op, env):
    return _numel(op.results[0].type, env) * _prod(op.attrs["kernel"], env)


FLOPS = {"matmul": _flops_matmul, "conv": _flops_conv, "conv_transpose": _flops_conv_transpose,
         "conv_nchwc": _flops_conv_nchwc, "dwconv_nchwc": _flops_dwconv_nchwc,
         "max_pool": _flops_pool, "avg_pool": _flops_pool,
         # reduced precision: x [..., K] against w [N, K], and convolutions with w [O, C, KH, KW]
         "qlinear_i8": _flops_matmul, "linear_i4": _flops_matmul, "qconv_i8": _flops_conv, "conv_bf16": _flops_conv}


def op_flops(op: Op, env: dict) -> int:
    """Arithmetic operations `op` performs (fused groups: the sum over their body); an estimate."""
    if op.name == "fused":
        return sum(op_flops(inner, env) for inner in op.regions[0].ops)
    if op.name in FLOPS:
        return FLOPS[op.name](op, env)
    if op.name in MOVEMENT or not op.results:
        return 0
    if op.name in REDUCTIONS:
        return _numel(op.operands[0].type, env)
    return ROW_OPS.get(op.name, 1) * _numel(op.results[0].type, env)


def op_bytes(op: Op, env: dict) -> int:
    """Bytes `op` reads and writes at least once (each distinct operand and result)."""
    values = {id(v): v for v in [*op.operands, *op.results]}.values()
    return sum(_numel(v.type, env) * v.type.dtype.itemsize for v in values)


def op_names(op: Op) -> list:
    return [o.name for o in op.regions[0].ops[:-1]] if op.name == "fused" else [op.name]


def op_sources(op: Op) -> list:
    """Distinct source locations of the IR ops `op` computes, in program order."""
    locs = [o.loc for o in (op.regions[0].ops[:-1] if op.name == "fused" else [op])]
    return list(dict.fromkeys(_short(loc) for loc in locs if str(loc)))


def _short(loc) -> str:
    return f"{os.path.basename(loc.file)}:{loc.line}" if loc.file else loc.node


# -- one instrumented build per executable ----------------------------------------------------------------------
class InstrumentedFunction:
    """An executable's instrumented twin: runs the same IR and reads back per-op timers after each call."""

    def __init__(self, exe: Executable):
        from .backends.cpu import backend, instrument
        from .backends.cpu.executable import CpuFunction
        from .passes import default_pipeline, run_pipeline

        module = exe.module
        self.note = ""
        if exe.target != "cpu":  # e.g. an ONNX model that .optimize() left on the interpreter
            module = clone_module(module)
            run_pipeline(module, default_pipeline("cpu"))
            self.note = f"this object runs on the {exe.target}; profiled: its CPU build"
        self.program, self.lib = backend.build_library(module, instrument=True)
        self.function = CpuFunction(self.program, self.lib, module.constants)
        n = max(len(self.program.timed), 1)
        self.ns = np.ctypeslib.as_array((ctypes.c_int64 * n).in_dll(self.lib, "cuvil_prof_ns"))
        self.calls = np.ctypeslib.as_array((ctypes.c_int64 * n).in_dll(self.lib, "cuvil_prof_calls"))
        cap = 3 * instrument.EVENT_CAPACITY
        self.events = np.ctypeslib.as_array((ctypes.c_int64 * cap).in_dll(self.lib, "cuvil_prof_events"))
        self.nevents = ctypes.c_int64.in_dll(self.lib, "cuvil_prof_nevents")
        self._costs: dict = {}

    def __call__(self, inputs: list):
        """(outputs, ns of the call itself, ns per region, runs per region, events [k, start, end])."""
        self.ns[:] = 0
        self.calls[:] = 0
        self.nevents.value = 0
        start = time.monotonic_ns()
        outs = self.function(inputs)
        elapsed = time.monotonic_ns() - start
        events = self.events[:3 * self.nevents.value].reshape(-1, 3).copy()
        return outs, elapsed, self.ns.copy(), self.calls.copy(), events

    def costs(self, inputs: list) -> list:
        """(FLOPs, bytes) per timed region for these inputs' sizes (per run of the region)."""
        dims = tuple(np.shape(inputs[i])[ax] for i, ax in self.function._binders)
        found = self.function.found_sizes()  # the sizes the call computed from the data, if any
        key = dims + tuple(found.values())
        if key not in self._costs:
            env = {**dict(zip(self.program.symbols, dims)), **found}
            self._costs[key] = [(op_flops(t.op, env), op_bytes(t.op, env)) for t in self.program.timed]
        return self._costs[key]


# -- the profiler and its report --------------------------------------------------------------------------------
@dataclass
class Row:
    kernel: str
    ops: list
    sources: list
    ms: float  # per call (median over the profiled calls)
    runs: float  # times the region ran per call (mean; more than 1 inside a while loop, 0-1 in a branch)
    share: float
    gflops: float | None
    gbytes: float | None
    function: str = ""


@dataclass
class Call:
    function: str
    start_ns: int
    end_ns: int
    events: np.ndarray
    run_ns: int  # the instrumented function alone, without the profiler's bookkeeping
    baseline_ns: int | None = None


@dataclass
class Profiler:
    """Routes every `Executable` call made while active through an instrumented build and records it."""

    baseline: bool = False  # also time the normal build on each call (for the instrumentation overhead)
    calls: list = field(default_factory=list)
    _builds: dict = field(default_factory=dict)
    _totals: dict = field(default_factory=dict)
    _saved: object = None

    def __enter__(self) -> "Profiler":
        self._saved = Executable.__call__
        profiler = self
        Executable.__call__ = lambda exe, *inputs: profiler.run(exe, list(inputs))
        return self

    def __exit__(self, *exc) -> None:
        Executable.__call__ = self._saved

    def reset(self) -> None:
        """Forget what was recorded (the instrumented builds stay)."""
        self.calls.clear()
        self._totals.clear()

    def run(self, exe: Executable, inputs: list) -> list:
        build = self._builds.get(id(exe))
        if build is None:
            build = self._builds[id(exe)] = (exe, InstrumentedFunction(exe))
        inst = build[1]
        start = time.monotonic_ns()
        outs, run_ns, ns, runs, events = inst(inputs)
        end = time.monotonic_ns()
        base = self._time_baseline(exe, inputs) if self.baseline else None
        self.calls.append(Call(_label(exe), start, end, events, run_ns, base))
        record = self._totals.setdefault(id(exe), [inst, [], [], inputs])
        record[1].append(ns)
        record[2].append(runs)
        record[3] = inputs
        return outs

    @staticmethod
    def _time_baseline(exe: Executable, inputs: list) -> int:
        start = time.monotonic_ns()
        exe._run(inputs)
        return time.monotonic_ns() - start

    def report(self) -> "ProfileReport":
        rows = []
        for exe_id, (inst, ns, runs, inputs) in self._totals.items():
            costs = inst.costs(inputs)
            ns, runs = np.median(ns, axis=0), np.mean(runs, axis=0)  # medians: robust to a noisy call
            for k, region in enumerate(inst.program.timed):
                if runs[k] == 0:
                    continue
                sec = ns[k] / 1e9
                flops, nbytes = (c * runs[k] for c in costs[k])
                rows.append(Row(region.kernel, op_names(region.op), op_sources(region.op), ns[k] / 1e6, runs[k],
                                0.0, flops / sec / 1e9 if flops and sec else None,
                                nbytes / sec / 1e9 if sec else None, _label(self._builds[exe_id][0])))
        total = sum(r.ms for r in rows) or 1.0
        for r in rows:
            r.share = r.ms / total
        rows.sort(key=lambda r: -r.ms)
        notes = [b[1].note for b in self._builds.values() if b[1].note]
        return ProfileReport(rows, list(self.calls), self._builds, notes)


def _label(exe: Executable) -> str:
    meta = exe.module.metadata
    return meta.get("function") or meta.get("source") or exe.module.main.name


class ProfileReport:
    """What `cuvil.profile` measured: `rows` (per timed kernel, slowest first), `calls` (per call), `str()` as a
    table, `save_trace(path)` for chrome://tracing or ui.perfetto.dev."""

    def __init__(self, rows: list, calls: list, builds: dict, notes: list):
        self.rows, self.calls, self._builds, self.notes = rows, calls, builds, notes

    @property
    def wall_ms(self) -> float:
        """Median time of one call of the instrumented build (its argument checks included)."""
        return float(np.median([c.run_ns / 1e6 for c in self.calls])) if self.calls else 0.0

    @property
    def kernel_ms(self) -> float:
        return sum(r.ms for r in self.rows)

    @property
    def overhead(self) -> float | None:
        """Median time of the instrumented build's call over the normal build's, both timed the same way on the
        same inputs in alternation (only when profiled with baseline=True)."""
        base = [c.baseline_ns for c in self.calls if c.baseline_ns]
        return float(np.median([c.run_ns for c in self.calls]) / np.median(base)) if base else None

    def __str__(self) -> str:
        head = [f"cuvil.profile: {len(self.calls)} calls, {self.wall_ms:.3f} ms per call (median), "
                f"{self.kernel_ms:.3f} ms in {len(self.rows)} timed kernels"]
        if self.overhead is not None:
            head.append(f"instrumented / normal build: {self.overhead:.3f}x")
        head += [f"note: {n}" for n in self.notes]
        cols = ["kernel", "ops", "source", "ms", "share", "GFLOP/s", "GB/s"]
        body = [[r.kernel, _clip(",".join(r.ops), 40), _clip(", ".join(r.sources[:2]) + (
            f" +{len(r.sources) - 2}" if len(r.sources) > 2 else ""), 40), f"{r.ms:.4f}", f"{100 * r.share:.1f}%",
                 _num(r.gflops), _num(r.gbytes)] for r in self.rows]
        widths = [max(len(x) for x in col) for col in zip(cols, *body)]
        lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                 for row in [cols, *body]]
        return "\n".join(head + [lines[0], "-" * len(lines[0]), *lines[1:]])

    def trace(self) -> dict:
        """The profile as Chrome trace events: one span per call, one per kernel run inside it."""
        t0 = min((c.start_ns for c in self.calls), default=0)
        events = []
        for c in self.calls:
            events.append({"name": c.function, "cat": "call", "ph": "X", "pid": 1, "tid": 1,
                           "ts": (c.start_ns - t0) / 1e3, "dur": (c.end_ns - c.start_ns) / 1e3})
            timed = next(b[1].program.timed for b in self._builds.values() if _label(b[0]) == c.function)
            for k, start, end in c.events.tolist():
                region = timed[k]
                events.append({"name": region.kernel, "cat": "kernel", "ph": "X", "pid": 1, "tid": 1,
                               "ts": (start - t0) / 1e3, "dur": (end - start) / 1e3,
                               "args": {"ops": op_names(region.op), "source": op_sources(region.op)}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def save_trace(self, path) -> None:
        """Write the trace JSON (open it in ui.perfetto.dev or chrome://tracing)."""
        with open(path, "w") as f:
            json.dump(self.trace(), f)

    def __repr__(self) -> str:
        return f"<cuvil.ProfileReport {len(self.calls)} calls, {len(self.rows)} kernels>"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _num(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def profile(fn=None, *args, repeat: int = 10, warmup: int = 1, baseline: bool = False, **kwargs):
    """Profile `fn(*args, **kwargs)`: `warmup` calls (compiling the instrumented build), then `repeat` timed
    calls; returns a `ProfileReport`. Without `fn`, a context manager (`with cuvil.profile() as prof:`) that
    profiles every compiled call inside it; `prof.report()` gives the report. `baseline=True` also times the
    normal build on each call, so the report states the instrumentation's overhead."""
    if fn is None:
        return Profiler(baseline)
    with Profiler(baseline) as prof:
        for _ in range(warmup):
            fn(*args, **kwargs)
        prof.reset()
        for _ in range(repeat):
            fn(*args, **kwargs)
    if not prof.calls:
        raise TypeError(f"cuvil.profile: calling {getattr(fn, '__name__', fn)!r} ran no compiled cuvil code "
                        f"(profile what cuvil.jit, cuvil.compile or .optimize() returned)")
    return prof.report()
