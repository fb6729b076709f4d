"""Writing CPU executables into one `.cuv` (docs/artifact.md): their code as one self-contained shared object
(standalone.py), their constants stored once and raw, their signatures and check programs, their IR.

Both `cuvil.export` and the artifact cache write through `write`; both read through `cuvil.runtime.load`.
"""
from __future__ import annotations

import functools
import json
import time
import zlib

import numpy as np

from ...errors import UnsupportedError
from ...ir.fingerprint import fingerprint
from ...ir.printer import format_relation, print_module
from ...ir.core import Module
from ...ir import serialize
from ...runtime import container, entries, host
from ...version import __version__
from . import codegen, fastcall, standalone, targets, wasm
from .executable import binding_table


PACKED_SLACK = 0.02  # a weight's packed form replaces it in the file when it is at most 2% larger


class _Entry:
    """One executable taken apart: its generated C, constants, saved prepared buffers and signature. For the host,
    what its loaded function holds; for other targets, C generated again from the IR (under `targets.use`), no
    prepared buffer saved (the target's own `prepare` fills them at load: their layout is the target's).

    Weights are stored once: a host constant that only `prepare` reads (a GEMM or Winograd weight) is left out and
    its prepared forms are saved in its place (`derived`, see `_derived`); besides those, only the buffers the code
    generator marks as worth keeping are saved, and only with `save_transforms`. A loader runs `prepare` only for a
    buffer made from a stored constant (it asks `packed_source`)."""

    def __init__(self, exe, route: dict, host_code: bool, save_transforms: bool = False):
        run = exe._run if host_code else None
        if hasattr(run, "resolve"):  # a warm artifact-cache hit (cache/store.py): the CpuFunction its first call makes
            run = run.resolve()
            if any(c is None for c in run._consts[:len(run.program.constants)]):  # weights its entry left out:
                exe.module  # noqa: B018 -- the entry's rebuild compiles them again (weights are stored once)
                run = exe._run
        program = getattr(run, "program", None)
        if getattr(program, "source", None) is None:  # loaded from a file, or another target: C again from the IR
            program = codegen.generate(exe.module)  # (a cache hit with derived weights compiles its module anew)
        fn = program.function
        self.exe, self.route, self.program = exe, route, program
        self.arg_types, self.out_types, self.constraints = [a.type for a in fn.args], fn.result_types, fn.constraints
        self.derived, self.prepared = set(), {}
        if run is None:
            self.consts = [np.ascontiguousarray(exe.module.constants[n]) for n in program.constants]
            return
        self.consts = run._consts[:len(program.constants)]
        if any(c is None for c in self.consts):
            raise ValueError("a constant the code reads is missing (a loaded function whose weights were replaced)")
        saved = program.prepared_saved if save_transforms else [False] * len(program.prepared_saved)
        self.derived = _derived(program, saved, self.consts, run.prepared)
        keep = [s or src in self.derived for s, src in zip(saved, program.prepared_from)]
        self.prepared = {j: run.prepared[j] for j, saved in enumerate(keep) if saved and j < len(run.prepared)}

    def const_meta(self, layout: dict) -> list:
        """Meta's `constants`: where each lies in `consts`, or `derived` (left out: its prepared forms replace it)."""
        return [{"name": n, "dtype": _dtype(a), "shape": list(a.shape),
                 **({"offset": 0, "nbytes": 0, "derived": True} if k in self.derived else layout["consts"][_key(a)])}
                for k, (n, a) in enumerate(zip(self.program.constants, self.consts))]

    def stored_consts(self) -> list:
        return [a for k, a in enumerate(self.consts) if k not in self.derived]

    def meta(self, prefix: str, layout: dict) -> dict:
        program = self.program
        if program.data_sizes:  # the C runtime sizes outputs before the call
            raise UnsupportedError(f"a library with outputs whose sizes the call computes from the data "
                                   f"({', '.join(program.data_sizes)}) cannot be exported yet")
        names = self.route.get("names") or [a.name for a in program.function.args]
        out_names = self.route.get("output_names") or [f"output_{j}" for j in range(len(self.out_types))]
        checks = fastcall.check_program(self.arg_types, self.out_types, program.symbols,
                                        binding_table(program.symbols, self.arg_types), self.constraints)
        return {
            "prefix": prefix, "fingerprint": fingerprint(self.exe.module),
            "inputs": [_param(n, t) for n, t in zip(names, self.arg_types)],
            "outputs": [_param(n, t) for n, t in zip(out_names, self.out_types)],
            "symbols": list(program.symbols), "relations": [format_relation(r) for r in self.constraints],
            "arena_bytes": _arena_text(program.plan.slots),
            "constants": self.const_meta(layout),
            "prepared": [{"index": j, **layout["prepared"][_key(a)]} for j, a in self.prepared.items()],
            "checks": checks, "route": self.route, "pass_timings": self.exe.pass_timings,
            "metadata": self.exe.module.metadata,
        }

    @functools.cached_property
    def _declared_types(self) -> dict:
        """Constant name -> the type of the constant op that reads it (packed forms have none)."""
        return {op.attrs["name"]: op.results[0].type for op in self.program.function.walk() if op.name == "constant"}

    def _declared(self, name: str):
        return self._declared_types.get(name)

    def _printed(self, name: str, a) -> np.ndarray:
        """A stored constant in its IR shape: the table keeps a 0-d one as one element."""
        t = self._declared(name)
        return a.reshape(t.shape) if t is not None and t.is_static and a.size == t.numel else a

    def ir_text(self) -> str:
        view = Module()
        view.functions = self.exe.module.functions
        view.constants = {n: self._printed(n, a) for n, a in zip(self.program.constants, self.consts)}
        return print_module(view, elide_constants_over=serialize._INLINE_MAX_ELEMENTS)


