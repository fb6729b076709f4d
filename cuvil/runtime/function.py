"""`cuvil.runtime.Function`: one entry point of a loaded `.cuv`, called through the same machinery as in-process
compiled code (backends/cpu/executable.py's CpuFunction and its C path), built from `meta` alone.

The call machinery (and the C call extension it finds through the toolchain's cache) is imported at the first
call, not at load: `cuvil.load` imports only what checking and mapping a file needs (tests/runtime/test_imports.py).
"""
from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, NamedTuple

from ..errors import ArtifactError, ShapeError
from ..ir.symbolic import parse_dim
from ..ir.types import TensorType

if TYPE_CHECKING:
    from ..backends.cpu.executable import CpuFunction


class Param(NamedTuple):
    """An input or output of an entry point: sizes are ints, or strings naming symbolic sizes (`"batch"`)."""
    name: str
    dtype: str
    shape: tuple


class Function:
    """An entry point: `fn(*arrays, **named)` returns one output or a tuple; `fn.run(inputs, outputs)` writes into
    the caller's buffers. NumPy in and out; torch tensors in, torch tensors out. A function compiled for several
    signatures (a `@cuvil.jit` function called with several shapes) tries each in turn."""

    def __init__(self, artifact, name: str, variants: list):
        self._artifact, self.name, self._variants = artifact, name, variants
        e = artifact.metadata["entries"][name]
        self.inputs = [Param(p["name"], p["dtype"], tuple(p["shape"])) for p in e["inputs"]]
        self.outputs = [Param(p["name"], p["dtype"], tuple(p["shape"])) for p in e["outputs"]]
        self.metadata = e
        self._single = e.get("route", {}).get("single", len(self.outputs) == 1)
        self._calls = None
        self._lock = threading.Lock()

    def _compiled(self) -> list:
        """The CpuFunction of each signature, made at the first call (after the constants' check)."""
        if self._calls is None:
            with self._lock:
                if self._calls is None:
                    from ..backends.cpu.executable import CpuFunction  # imported while check 5 still hashes

                    self._artifact._default_threads()
                    self._calls = [self._build(CpuFunction, n) for n in self._variants]
        return self._calls

    def prepare(self) -> None:
        """Build the call machinery now (after the constants' check; ArtifactError if it failed), not at the first
        call: a caller with idle time before its first call (a Ray worker waiting for its first batch) spends it."""
        self._compiled()

    def _build(self, CpuFunction, name: str) -> "CpuFunction":
        e = self._artifact.metadata["entries"][name]
        consts, prepared = self._artifact.constants(name)
        program = Program(Signature(e), e["symbols"], [c["name"] for c in e["constants"]])
        try:
            return CpuFunction(program, self._artifact._lib, consts, prepared, prefix=e["prefix"])
        except ValueError as err:  # saved buffers that do not fit the library's
            raise ArtifactError(f"{self._artifact.path}: entry {name!r}: {err}") from None

    # -- calling --------------------------------------------------------------------------------------------------
    def __call__(self, *args, **named):
        arrays, torch_in = self._arrays(args, named)
        outs = self._call(arrays)
        if torch_in:
            outs = [_to_torch(o) for o in outs]
        return outs[0] if self._single and len(outs) == 1 else tuple(outs)

    def run(self, inputs: list, outputs: list | None = None, workspace=None) -> list:
        """Run with NumPy inputs; into `outputs` (C-contiguous arrays of the output dtypes and sizes, written in
        place, no copy) when given, else into new arrays. Returns the outputs. With `outputs`, `workspace(nbytes)`
        may give the call's scratch (a 64-byte aligned uint8 array: a Runtime's memory pool)."""
        if self._artifact.closed:
            self._artifact.function(self.name)  # raises: closed
        if outputs is None:
            return self._call(list(inputs))
        calls, errors = self._compiled(), []
        for call in calls:
            try:
                return call.call_into(list(inputs), list(outputs), workspace)
            except ShapeError as e:
                errors.append(e)
        raise errors[0]

    def set_num_threads(self, n: int) -> None:
        """Threads for this function's kernels (shared by every entry of its file: one kernel library)."""
        self._artifact.set_num_threads(n)

    def _call(self, arrays: list) -> list:
        if self._artifact.closed:
            self._artifact.function(self.name)  # raises: closed
        calls = self._compiled()
        for call in calls:
            if call.call_exact is not None:
                outs = call.call_exact(*arrays)
                if outs is not None:
                    return outs
        errors = []
        for call in calls:
            try:
                return call.call_ctypes(arrays)
            except ShapeError as e:
                errors.append(e)
        raise errors[0]

    def _arrays(self, args: tuple, named: dict) -> tuple:
        names = [p.name for p in self.inputs]
        if len(args) > len(names):
            raise ShapeError(f"{self.name} takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        given = dict(zip(names, args))
        for k, v in named.items():
            if k not in names:
                raise ShapeError(f"{self.name} has no input {k!r} (inputs: {', '.join(names)})")
            if k in given:
                raise ShapeError(f"input {k!r} is given both by position and by name")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise ShapeError(f"{self.name}: missing inputs {', '.join(missing)}")
        values = [given[n] for n in names]
        torch_in = any(type(v).__module__.startswith("torch") for v in values)
        return ([_from_torch(v) for v in values] if torch_in else values), torch_in

    def __repr__(self) -> str:
        sig = lambda ps: ", ".join(f"{p.name}: {p.dtype}[{','.join(map(str, p.shape))}]" for p in ps)  # noqa: E731
        return f"<cuvil.runtime.Function {self.name}({sig(self.inputs)}) -> ({sig(self.outputs)})>"


def _from_torch(x):
    if not type(x).__module__.startswith("torch"):
        return x
    t = x.detach().cpu()
    if str(t.dtype) == "torch.bfloat16":
        import ml_dtypes

        return t.view(sys.modules["torch"].int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _to_torch(a):
    torch = sys.modules["torch"]  # imported: a torch tensor came in
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view("int16").copy()).view(torch.bfloat16)
    return torch.from_numpy(a if a.flags.writeable else a.copy())


class Program:
    """What a CpuFunction reads of a CProgram (backends/cpu/codegen.py), from `meta`: no code generator."""

    def __init__(self, function, symbols: list, constants: list, plan=None):
        self.function, self.symbols, self.constants, self.plan = function, list(symbols), constants, plan
        self.data_sizes: dict = {}  # an exported library computes no size from the data (export refuses those)


class Signature:
    """What a CpuFunction reads of its IR function (argument and result types, size relations), from `meta`."""

    class Arg:
        def __init__(self, type, name):
            self.type, self.name = type, name

    def __init__(self, e: dict):
        self.name = "main"
        self.arg_types = [_type(p) for p in e["inputs"]]
        self.result_types = [_type(p) for p in e["outputs"]]
        from ..ir.parser import parse_relation

        self.constraints = [parse_relation(text) for text in e.get("relations", ())]
        self.args = [self.Arg(t, p["name"]) for t, p in zip(self.arg_types, e["inputs"])]


def _type(p: dict) -> TensorType:
    return TensorType(p["dtype"], tuple(d if isinstance(d, int) else parse_dim(d) for d in p["shape"]))
