"""A wasm32 `.cuv` run under wasmtime (the pip package) from Python: the same checks as `cuvil.load`, then the
module's ABI (docs/artifact.md, "The wasm32 module's ABI"), as `cuvil/runtime/js/cuvil.js` does in JavaScript.

    cuvil.export(fn, "model.cuv", "wasm32", example_inputs=(x,))    # needs the ziglang package
    y = cuvil.runtime.wasm.load("model.cuv")(x)                     # needs wasmtime; y equals fn(x)

A file holds a module per level (`wasm32`: SIMD128, `wasm32-relaxed`: relaxed-SIMD); the loader runs the one with the
most features the engine validates, less those `CUVIL_DISABLE_CPU_FEATURES` names (`relaxed_simd`).
"""
from __future__ import annotations

import numpy as np

from ..errors import ArtifactError, CuvilError, ShapeError
from . import host
from .artifact import _choose_native, _meta, _numpy_dtype
from .container import Container
from .function import Param

TRIPLE = "wasm32-wasi"
ABI_VERSION = 1
OPCODES = ("const", "sym", "dim", "add", "mul", "floordiv", "mod", "eq", "bind", "out", "ge")  # cuvil_checks.h
OPERANDS = {"const": 1, "sym": 1, "dim": 2, "bind": 1, "out": 1}
ERROR_INDEX = 1  # cuvil_rt.h's CUVIL_ERROR_INDEX
# One function of (v128, v128, v128) -> v128 each: valid where the engine has the feature (cuvil.js has the same).
_PROBE_TYPE = "0061736d01000000" "01080160037b7b7b017b" "03020100"
PROBES = {"simd128": bytes.fromhex(_PROBE_TYPE + "0a060104002000" "0b"),  # local.get 0
          "relaxed_simd": bytes.fromhex(_PROBE_TYPE + "0a0d010b00200020012002fd8502" "0b")}  # f32x4.relaxed_madd


def load(path) -> "WasmArtifact":
    """Check a wasm32 `.cuv` (a path or its bytes) as `cuvil.load` does and instantiate its module under wasmtime."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        container = Container.from_buffer(memoryview(path).toreadonly())
    else:
        container = Container.open(path)
    if container.triple != TRIPLE:
        raise ArtifactError(f"{container.path}: made for {container.triple}, not {TRIPLE} (cuvil.load runs it)")
    meta = _meta(container)
    for name in container.rows:
        container.check(name)
    return WasmArtifact(container, meta)


def engine_features(engine) -> int:
    """The feature bits whose probe module `engine` validates, less those CUVIL_DISABLE_CPU_FEATURES names."""
    import wasmtime

    def valid(probe: bytes) -> bool:
        try:
            wasmtime.Module.validate(engine, probe)
        except wasmtime.WasmtimeError:
            return False
        return True
    return host.bits(n for n, probe in PROBES.items() if valid(probe)) & ~host.masked_bits()


class WasmArtifact:
    """The entries of a wasm32 `.cuv` in one wasmtime instance: `artifact[name]`, calling it calls `main`; `native`
    is the level's section run."""

    def __init__(self, container: Container, meta: dict):
        try:
            import wasmtime
        except ImportError:
            raise CuvilError("running a wasm32 .cuv from Python needs wasmtime: pip install wasmtime") from None
        self.path, self.metadata, self._wt = container.path, meta, wasmtime
        self.store = wasmtime.Store(wasmtime.Engine())
        self.store.set_wasi(wasmtime.WasiConfig())
        linker = wasmtime.Linker(self.store.engine)
        linker.define_wasi()
        have = engine_features(self.store.engine)
        self.native = _choose_native(container, have)
        missing = container.rows[self.native].features & ~have
        if missing:
            raise ArtifactError(f"{self.path}: the module needs {', '.join(host.names(missing))}, which this wasmtime "
                                "lacks (or CUVIL_DISABLE_CPU_FEATURES masks)")
        module = wasmtime.Module(self.store.engine, bytes(container.data(self.native, check=False)))
        self.instance = linker.instantiate(self.store, module)
        self._exports = self.instance.exports(self.store)
        self.call("_initialize")
        if self.call("cuvil_abi_version") != ABI_VERSION:
            raise ArtifactError(f"{self.path}: wasm ABI version {self.call('cuvil_abi_version')}, this loader knows 1")
        consts = bytes(container.data("consts", check=False)) if "consts" in container.rows else b""
        self._consts_at = self.place(consts) if consts else 0
        self.entries = list(meta["entries"])
        self._functions = {}

    def call(self, name: str, *args):
        try:
            return self._exports[name](self.store, *args)
        except self._wt.Trap as e:
            raise CuvilError(f"the wasm32 module trapped in {name}: {e}") from None

    @property
    def memory(self):
        return self._exports["memory"]

    def place(self, data: bytes) -> int:
        """Copy `data` into fresh module memory (64-byte aligned); returns its address."""
        at = self.alloc(len(data))
        self.memory.write(self.store, data, at)
        return at

    def alloc(self, nbytes: int) -> int:
        at = self.call("cuvil_alloc", max(int(nbytes), 1))
        if at == 0:
            raise CuvilError(f"the wasm32 module cannot allocate {nbytes} bytes (its memory is at most 4 GiB)")
        return at

    def function(self, name: str = "main") -> "WasmFunction":
        if name not in self._functions:
            if name not in self.metadata["entries"]:
                raise KeyError(f"{self.path} has no entry {name!r} (entries: {', '.join(self.entries)})")
            self._functions[name] = WasmFunction(self, name)
        return self._functions[name]

    __getitem__ = function

    def __call__(self, *args):
        return self.function("main")(*args)


