"""The artifact cache: compiled CPU executables saved whole, found again by a key taken before the frontend runs.

    key (model bytes or module state + options + environment) --> <cache>/artifacts/<key>/
        lib.so          the model's shared library
        artifact.cvir   Cuvil's binary IR file (cuvil/ir/serialize.py): the constants the library reads, raw and
                        memory-mapped on load, and as metadata what the Executable needs without the IR pipeline
                        (argument and result types with symbolic dims, size symbols, constant order, memory plan,
                        the optimised IR's text for `.module`, the library's SHA-256, the route's own data)

An entry is written into a temporary folder and published with one rename, so readers see all of it or none;
when two processes publish the same entry the second rename fails and its copy is dropped. A corrupt entry (the
IR file's header or section checksums, its length or the library's digest do not match, or the library does not
load) is moved aside, deleted, and reported as a miss, so the caller compiles and saves it again. A load skips
the constants' own CRCs (15 ms for ResNet-18's 47 MB); `verify()` checks those too. `CUVIL_ARTIFACT_CACHE=0` turns the
cache off; it lives under `CUVIL_CACHE_DIR` beside the C compiler's cache.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import logging
import mmap
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..backends.cpu import toolchain
from ..errors import CuvilError
from ..ir import serialize
from ..ir.core import Module
from ..ir.printer import print_module
from ..ir.symbolic import parse_dim
from ..ir.types import parse_type

log = logging.getLogger("cuvil.cache")
IR_FILE, LIB_FILE = "artifact.cvir", "lib.so"
PREPARED = "cuvil_prepared_"  # names of the saved prepared buffers among the entry's constants


def enabled() -> bool:
    return os.environ.get("CUVIL_ARTIFACT_CACHE", "1") != "0"


def folder() -> Path:
    return toolchain.cache_dir() / "artifacts"


def entry_path(key: str) -> Path:
    return folder() / key[:40]


# -- saving ------------------------------------------------------------------------------------------------------
def save(key: str, exe, route: dict) -> bool:
    """Save a CPU `Executable` under `key` with the route's own JSON data; False if it cannot be saved."""
    if not enabled() or exe.target != "cpu" or not hasattr(exe, "library_path"):
        return False
    entry = entry_path(key)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    except OSError as e:
        log.warning("cannot write the artifact cache in %s: %s", entry.parent, e)
        return False
    try:
        shutil.copyfile(exe.library_path, tmp / LIB_FILE)
        serialize.save(_constants_module(exe, key, route, _sha256(tmp / LIB_FILE)), tmp / IR_FILE)
        os.replace(tmp, entry)
        log.info("saved compiled artifact %s", entry)
        return True
    except OSError:  # another process published the same entry first (or the disk is full): keep theirs
        return False
    except (TypeError, ValueError) as e:  # route data that JSON cannot hold
        log.info("not saving artifact %s: %s", entry, e)
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _constants_module(exe, key: str, route: dict, lib_sha256: str) -> Module:
    """A module holding only the constants the library reads; everything else rides in its metadata."""
    from ..backends.cpu import backend  # imported already: `exe` was compiled

    program, module = exe._run.program, exe.module
    holder = Module()
    holder.constants = {name: module.constants[name] for name in program.constants}
    # what cuvil_prepare made that costs more to remake than to map (Winograd weights; not the GEMM panels, a
    # repacking as large as the weights): a hit maps these instead
    prepared = {f"{PREPARED}{j}": j for j, keep in enumerate(program.prepared_saved) if keep}
    if set(prepared) & set(holder.constants):
        prepared = {}
    holder.constants.update({name: exe._run.prepared[j] for name, j in prepared.items()})
    fn = program.function
    holder.metadata = {"artifact": {
        "key": key, "lib_sha256": lib_sha256, "route": route, "pass_timings": exe.pass_timings,
        "opt_level": backend.opt_level(),
        "args": [str(a.type) for a in fn.args], "arg_names": [a.name for a in fn.args],
        "results": [str(t) for t in fn.result_types], "constraints": [[str(a), str(b)] for a, b in fn.constraints],
        "symbols": list(program.symbols), "constants": list(program.constants), "prepared": prepared,
        "plan": [[str(d) for d in slot] for slot in program.plan.slots],
        "ir": print_module(_view(module, {name: module.constants[name] for name in program.constants}),
                           elide_constants_over=serialize._INLINE_MAX_ELEMENTS),
        "metadata": module.metadata}}
    return holder