def write(path, executables: dict, include_c: bool = False, target="cpu", save_transforms: bool = False) -> None:
    """Write `{entry name: (Executable, route data)}` into one `.cuv` at `path` (atomically), with native code
    for each level `target` names (targets.levels: a row, a family or a list of rows of one architecture), or
    for "wasm32" one WebAssembly module per level (its loader prepares the packed weights itself, their layout being
    the target's kernel library's).

    `save_transforms`: store the Winograd-transformed weights (4x their weights' bytes) instead of the weights. An
    exported file stores the weights and its loaders transform them after the checks: hashing the larger form at
    every open costs more than making it. The artifact cache saves them: its verified records skip the hash."""
    rows = targets.levels(target)
    host_code = targets.runs_here(rows)
    with targets.use(rows):
        parts = {name: _Entry(exe, route, host_code and exe.target == "cpu", save_transforms)
                 for name, (exe, route) in executables.items()}
    for name in parts:
        if not entries.NAME.match(name):
            raise ValueError(f"entry name {name!r} must match [A-Za-z_][A-Za-z0-9_]* (at most 63 characters)")
    consts, const_layout = _pack([a for p in parts.values() for a in p.stored_consts()])
    prepared, prep_layout = _pack([a for p in parts.values() for a in p.prepared.values()])
    layout = {"consts": const_layout, "prepared": prep_layout}
    metas = {name: p.meta(standalone.entry_prefix(k), layout) for k, (name, p) in enumerate(parts.items())}
    sources = [p.program.source for p in parts.values()]
    natives = _natives(rows, sources) if rows[0].dlopen else _wasm_natives(rows, sources, parts.values())
    features = min((s.features for s in natives), key=lambda f: bin(f).count("1"))  # the least demanding level
    triple, levels = rows[0].triple, [r.name for r in rows]
    meta = {"format": 1, "cuvil_version": __version__, "target": target if isinstance(target, str) else list(target),
            "levels": levels, "triple": triple, "features": host.names(features),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "entries": metas}
    sections = [container.Section("meta", [json.dumps(meta).encode()]),
                container.Section("entries", [entries.format_entries(metas).encode()]), *natives]
    if any(p.consts for p in parts.values()):  # even if every constant is derived: a loader expects the section
        sections.append(container.Section("consts", consts))
    if prepared:
        sections.append(container.Section("prepared", prepared))
    ir = {name: p.ir_text() for name, p in parts.items()}
    sections.append(container.Section("ir", [zlib.compress(json.dumps(ir).encode())], container.ZLIB))
    if include_c:
        csrc = {name: standalone.prefixed(src, standalone.entry_prefix(k))  # the C as compiled
                for k, (name, src) in enumerate(zip(parts, sources))}
        sections.append(container.Section("csrc", [zlib.compress(json.dumps(csrc).encode())], container.ZLIB))
    container.write(path, sections, triple, features)


