"""The artifact cache: compiled CPU executables saved whole, found again by a key taken before the frontend runs.

    key (model bytes or module state + options + environment) --> <cache>/artifacts/<key>.cuv

An entry is a `.cuv` file (docs/artifact.md), written by the same writer as `cuvil.export` and read by the same
loader as `cuvil.load`, so a warm start passes the loader's checks: the header's CRC, the section table's and the
metadata's and native code's SHA-256 before anything runs, and the constants' SHA-256 in a background thread
that the first call waits for. The entry's key is in its metadata and must equal the key asked for.

Files are written beside their place and published with one rename, so readers see all of an entry or none.
A corrupt entry (any failed check, at load or at the first call) is deleted and is a miss: the caller's
`rebuild` compiles and saves it again, so a corrupt entry never gives an answer. An entry that fails for a
passing reason (an OS error: too many open files) is kept. `CUVIL_ARTIFACT_CACHE=0` turns the cache off; it
lives under `CUVIL_CACHE_DIR` beside the C compiler's cache.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import json
import logging
import math
import os
import time
from pathlib import Path

import numpy as np

from ..backends.cpu import toolchain
from ..compiler import Executable
from ..errors import ArtifactError, CuvilError
from ..ir import serialize
from ..ir.core import Module
from ..runtime import artifact as runtime
from ..runtime import container
from ..runtime import entries as entry_text
from ..runtime.function import Signature

log = logging.getLogger("cuvil.cache")
SUFFIX = ".cuv"
VERIFIED = ".verified"  # beside an entry: the stat and section table it had when every SHA-256 last passed


def enabled() -> bool:
    return os.environ.get("CUVIL_ARTIFACT_CACHE", "1") != "0"


def folder() -> Path:
    return toolchain.cache_dir() / "artifacts"


def entry_path(key: str) -> Path:
    return folder() / (key[:40] + SUFFIX)


# -- saving ------------------------------------------------------------------------------------------------------
def save(key: str, exe, route: dict) -> bool:
    """Save a CPU `Executable` under `key` with the route's own JSON data; False if it cannot be saved."""
    if not enabled() or exe.target != "cpu":
        return False
    from ..backends.cpu import export

    entry = entry_path(key)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        export.write(entry, {"main": (exe, {"kind": "cache", "key": key, "data": route})}, save_transforms=True)
        log.info("saved compiled artifact %s", entry)
        return True
    except OSError as e:  # the disk is full, the folder read-only: compile without saving
        log.warning("cannot write the artifact cache entry %s: %s", entry, e)
        return False
    except (TypeError, ValueError, CuvilError) as e:  # route data that JSON cannot hold, a signature C cannot check
        log.info("not saving artifact %s: %s", entry, e)
        return False


# -- loading -----------------------------------------------------------------------------------------------------
def load(key: str, rebuild=None):
    """(Executable, route data) of the entry saved under `key`, or None (a miss). `rebuild()` compiles anew (and
    saves) if the constants turn out corrupt at the first call; without it that call raises ArtifactError."""
    if not enabled():
        return None
    entry = entry_path(key)
    if not entry.exists():
        return None
    try:
        with _collector_paused():
            return _load_entry(entry, key, rebuild)
    except FileNotFoundError as e:  # the entry was deleted meanwhile
        log.warning("artifact %s disappeared (%s): compiling without it", entry, e)
        return None
    except OSError as e:  # a passing reason: keep the entry for the next process
        log.warning("artifact %s could not be loaded (%s): compiling without it", entry, e)
        return None
    except (CuvilError, ValueError, KeyError, TypeError) as e:
        log.warning("artifact %s is unusable (%s): rebuilding it", entry, e)
    discard(entry)
    return None


def load_saved(key: str, exe, route: dict, rebuild):
    """Save `exe` under `key`, then load that entry as a warm start loads it (weights mapped from the file, so the
    caller can drop `exe`'s private copies); None where it is not saved or not loaded. Its sections are not hashed
    again: their bytes left this process a moment ago, and the file must still have the stat it had then (entries
    are published by rename and never written in place)."""
    if not save(key, exe, route):
        return None
    entry = entry_path(key)
    try:
        written = _identity(os.stat(entry))
        with _collector_paused():
            hit = _load_entry(entry, key, rebuild, lambda c: c.stat is not None and _identity(c.stat) == written)
        hit[0]._run.hashed = False  # so no verified record is made from it: none of its hashes was checked here
        return hit
    except (OSError, CuvilError, ValueError, KeyError, TypeError) as e:  # keep `exe`: it runs all the same
        log.warning("artifact %s was saved but does not load (%s): keeping the compiled one", entry, e)
        return None


