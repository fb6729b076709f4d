"""`MemoryPool`: the buffers a `Runtime` hands its calls (outputs, and each call's workspace), reused across calls
and never more than a cap in total.

A block is reused once nothing but the pool refers to it: an output the caller still holds (or any view of it)
keeps its block busy, so a result is never overwritten under the caller. A request that does not fit under the cap
gets a buffer of its own, which the pool does not keep.

    >>> pool = MemoryPool(cap_bytes=1 << 20)
    >>> a = pool.take((256,), "float32"); p = a.ctypes.data; del a
    >>> pool.take((256,), "float32").ctypes.data == p   # the same memory again
    True
"""
from __future__ import annotations

import logging
import sys
import threading
from typing import Optional

import numpy as np

log = logging.getLogger("cuvil.runtime")
ALIGN = 64
# sys.getrefcount of a block nobody else holds, read inside `_free`: the pool's list, the loop variable, the argument.
# Every view NumPy makes of a block names the block itself as its `.base`, so each one the caller holds counts.
_IDLE_REFS = 3


class MemoryPool:
    """Byte blocks (64-byte aligned) handed out as arrays; `cap_bytes=None` keeps every block it makes."""

    def __init__(self, cap_bytes: Optional[int] = None):
        if cap_bytes is not None and cap_bytes < 0:
            raise ValueError(f"the memory pool's cap must be at least 0 bytes, got {cap_bytes}")
        self.cap_bytes = cap_bytes
        self._blocks: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.reused = self.made = self.unpooled = 0  # how requests were served (tests and `stats`)

    @property
    def held_bytes(self) -> int:
        """Bytes of the blocks the pool keeps (busy and idle); at most `cap_bytes`."""
        return sum(_capacity(b) for b in self._blocks)

    def take(self, shape, dtype) -> np.ndarray:
        """A C-contiguous array of this shape and dtype (uninitialised), from an idle block when one fits."""
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        block = self._block(max(nbytes, 1))
        return aligned_view(block, nbytes).view(dtype).reshape(shape)

    def scratch(self, nbytes: int) -> np.ndarray:
        """`nbytes` bytes of workspace for one call (64-byte aligned): busy while the call holds it."""
        return self.take((nbytes,), np.uint8)

    def _block(self, nbytes: int) -> np.ndarray:
        with self._lock:
            block = self._best_idle(nbytes)
            if block is not None:
                self.reused += 1
                return block
            self._make_room(nbytes)
            block = np.empty(nbytes + ALIGN, np.uint8)
            if self.cap_bytes is None or self.held_bytes + nbytes <= self.cap_bytes:
                self._blocks.append(block)
                self.made += 1
            else:
                log.debug("memory pool: %d bytes do not fit under the cap of %d; not kept", nbytes, self.cap_bytes)
                self.unpooled += 1
            return block

    def _best_idle(self, nbytes: int) -> Optional[np.ndarray]:
        """The smallest idle block of at least `nbytes` and at most twice that (no large block for a small ask)."""
        fits = [b for b in self._free() if nbytes <= _capacity(b) <= 2 * nbytes]
        return min(fits, key=_capacity) if fits else None

    def _free(self) -> list:
        return [b for b in self._blocks if sys.getrefcount(b) <= _IDLE_REFS]

    def _make_room(self, nbytes: int) -> None:
        """Drop idle blocks, largest first, until `nbytes` more fit under the cap (or none is left to drop)."""
        if self.cap_bytes is None:
            return
        for block in sorted(self._free(), key=_capacity, reverse=True):
            if self.held_bytes + nbytes <= self.cap_bytes:
                return
            self._blocks = [b for b in self._blocks if b is not block]

    def clear(self) -> None:
        """Forget every block (arrays the caller holds stay valid: they keep their own memory alive)."""
        with self._lock:
            self._blocks = []

    def stats(self) -> dict:
        return {"held_bytes": self.held_bytes, "cap_bytes": self.cap_bytes, "blocks": len(self._blocks),
                "reused": self.reused, "made": self.made, "unpooled": self.unpooled}


def _capacity(block: np.ndarray) -> int:
    return block.nbytes - ALIGN


def aligned_view(raw: np.ndarray, nbytes: int) -> np.ndarray:
    """The first `nbytes` of `raw` (a uint8 array of at least `nbytes` + 64) that start on a 64-byte boundary
    (what the native code's vector loads like)."""
    offset = -raw.ctypes.data % ALIGN
    return raw[offset:offset + nbytes]