def _wasm_natives(rows: tuple, sources: list, parts) -> list:
    """One WebAssembly module per level, as `_natives` names them, its kernels' vectors as wide as the blocks the
    IR's layout chose (a host's, where it was compiled for the host)."""
    blocks = {op.operands[1].type.shape[5] for p in parts for op in p.exe.module.main.walk() if op.name == "conv_nchwc"}
    return [container.Section(_native_name(k), [wasm.build(sources, row, max(blocks, default=None))],
                              features=host.bits(row.features)) for k, row in enumerate(rows)]


def _natives(rows: tuple, sources: list) -> list:
    """One native section per level, `native`, `native.1`, ...: each with the CPU features its code needs (the
    host's: every feature this CPU has, since -march=native may use any)."""
    return [container.Section(_native_name(k), [standalone.build(sources, target=None if row.is_host else row)],
                              features=host.cpuinfo_bits() if row.is_host else host.bits(row.features))
            for k, row in enumerate(rows)]


def _native_name(k: int) -> str:
    return "native" if k == 0 else f"native.{k}"


def _derived(program, saved: list, consts: list, prepared: list) -> set:
    """The constants a file leaves out, its prepared forms saved instead: those only `prepare` reads, whose forms
    are saved anyway (`saved`: Winograd transforms in a cache entry) or take no more room than they do (GEMM panels
    of a wide matrix; a narrow one's panels are padded, so it is stored as it is and packed at load)."""
    forms: dict = {}
    for j, (src, kept) in enumerate(zip(program.prepared_from, saved)):
        forms.setdefault(src, []).append((j, kept))
    return {k for k, js in forms.items() if k not in program.direct_consts and (
        all(kept for _, kept in js) or
        sum(prepared[j].nbytes for j, _ in js) <= consts[k].nbytes * (1 + PACKED_SLACK))}


def _pack(arrays: list) -> tuple:
    """The section's parts (each array once, 64-byte aligned, raw) and where each array lies."""
    parts, layout, at = [], {}, 0
    for a in arrays:
        key = _key(a)
        if key in layout:
            continue
        pad = container.align(at) - at
        if pad:
            parts.append(b"\0" * pad)
        raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        layout[key] = {"offset": at + pad, "nbytes": int(raw.nbytes)}
        parts.append(raw)
        at += pad + raw.nbytes
    return parts, layout


def _key(a: np.ndarray) -> tuple:
    """The same memory is stored once (a weight shared by several entries or signatures)."""
    return (a.__array_interface__["data"][0], a.nbytes, a.dtype.str, a.shape)


def _param(name: str, t) -> dict:
    return {"name": name, "dtype": str(t.dtype), "shape": [d if isinstance(d, int) else str(d) for d in t.shape]}


def _dtype(a: np.ndarray) -> str:
    from ...ir.dtypes import DType

    return next(str(d) for d in DType if d.numpy == a.dtype)


def _arena_text(slots: list) -> str:
    """The memory plan's size as text (the native `arena_bytes` adds per-op scratch and is what loaders use)."""
    return " + ".join(f"max({', '.join(map(str, s))})" if len(s) > 1 else str(s[0]) for s in slots if s) or "0"


