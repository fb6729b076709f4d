"""Helpers the frontends share that import no framework (the cached ONNX path runs without `onnx`)."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError


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


def input_array(name: str, x, want: np.dtype) -> np.ndarray:
    """A call's input as a NumPy array of `want` (in native byte order); anything NumPy cannot read as one
    (a torch tensor that requires grad, a ragged list) is a ShapeError naming the input."""
    if isinstance(x, np.ndarray):
        return native_order(x, want)
    try:
        return native_order(np.asarray(x, want), want)
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise ShapeError(f"input {name!r} cannot be read as a NumPy array of {want}: {type(x).__name__}: "
                         f"{' '.join(str(e).split())}") from None