# -- exporting ---------------------------------------------------------------------------------------------------
def export_entry(exe, path, name: str, route: dict) -> bool:
    """Write the entry a hit `exe` was loaded from to `path` as `cuvil.export` would write `exe` (its route, entry
    name and argument names re-targeted; code, constants and prepared forms copied): exporting an entry whose
    weights are stored packed would otherwise compile the model again for its IR. False (nothing written) where
    `exe` is no hit, its entry fails a check or holds forms larger than the weights they replace (Winograd
    transforms, which a `.cuv` does not store: weights are stored once): the caller writes it the ordinary way."""
    first = exe.cache_entry
    if first is None:
        return False
    art = first.art
    if not _weights_stored_once(art.metadata["entries"]["main"]):
        return False
    try:
        art.verify()  # every section's SHA-256 (waited for, or the verified record's): a corrupt entry is not copied
    except ArtifactError:
        return False
    meta = json.loads(json.dumps(art.metadata))
    e = meta["entries"].pop("main")
    e["route"] = route
    for p, n in zip(e["inputs"], route.get("names") or ()):
        p["name"] = n
    for p, n in zip(e["outputs"], route.get("output_names") or [f"output_{j}" for j in range(len(e["outputs"]))]):
        p["name"] = n
    meta["entries"] = {name: e}
    meta["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    box = art._container
    sections = [container.Section("meta", [json.dumps(meta).encode()]),
                container.Section("entries", [entry_text.format_entries(meta["entries"]).encode()])]
    sections += [container.Section(r.name, [box.data(r.name, check=False)], r.flags, r.features)
                 for r in box.rows.values() if r.name not in ("meta", "entries")]
    container.write(os.fspath(path), sections, box.triple, box.required_features)
    log.info("exported artifact %s as %s (copied, not compiled again)", first.entry, path)
    return True


def _weights_stored_once(e: dict) -> bool:
    """Whether an entry's prepared forms take no more room than the weights they replace, as in an export."""
    from ..backends.cpu.export import PACKED_SLACK

    replaced = sum(runtime._numpy_dtype(c["dtype"]).itemsize * math.prod(c["shape"])
                   for c in e["constants"] if c.get("derived"))
    return sum(p["nbytes"] for p in e["prepared"]) <= replaced * (1 + PACKED_SLACK)


def return_freed_memory() -> None:
    """Collect the cycles a dropped IR module forms, then hand the C heap's free pages back to the system (glibc's
    malloc_trim): weights of 2-10 MB lie in the heap, not in mappings of their own, and freeing them alone leaves
    the resident set as it was (BERT-base's ONNX cold compile kept 1.84x its weights)."""
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        trim(0)


def _identity(st) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _load_entry(entry: Path, key: str, rebuild, verified_by=None):
    art = runtime.load(entry, _verified_by=verified_by or functools.partial(_was_verified, entry))
    e = art.metadata["entries"]["main"]
    route = e["route"]
    if route.get("kind") != "cache" or route.get("key") != key:
        raise ArtifactError(f"{entry} holds the entry of another key")
    sig = Signature(e)
    first = _FirstCall(art, entry, rebuild)
    exe = Executable(first.module, "cpu", first, e.get("pass_timings") or {},
                     signature=(sig.arg_types, sig.result_types), cache="hit")
    first.exe = exe
    exe.cache_entry = first
    return exe, route["data"]


class _FirstCall:
    """An entry's first call: waits for the constants' check, then hands the executable its CpuFunction (later
    calls go straight to it). A corrupt entry is deleted there and `rebuild` gives the executable fresh code."""

    def __init__(self, art, entry: Path, rebuild):
        self.art, self.entry, self.rebuild, self.exe = art, entry, rebuild, None
        self.hashed = True  # every section's SHA-256 checked (at load or before the first call), or recorded so

    def __call__(self, inputs: list) -> list:
        return self.resolve()(inputs)

    def resolve(self):
        try:
            self.exe._run = self.art.function("main")._compiled()[0]
        except ArtifactError as e:
            self._rebuild(e)
        else:  # every section passed its SHA-256 (waited for above), or the record said so already
            if self.hashed:
                _record_verified(self.entry, self.art._container)
        return self.exe._run

    def module(self) -> Module:
        """The optimised IR (parsed when first asked for), or the rebuilt one's if the entry's is corrupt or lacks
        weights that its prepared forms replaced (the IR needs the originals: they are compiled again)."""
        if any(c.get("derived") for c in self.art.metadata["entries"]["main"]["constants"]):
            if self.rebuild is None:
                raise CuvilError(f"{self.entry} stores packed weights in place of the originals, so its IR needs "
                                 "the model compiled again, and no rebuild was given")
            log.info("artifact %s: compiling again for the IR (its weights are stored packed)", self.entry)
            self._replace(self.rebuild())
            return self.exe.module
        try:
            return _parse_module(self.art)
        except ArtifactError as e:
            self._rebuild(e)
            return self.exe.module

    def _rebuild(self, error: ArtifactError) -> None:
        log.warning("artifact %s is corrupt (%s): rebuilding it", self.entry, error)
        discard(self.entry)
        if self.rebuild is None:
            raise error
        self._replace(self.rebuild())

    def _replace(self, fresh) -> None:
        self.exe._module, self.exe._run, self.exe.cache = fresh._module, fresh._run, "miss"
        self.exe.cache_entry = None  # its code is the fresh one now, not the entry's

    def __getattr__(self, name):  # what callers read of a CpuFunction (call_exact, program, prepared)
        if name.startswith("_") or name in ("art", "entry", "rebuild", "exe", "hashed"):
            raise AttributeError(name)
        return getattr(self.resolve(), name)


# -- verified records: an entry's weights are hashed once, not at every warm start -------------------------------
RACY_S = 1.0  # a file changed this recently may change again within one timestamp: never recorded as verified


def _record_path(entry: Path) -> Path:
    return entry.with_suffix(VERIFIED)


def _stamp(container) -> str:
    """What the record binds: the mapped file's identity and times (a write to it changes its ctime, which no
    user-space call sets back) and the SHA-256 of its section table, which lists every section's digest."""
    st = container.stat
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {container.table_sha.hex()}"


def _was_verified(entry: Path, container) -> bool:
    """Whether this very file (same inode, size, times and section table) passed every SHA-256 in an earlier load."""
    if container.stat is None:
        return False
    try:
        return _record_path(entry).read_text() == _stamp(container)
    except OSError:
        return False


def _record_verified(entry: Path, container) -> None:
    st = container.stat
    if st is None or time.time() - max(st.st_mtime, st.st_ctime) <= RACY_S or _was_verified(entry, container):
        return
    try:
        toolchain.write_text_atomic(_record_path(entry), _stamp(container))
    except OSError as e:  # a read-only cache: every load hashes the weights
        log.debug("cannot record %s as verified: %s", entry, e)


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


def _parse_module(art) -> Module:
    """The optimised IR, parsed on first use; its large constants are the mapped arrays the library reads."""
    consts, _ = art.constants("main")
    table = {name: np.ascontiguousarray(a).reshape(-1).view(np.uint8) for name, a in consts.items()
             if a.size > serialize._INLINE_MAX_ELEMENTS}
    text = art.ir_text("main")
    module = serialize._TableParser(text, table).module()
    module.metadata = art.metadata["entries"]["main"].get("metadata") or {}
    return module


def discard(entry: Path) -> None:
    """Delete an entry and its verified record (a process that mapped it keeps its pages)."""
    try:
        os.unlink(_record_path(entry))
    except OSError:
        pass
    try:
        os.unlink(entry)
    except FileNotFoundError:
        pass
    except IsADirectoryError:  # an entry of the earlier layout (lib.so + artifact.cvir)
        toolchain.discard_entry(entry)


def verify() -> list:
    """Check every entry in full (the constants too, which `load` checks in the background) and delete the corrupt
    ones; returns their paths."""
    bad = []
    for entry in _entries():
        try:
            runtime.check(entry)
        except (CuvilError, OSError, ValueError, KeyError, TypeError) as e:
            log.warning("artifact %s is corrupt (%s): deleting it", entry, e)
            discard(entry)
            bad.append(entry)
    return bad


def clear() -> None:
    """Delete every saved artifact (the C compiler's cache stays)."""
    for entry in folder().glob("*") if folder().exists() else ():
        if not entry.name.startswith("."):
            discard(entry)


def _entries() -> list:
    return sorted(folder().glob("*" + SUFFIX)) if folder().exists() else []


def entries() -> list:
    """The saved artifacts' paths (what `cuvil cache info` counts and `verify()` checks)."""
    return _entries()
