"""Digests of byte arrays at memory speed (digest.c, a C library built once per machine like the kernel library):
what the torch route's cache key reads a module's weights with, on every core.

    >>> import numpy as np
    >>> a = np.arange(100, dtype=np.uint8)
    >>> ranges_digests([a])[0] == ranges_digests([a.copy()])[0] != ranges_digests([a[::-1].copy()])[0]
    True
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from ..backends.cpu import toolchain
from ..runtime import container

SOURCE = Path(__file__).with_name("digest.c")
ONE_THREAD_BYTES = 16 << 20  # about 2 ms on one core: helper threads would save at most 1 ms, and on a busy machine
# the key waits for each of them to be scheduled


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    lib = toolchain.load_library(SOURCE.read_text(), name="digest", opt_level=2)
    fn = lib.cuvil_digest_ranges
    fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    fn.restype = None
    return lib


def ranges_digests(arrays: list) -> list:
    """The 16-byte digest of each C-contiguous uint8 array, the arrays shared among the process's CPUs."""
    arrays = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
    n = len(arrays)
    ptrs = np.array([a.ctypes.data for a in arrays], dtype=np.uintp)
    lens = np.array([a.size for a in arrays], dtype=np.int64)
    out = np.zeros((n, 2), dtype="<u8")
    if n:
        threads = 1 if int(lens.sum()) < ONE_THREAD_BYTES else min(container.cpu_count(), container.MAX_THREADS)
        _library().cuvil_digest_ranges(n, ptrs.ctypes.data, lens.ctypes.data, out.ctypes.data, threads)
    return [row.tobytes() for row in out]
