"""Exactly sized scratch for AddressSanitizer runs: every call of a compiled function gets a fresh arena of the
size its plan asks for (posix_memalign, so ASan's redzone starts at its last byte), instead of the per-thread
arena that grows and is reused, inside which an undersized call after a larger one would go unnoticed."""
from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None)
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]


def install() -> None:
    """Patch the ctypes call path's arena (the C call path keeps its own: run with CUVIL_FASTCALL=0).
    CUVIL_FUZZ_ARENA_SHORTFALL=n allocates n bytes less than asked: the test that ASan then catches it."""
    from cuvil.backends.cpu.executable import CpuFunction

    shortfall = int(os.environ.get("CUVIL_FUZZ_ARENA_SHORTFALL", "0"))

    def exact_arena(self, state, dims: tuple) -> int:
        state.dims[:len(dims)] = dims
        size = max(int(self._arena_bytes(state.dims)) - shortfall, 1)
        if getattr(state, "exact", None):
            _libc.free(state.exact)
        ptr = ctypes.c_void_p()
        if _libc.posix_memalign(ctypes.byref(ptr), 64, size) != 0:
            raise MemoryError(f"cannot allocate an arena of {size} bytes")
        state.exact = ptr.value
        return ptr.value

    CpuFunction._arena = exact_arena
