"""Helpers the frontends share that import no framework (the cached ONNX path runs without `onnx`)."""
from __future__ import annotations

import numpy as np


def remember(cache: dict, key, make, limit: int = 16):
    """cache[key], made by `make(key)` on a miss; the oldest entry goes when `limit` are held (the models converted
    for the input sizes of calls that a symbolic dimension's relations refuse)."""
    if key not in cache:
        if len(cache) >= limit:
            cache.pop(next(iter(cache)))
        cache[key] = make(key)
    return cache[key]


def native_order(arr: np.ndarray, want: np.dtype) -> np.ndarray:
    """`arr` in native byte order when it holds `want`'s values in the other order (big-endian data)."""
    return arr.astype(want) if not arr.dtype.isnative and arr.dtype.newbyteorder("=") == want else arr