class WasmFunction:
    """One entry: `fn(*arrays)` returns one output or a tuple (NumPy in and out)."""

    def __init__(self, art: WasmArtifact, name: str):
        e = art.metadata["entries"][name]
        self._art, self.name, self._e, self._prefix = art, name, e, e["prefix"]
        self.inputs = [Param(p["name"], p["dtype"], tuple(p["shape"])) for p in e["inputs"]]
        self.outputs = [Param(p["name"], p["dtype"], tuple(p["shape"])) for p in e["outputs"]]
        self._consts = self._constant_table()

    def _constant_table(self) -> int:
        """The constants' addresses, then each prepared buffer's, filled by the module's `prepare`."""
        art, p = self._art, self._prefix
        addresses = [art._consts_at + c["offset"] for c in self._e["constants"]]
        count = art.call(p + "packed_count")
        addresses += [art.alloc(art.call(p + "packed_bytes", j)) for j in range(count)]
        table = art.place(np.asarray(addresses or [0], np.uint32).tobytes())
        for j in range(count):
            art.call(p + "prepare", table, j)
        return table

    def __call__(self, *arrays):
        if len(arrays) != len(self.inputs):
            raise ShapeError(f"{self.name}: expected {len(self.inputs)} inputs "
                             f"({', '.join(p.name for p in self.inputs)}), got {len(arrays)}")
        arrays = [self._input(a, p) for a, p in zip(arrays, self.inputs)]
        dims, out_shapes = self._sizes([a.shape for a in arrays])
        outs = self._run(arrays, dims, out_shapes)
        return outs[0] if self._e.get("route", {}).get("single", len(outs) == 1) and len(outs) == 1 else tuple(outs)

    def _input(self, a, p: Param) -> np.ndarray:
        a = np.ascontiguousarray(a)
        want = _numpy_dtype(p.dtype)
        if a.dtype != want:
            raise ShapeError(f"{self.name}: input {p.name!r} is {a.dtype}, the entry takes {p.dtype}")
        if a.ndim != len(p.shape):
            raise ShapeError(f"{self.name}: input {p.name!r} has rank {a.ndim}, the entry takes shape {list(p.shape)}")
        return a

    def _sizes(self, shapes: list) -> tuple:
        """The symbols' values and the outputs' shapes, from the entry's check program."""
        ranks = [len(p.shape) for p in self.outputs]
        sym, out = run_checks(self._e["checks"], shapes, len(self._e["symbols"]), sum(ranks))
        if isinstance(sym, str):
            given = ", ".join(f"{p.name}: {tuple(s)}" for p, s in zip(self.inputs, shapes))
            want = ", ".join(f"{p.name}: {list(p.shape)}" for p in self.inputs)
            raise ShapeError(f"{self.name}: the input sizes ({given}) do not fit the signature ({want}): {sym}")
        starts = np.cumsum([0] + ranks)
        return sym, [tuple(out[a:b]) for a, b in zip(starts, starts[1:])]

    def _run(self, arrays: list, dims: list, out_shapes: list) -> list:
        art, p = self._art, self._prefix
        outs = [np.empty(s, _numpy_dtype(o.dtype)) for s, o in zip(out_shapes, self.outputs)]
        held = [art.place(a.tobytes()) for a in arrays] + [art.alloc(o.nbytes) for o in outs]
        dims_at = art.place(np.asarray(dims or [0], np.int64).tobytes())
        arena = art.alloc(art.call(p + "arena_bytes", dims_at))
        table = art.place(np.asarray(held, np.uint32).tobytes())
        held += [dims_at, arena, table]
        try:
            rc = art.call(p + "main", table, table + 4 * len(arrays), dims_at, arena, self._consts)
            if rc != 0:
                raise _failure(art, rc)
            for o, at in zip(outs, held[len(arrays):]):
                o.reshape(-1).view(np.uint8)[:] = art.memory.read(art.store, at, at + o.nbytes)
        finally:
            for at in held:
                art.call("cuvil_free", at)
        return outs


