"""Cache keys: digests of what a compiled artifact depends on, taken before any frontend or pass runs.

    >>> from cuvil.cache.keys import Key
    >>> Key("demo").add("a", 1).add("b", b"bytes").hexdigest() == Key("demo").add("a", 1).add("b", b"bytes").hexdigest()
    True

Model files go through SHA-1 (about 1.1 GB/s on one core here, as fast as SHA-256 with the SHA extensions; BLAKE2b
0.7); a torch module's weights through `arrays_digests`, digest.c's checksum in 1 MiB pieces on every core. The key
guards against stale entries, not against an attacker who can write the cache folder (who could replace the compiled
library anyway). A model file's digest is remembered by its path and `stat` (size, mtime and ctime in nanoseconds,
inode), as git and ccache do, so a warm start does not read the file at all; a file changed within the last second
is always read. A record holds the stat it was made for beside the digest, and counts only for that stat (a swapped
record is a miss).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from pathlib import Path

from ..backends.cpu import toolchain
from ..backends.cpu.toolchain import write_text_atomic
from ..runtime import container
from .digest import ranges_digests

FORMAT = "cuvil-artifact-v1"
# Settings that change what the compiler produces (thread counts only change how it runs).
ENV_VARS = ("CUVIL_OPT_LEVEL", "CUVIL_EXTRA_CFLAGS", "CC")
RACY_S = 1.0  # a file modified this recently may change again within the same timestamp: never memoised
CHUNK = 1 << 24


class Key:
    """A digest over named, length-prefixed parts (so ("ab", "c") and ("a", "bc") differ)."""

    def __init__(self, kind: str):
        self.h = hashlib.sha256(f"{FORMAT}\0{kind}\0".encode())

    def add(self, name: str, value) -> "Key":
        data = value if isinstance(value, (bytes, bytearray, memoryview)) else str(value).encode()
        for part in (name.encode(), data):
            self.h.update(len(part).to_bytes(8, "little"))
            self.h.update(part)
        return self

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def bytes_digest(data) -> str:
    """SHA-1 of a bytes-like object (NumPy arrays and memoryviews are hashed in place, not copied)."""
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def arrays_digests(arrays: list) -> list:
    """For each uint8 array, the SHA-256 of the digests (digest.py, at memory speed) of its 1 MiB pieces: the pieces
    of all arrays are digested on every CPU, so a model's weights take about the time to read them (GPT-2's 500 MB:
    SHA-256 took 0.2 s on 2 cores). A different byte in any piece changes that piece's digest and so the array's."""
    cut = [[a[k:k + container.PIECE] for k in range(0, a.size, container.PIECE)] for a in arrays]
    flat = iter(ranges_digests([p for ps in cut for p in ps]))
    return [hashlib.sha256(b"".join(next(flat) for _ in ps)).hexdigest() for ps in cut]


def file_digest(path, memo_dir: Path | None = None) -> str:
    """SHA-1 of a file's contents, remembered in `memo_dir` by the file's path and stat."""
    path = os.path.abspath(os.fspath(path))
    st = os.stat(path)
    stamp = f"{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    memo = memo_dir / (hashlib.sha1(stamp.encode()).hexdigest() + ".digest") if memo_dir else None
    if memo is not None:
        try:
            recorded, _, digest = memo.read_text().rpartition("\n")
            if recorded == stamp:  # the record names the file and stat it is for: a record moved or swapped is not
                return digest
        except OSError:
            pass
    h = hashlib.sha1(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    if memo is not None and time.time() - max(st.st_mtime, st.st_ctime) > RACY_S:
        write_text_atomic(memo, f"{stamp}\n{digest}")
    return digest


@functools.lru_cache(maxsize=1)
def environment() -> str:
    """What every artifact depends on besides its model: Cuvil's own sources (passes, code generation, the
    kernel library's C), the C compiler binary, the host CPU and the settings in `ENV_VARS`."""
    compiler = toolchain.compiler_path()
    st = os.stat(compiler)
    parts = {"sources": sources_digest(), "compiler": [compiler, st.st_size, st.st_mtime_ns],
             "machine": platform.machine(), "cpu": sorted(toolchain.cpu_features()),
             "env": {k: os.environ.get(k, "") for k in ENV_VARS}}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def sources_digest() -> str:
    """The digest of the Python, C and header files of the installed `cuvil` package (`tree_digest`): any edit of
    Cuvil, not only a version bump, invalidates what it compiled before."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return tree_digest(root, toolchain.cache_dir() / "artifacts" / "stat")


def _source_files(folder: str, prefix: str):
    """(path relative to the tree's root, stat) of each .py, .c and .h file under `folder`, as os.walk finds them
    (links to folders not followed): scandir's entries spare os.walk's joins and relpaths, half a warm key's time."""
    try:
        entries = os.scandir(folder)
    except OSError:  # as os.walk: a folder that cannot be listed holds no file
        return
    with entries:
        for e in entries:
            if e.is_dir():
                if not e.is_symlink():
                    yield from _source_files(e.path, prefix + e.name + os.sep)
            elif e.name.endswith((".py", ".c", ".h")):
                yield prefix + e.name, e.stat()


def tree_digest(root: str, memo_dir: Path | None = None) -> str:
    """SHA-1 over the .py, .c and .h files under `root`, remembered in `memo_dir` by their paths and stats as
    `file_digest` remembers one file's: a warm start stats them (about 1 ms) instead of reading them (13 ms); a
    tree with a file changed within the last second is always read."""
    found = sorted(_source_files(root, ""))
    files, stats = [rel for rel, _ in found], [st for _, st in found]
    stamp = hashlib.sha256("".join(f"{rel}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0"
                                   f"{st.st_ctime_ns}\n" for rel, st in zip(files, stats)).encode()).hexdigest()
    memo = memo_dir / (hashlib.sha1(f"{root}\0{stamp}".encode()).hexdigest() + ".tree") if memo_dir else None
    if memo is not None:
        try:
            recorded, _, digest = memo.read_text().rpartition("\n")
            if recorded == f"{root}\0{stamp}":
                return digest
        except OSError:
            pass
    h = hashlib.sha1(usedforsecurity=False)
    for rel in files:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    digest = h.hexdigest()
    newest = max((max(st.st_mtime, st.st_ctime) for st in stats), default=0)
    if memo is not None and time.time() - newest > RACY_S:
        write_text_atomic(memo, f"{root}\0{stamp}\n{digest}")
    return digest