def _view(module: Module, constants: dict) -> Module:
    """The module's functions with only the constants they use, and no metadata (saved on its own)."""
    view = Module()
    view.functions, view.constants = module.functions, constants
    return view


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- loading -----------------------------------------------------------------------------------------------------
def load(key: str):
    """(Executable, route data) of the entry saved under `key`, or None (a miss). Corrupt or incomplete entries
    are removed; an entry that fails for a passing reason (an OS error: too many open files, the kernel library
    not buildable now) is kept."""
    if not enabled():
        return None
    entry = entry_path(key)
    if not (entry / IR_FILE).exists():
        return None
    try:
        with _collector_paused():
            return _load_entry(entry, key)
    except FileNotFoundError as e:  # part of the entry is gone
        log.warning("artifact %s is incomplete (%s): rebuilding it", entry, e)
    except OSError as e:  # the entry passed its checks (or was not read): keep it for the next process
        log.warning("artifact %s could not be loaded (%s): compiling without it", entry, e)
        return None
    except (CuvilError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("artifact %s is unusable (%s): rebuilding it", entry, e)
    discard(entry)
    return None


def _load_entry(entry: Path, key: str):
    from ..backends.cpu import kernels
    from ..backends.cpu.executable import CpuFunction
    from ..compiler import Executable
    from ..passes.memory import MemoryPlan

    holder = _read_ir(entry / IR_FILE)
    meta = holder.metadata["artifact"]
    if meta["key"] != key or _sha256(entry / LIB_FILE) != meta["lib_sha256"]:
        raise CuvilError("the library does not match the digest recorded with it")
    fn = _Signature([parse_type(t) for t in meta["args"]], meta["arg_names"], [parse_type(t) for t in meta["results"]],
                    [(parse_dim(a), parse_dim(b)) for a, b in meta["constraints"]])
    plan = MemoryPlan(slots=[[parse_dim(d) for d in slot] for slot in meta["plan"]])
    kernels.load(meta["opt_level"])  # RTLD_GLOBAL: the model library resolves the kernel ABI against it
    lib = ctypes.CDLL(str(entry / LIB_FILE), mode=ctypes.RTLD_LOCAL)
    prepared = {j: holder.constants[name] for name, j in (meta.get("prepared") or {}).items()}
    run = CpuFunction(_Program(fn, meta["symbols"], meta["constants"], plan), lib, holder.constants, prepared)
    exe = Executable(lambda: _parse_module(meta, holder.constants), "cpu", run, meta["pass_timings"],
                     signature=(fn.arg_types, fn.result_types), cache="hit")
    exe.library_path = str(entry / LIB_FILE)
    return exe, meta["route"]


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while an entry loads: the few thousand objects a load allocates
    otherwise tip the process into a full collection, whose cost is the process's whole heap (50-80 ms with
    torch imported), not the load's. The collection is deferred, not avoided: it runs at a later allocation."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_ir(path: Path) -> Module:
    """The entry's IR file, mapped, with every check but the constants' CRCs (see `_PlacedConstants`)."""
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # ValueError on an empty file
    return _PlacedConstants(memoryview(mapped), str(path)).module()


class _PlacedConstants(serialize._Reader):
    """The IR file's reader, checking the header's CRC, the file's exact length, every section's CRC and each
    constant's place and size, but not each constant's CRC: those cost 15 ms per load on ResNet-18's 47 MB,
    a third of a warm start. `verify()` checks them all."""

    def table(self, index: list, data_start: int) -> dict:
        self.checked = self._placed
        return super().table(index, data_start)

    def _placed(self, offset: int, nbytes: int, crc: int, what: str) -> np.ndarray:
        if offset + nbytes > len(self.buf):
            raise self.fail(f"{what} runs past the end of the file")
        return np.frombuffer(self.buf, np.uint8, nbytes, offset)


class _Program:
    """What a CpuFunction reads of a CProgram, without importing the code generator."""

    def __init__(self, function, symbols: list, constants: list, plan):
        self.function, self.symbols, self.constants, self.plan = function, symbols, constants, plan


class _Signature:
    """What a CpuFunction reads of its function (argument types, result types, size relations), without the IR."""

    class _Arg:
        def __init__(self, type, name):
            self.type, self.name = type, name

    def __init__(self, arg_types, arg_names, result_types, constraints):
        self.name = "main"
        self.arg_types, self.result_types, self.constraints = arg_types, result_types, constraints
        self.args = [self._Arg(t, n) for t, n in zip(arg_types, arg_names)]


def _parse_module(meta: dict, constants: dict) -> Module:
    """The optimised IR, parsed on first use; its large constants are the mapped arrays the library reads."""
    table = {name: np.ascontiguousarray(arr).reshape(-1).view(np.uint8) for name, arr in constants.items()
             if arr.size > serialize._INLINE_MAX_ELEMENTS}
    module = serialize._TableParser(meta["ir"], table).module()
    module.metadata = meta["metadata"]
    return module


def discard(entry: Path) -> None:
    """Delete an entry atomically (the kernel cache's way)."""
    from ..backends.cpu.toolchain import discard_entry

    discard_entry(entry)


def verify() -> list:
    """Check every entry in full (each constant's CRC too, which `load` skips) and delete the corrupt ones;
    returns their paths."""
    bad = []
    for entry in folder().glob("?" * 40) if folder().exists() else ():  # entries are named by their key
        try:
            meta = serialize.load(entry / IR_FILE).metadata["artifact"]
            if _sha256(entry / LIB_FILE) != meta["lib_sha256"]:
                raise CuvilError("the library does not match the digest recorded with it")
        except (CuvilError, OSError, ValueError, KeyError, TypeError) as e:
            log.warning("artifact %s is corrupt (%s): deleting it", entry, e)
            discard(entry)
            bad.append(entry)
    return bad


def clear() -> None:
    """Delete every saved artifact (the C compiler's cache stays)."""
    for entry in folder().glob("*") if folder().exists() else ():
        if entry.is_dir() and not entry.name.startswith("."):
            discard(entry)


def entries() -> list:
    """The saved artifacts' paths (what `cuvil cache info` counts and `verify()` checks)."""
    return sorted(folder().glob("?" * 40)) if folder().exists() else []