def _failure(art: WasmArtifact, rc: int) -> CuvilError:
    from .. import errors

    at = art.call("cuvil_last_error")
    raw = art.memory.read(art.store, at, at + 512)
    text = bytes(raw[:raw.index(0)] if 0 in raw else raw).decode("utf-8", "replace")
    if rc == ERROR_INDEX:
        return errors.IndexRangeError(text)
    return CuvilError(f"compiled function failed with code {rc}" + (f": {text}" if text else ""))


def run_checks(code: list, shapes: list, n_sym: int, n_out: int) -> tuple:
    """cuvil_checks.h's interpreter: (symbol values, output sizes), or (a message, None) when a check fails."""
    stack, sym, out, pc = [], [0] * n_sym, [0] * n_out, 0
    while pc < len(code):
        op = OPCODES[code[pc]]
        a = code[pc + 1:pc + 1 + OPERANDS.get(op, 0)]
        pc += 1 + len(a)
        if op == "const":
            stack.append(a[0])
        elif op == "sym":
            stack.append(sym[a[0]])
        elif op == "dim":
            stack.append(shapes[a[0]][a[1]])
        elif op in ("add", "mul", "floordiv", "mod"):
            y, x = stack.pop(), stack.pop()
            if op in ("floordiv", "mod") and y == 0:
                return f"a size divides by {x} by 0", None
            stack.append(x + y if op == "add" else x * y if op == "mul" else x // y if op == "floordiv" else x % y)
        elif op in ("eq", "ge"):
            y, x = stack.pop(), stack.pop()
            if (x != y) if op == "eq" else (x < y):
                return f"a size is {x} where {'' if op == 'eq' else 'at least '}{y} is needed", None
        elif op == "bind":
            sym[a[0]] = stack.pop()
        elif op == "out":
            size = stack.pop()
            if size < 0:
                return f"an output size would be {size}", None
            out[a[0]] = size
    return sym, out
