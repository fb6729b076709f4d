"""Ray batches to a `.cuv` entry's inputs and back, with NumPy alone (no Ray here, so it is tested without a
cluster): columns by input name, dtypes cast where NumPy calls the cast safe or same-kind, ragged or short rows
padded to the model's fixed sizes (symbolic sizes to the batch's longest row, rounded up to a bucket), and
batches split into the model's fixed batch size, the last one padded."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import ShapeError
from ..runtime.nd import numpy_dtype


class BatchPlan:
    """How one entry's signature turns a batch (a dict of columns) into calls and their outputs into columns."""

    def __init__(self, inputs: list, outputs: list, pad_value=0, bucket: int = 8):
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.dtypes = [numpy_dtype(p.dtype) for p in self.inputs]
        self.pad_values = pad_value if isinstance(pad_value, dict) else {p.name: pad_value for p in self.inputs}
        self.bucket = max(int(bucket), 1)
        leading = {p.shape[0] if p.shape else None for p in self.inputs}
        # a fixed batch size: every input's first axis is the same int (a model exported for batch 8)
        self.fixed_batch: Optional[int] = leading.pop() if len(leading) == 1 and isinstance(
            next(iter(leading)), int) else None

    def arrays(self, batch) -> list:
        """The entry's inputs from the batch's columns, in signature order (zero-copy where they already fit)."""
        missing = [p.name for p in self.inputs if p.name not in batch]
        if missing:
            raise ShapeError(f"the batch has no column(s) {', '.join(map(repr, missing))} for the model's inputs "
                             f"(columns: {', '.join(map(repr, batch))}; inputs: "
                             f"{', '.join(p.name for p in self.inputs)})")
        return [self._fit(p, dt, batch[p.name]) for p, dt in zip(self.inputs, self.dtypes)]

    def calls(self, arrays: list):
        """(inputs of one call, real rows in it) per call: the whole batch, or fixed-size slices, the last padded."""
        rows = _rows(arrays, self.inputs)
        if rows == 0:
            return
        if self.fixed_batch is None:
            yield arrays, rows
            return
        b = self.fixed_batch
        for start in range(0, rows, b):
            part = [a[start:start + b] for a in arrays]
            n = part[0].shape[0]
            yield ([_pad_rows(a, b, self.pad_values.get(p.name, 0)) for a, p in zip(part, self.inputs)]
                   if n < b else part), n

    def columns(self, results: list) -> dict:
        """Output columns by name from each call's (outputs, real rows)."""
        if not results:  # an empty batch: empty columns of the outputs' fixed sizes
            return {p.name: np.empty((0, *(d if isinstance(d, int) else 0 for d in p.shape[1:])),
                                     numpy_dtype(p.dtype)) for p in self.outputs}
        cols = {}
        for j, p in enumerate(self.outputs):
            parts = [outs[j][:n] if outs[j].shape[:1] != (n,) else outs[j] for outs, n in results]
            cols[p.name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return cols

    def _fit(self, p, dtype: np.dtype, column) -> np.ndarray:
        if _fits(column, p, dtype):  # the usual case, checked in a few microseconds: passed on as it is
            return column
        a = _dense(column, p, self.pad_values.get(p.name, 0), self.bucket)
        if a.dtype != dtype:
            if not np.can_cast(a.dtype, dtype, "same_kind"):
                raise ShapeError(f"column {p.name!r} is {a.dtype}; the model's input is {p.dtype} (a {a.dtype} -> "
                                 f"{dtype} cast could change values: cast the column first)")
            a = a.astype(dtype)
        if a.ndim != len(p.shape):
            raise ShapeError(f"column {p.name!r} has rows of shape {a.shape[1:]}; the model's input is "
                             f"{p.dtype}[{', '.join(map(str, p.shape))}]")
        return _pad_axes(np.ascontiguousarray(a), p, self.pad_values.get(p.name, 0))


def _fits(column, p, dtype: np.dtype) -> bool:
    """Whether `column` is already a C-contiguous array of the input's dtype, rank and fixed sizes."""
    return (isinstance(column, np.ndarray) and column.dtype == dtype and column.ndim == len(p.shape)
            and column.flags.c_contiguous
            and all(not isinstance(d, int) or d == n for d, n in zip(p.shape[1:], column.shape[1:])))


def _dense(column, p, pad_value, bucket: int) -> np.ndarray:
    """A column as one array: ragged rows (an object array or list of arrays, as Ray gives variable-shaped
    tensors) padded to the model's fixed sizes, symbolic ones to the longest row rounded up to `bucket`."""
    if isinstance(column, np.ndarray) and column.dtype != object:
        return column
    rows = [np.asarray(r) for r in column]
    if not rows:
        raise ShapeError(f"column {p.name!r} is empty")
    rank = rows[0].ndim
    if any(r.ndim != rank for r in rows) or rank + 1 != len(p.shape):
        raise ShapeError(f"column {p.name!r} has rows of ranks {sorted({r.ndim for r in rows})}; the model's input "
                         f"is {p.dtype}[{', '.join(map(str, p.shape))}] (rows of rank {len(p.shape) - 1})")
    longest = [max(r.shape[ax] for r in rows) for ax in range(rank)]
    target = [d if isinstance(d, int) else -(-n // bucket) * bucket for d, n in zip(p.shape[1:], longest)]
    out = np.full((len(rows), *target), pad_value, np.result_type(*rows))
    for i, r in enumerate(rows):
        _check_fits(p, r.shape, target)
        out[(i, *(slice(0, n) for n in r.shape))] = r
    return out


def _pad_axes(a: np.ndarray, p, pad_value) -> np.ndarray:
    """Rows shorter than the model's fixed sizes padded at the end (the same array when they fit)."""
    target = [d if isinstance(d, int) else n for d, n in zip(p.shape[1:], a.shape[1:])]
    _check_fits(p, a.shape[1:], target)
    if list(a.shape[1:]) == target:
        return a
    return np.pad(a, [(0, 0)] + [(0, t - n) for t, n in zip(target, a.shape[1:])], constant_values=pad_value)


def _check_fits(p, shape, target) -> None:
    for ax, (n, t) in enumerate(zip(shape, target)):
        if n > t:
            raise ShapeError(f"column {p.name!r}: a row has size {n} in axis {ax + 1}, more than the model's "
                             f"fixed size {t} ({p.dtype}[{', '.join(map(str, p.shape))}])")


def _pad_rows(a: np.ndarray, rows: int, pad_value) -> np.ndarray:
    return np.pad(a, [(0, rows - a.shape[0])] + [(0, 0)] * (a.ndim - 1), constant_values=pad_value)


def _rows(arrays: list, inputs: list) -> int:
    counts = {a.shape[0] for a in arrays}
    if len(counts) != 1:
        raise ShapeError(f"the batch's columns {', '.join(p.name for p in inputs)} have different row counts "
                         f"{sorted(counts)}")
    return counts.pop()
