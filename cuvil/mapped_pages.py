"""Resident pages of weights mapped from a file (an ONNX model's initializers): once a compile has read a weight
(hashed it for the IR's fingerprint, packed it), its pages stayed in the resident set beside the packed copy
(BERT-base's ONNX compile peaked at 1.84x its weights). Dropping them from a read-only shared mapping loses nothing:
a later read faults them back from the page cache. A leaf module: the IR and the backends both use it."""
from __future__ import annotations

import ctypes
import functools
import mmap

import numpy as np

_MADV_DONTNEED = 4  # Linux, every architecture


def release(arr) -> None:
    """Drop from the resident set the whole pages of `arr` when it views a read-only mapping of a file (np.memmap
    mode "r"); anything else (private memory, a copy-on-write map, other systems) is left as it is."""
    if not _read_only_file_map(arr):
        return
    madvise = _madvise()
    start = arr.ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # inward: pages of a neighbouring mapping stay untouched
    last = (start + arr.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if madvise is not None and last > first:
        madvise(first, last - first, _MADV_DONTNEED)


@functools.cache
def _madvise():
    """libc's madvise, typed once (None where the C library lacks it)."""
    madvise = getattr(ctypes.CDLL(None, use_errno=True), "madvise", None)
    if madvise is not None:
        madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return madvise


def _read_only_file_map(arr) -> bool:
    """Whether `arr` (through its bases) lies in a memory map that cannot be written: np.memmap in mode "r"."""
    while isinstance(arr, np.ndarray):
        if isinstance(arr, np.memmap) and arr.base is not None and not isinstance(arr.base, np.ndarray):
            return arr.mode == "r"
        arr = arr.base
    return False
