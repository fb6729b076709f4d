"""`cuvil.ray.Predictor`: a `.cuv` model as the callable class that Ray Data's `map_batches` runs on its actors,
and `cuvil.ray.put`, which places a model in Ray's object store for workers that cannot see its file."""
from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Mapping
from typing import Optional, Sequence

import numpy as np
import ray

from ..errors import ShapeError, UnsupportedError
from ..runtime import Runtime
from .batches import BatchPlan


class Predictor:
    """Runs entry `entry` of a `.cuv` over Ray Data batches: a dict of NumPy arrays keyed by the model's input
    names (or a pyarrow Table) in, a dict keyed by its output names out.

        ds.map_batches(cuvil.ray.Predictor, fn_constructor_kwargs={"model": "model.cuv"},
                       concurrency=2, batch_size=64)

    `model` is a path every worker can read (memory-mapped: the workers of a node share its pages), the file's
    bytes, or a `cuvil.ray.put` reference (one copy per node in the object store's shared memory). Each worker loads
    it once, in `__init__` (a file it cannot run fails the actor's creation), and builds the entry's calls on a
    thread until its first batch arrives. `num_threads` defaults to the CPUs Ray gave the worker (`num_cpus=` of
    `map_batches`, 1 by default), so `concurrency` workers never run more threads than Ray reserved for them. A
    model with a fixed batch size gets batches split into calls of that size (the last padded); ragged or short rows
    are padded with `pad_value` (a number, or one per input name) to the model's fixed sizes, and symbolic sizes to
    the batch's longest row rounded up to a multiple of `bucket`. `keep_columns` are passed through to the result
    (an id)."""

    def __init__(self, model, entry: str = "main", *, num_threads: Optional[int] = None,
                 keep_columns: Sequence[str] = (), pad_value=0, bucket: int = 8):
        self.num_threads = num_threads or worker_threads()
        self.runtime = Runtime(num_threads=self.num_threads)
        self.function = self.runtime.load_executable(_artifact_source(model)).get_function(entry)
        self.plan = BatchPlan(self.function.inputs, self.function.outputs, pad_value, bucket)
        clash = sorted(set(keep_columns) & {p.name for p in self.function.outputs})
        if clash:
            raise ShapeError(f"keep_columns {clash} would overwrite the model's outputs of the same name")
        self.keep_columns = tuple(keep_columns)
        self._preparing: Optional[_Prepare] = _Prepare(self.function.function)

    def __call__(self, batch) -> dict:
        if self._preparing is not None:  # the first batch: the call machinery built meanwhile (or its error)
            self._preparing, preparing = None, self._preparing
            preparing.join()
        columns = batch_columns(batch)
        results = [(self.function.run(inputs), rows) for inputs, rows in self.plan.calls(self.plan.arrays(columns))]
        out = self.plan.columns(results)
        missing = [name for name in self.keep_columns if name not in columns]
        if missing:
            raise ShapeError(f"keep_columns {missing} are not columns of the batch ({', '.join(map(str, columns))})")
        out.update({name: columns[name] for name in self.keep_columns})
        return out


class _Prepare(threading.Thread):
    """The entry's call machinery built in the background (the constants' check, the call module's import), from
    the end of `__init__` until the first batch: Ray starts sending batches only once every actor's `__init__`
    returned, and the time until the first one arrives would otherwise be idle."""

    def __init__(self, function):
        super().__init__(name="cuvil-ray-prepare", daemon=True)
        self.function, self.error = function, None
        self.start()

    def run(self) -> None:
        try:
            self.function.prepare()
        except BaseException as e:  # raised on the thread that waits for it (the first batch's), not lost here
            self.error = e

    def join(self, timeout=None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error


def put(model) -> "ray.ObjectRef":
    """A `.cuv` in the object store, as a uint8 array that each node's workers read in place from shared memory:
    a path, the file's bytes, or anything `cuvil.export` takes (exported here, on the driver)."""
    return ray.put(np.frombuffer(artifact_bytes(model), np.uint8))


def artifact_bytes(model) -> bytes:
    """The bytes of a `.cuv` given as a path, bytes, or anything `cuvil.export` takes."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            return f.read()
    from ..deploy import export

    with tempfile.TemporaryDirectory(prefix="cuvil-ray-") as folder:
        path = os.path.join(folder, "model.cuv")
        export(model, path)
        with open(path, "rb") as f:
            return f.read()


def worker_threads() -> int:
    """The CPUs Ray assigned this worker (a fraction counts as 1); outside a Ray worker, Cuvil's default."""
    try:
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU") if ray.is_initialized() else None
    except AssertionError:  # Ray's answer on the driver: it has no assigned resources
        cpus = None
    if cpus:
        return max(1, int(cpus))
    from ..backends.cpu.kernels import default_num_threads

    return default_num_threads()


def batch_columns(batch) -> Mapping:
    """A batch's columns as NumPy arrays: a dict as it is, a pyarrow Table column by column (no copy for
    single-chunk numeric and tensor columns)."""
    if isinstance(batch, Mapping):
        return batch
    if hasattr(batch, "column_names") and hasattr(batch, "column"):  # a pyarrow Table
        return {name: _arrow_to_numpy(batch.column(name)) for name in batch.column_names}
    raise UnsupportedError(f"cuvil.ray.Predictor takes batches as dicts of NumPy arrays or pyarrow Tables, got a "
                           f"{type(batch).__name__}: map_batches(..., batch_format='numpy')")


def _arrow_to_numpy(column) -> np.ndarray:
    array = column.chunk(0) if getattr(column, "num_chunks", 0) == 1 else (
        column.combine_chunks() if hasattr(column, "combine_chunks") else column)
    tensor = _tensor_view(array)
    if tensor is not None:
        return tensor
    if hasattr(array, "to_numpy_ndarray"):  # Ray's or Arrow's fixed-shape tensor arrays
        return array.to_numpy_ndarray()
    return array.to_numpy(zero_copy_only=False)


def _tensor_view(array) -> Optional[np.ndarray]:
    """A fixed-shape tensor array (Ray's: a list of numbers per row, its shape on the type) as a view of its values
    (a few microseconds; Ray's and Arrow's own conversions take hundreds); None where it is not one."""
    shape, storage = getattr(array.type, "shape", None), getattr(array, "storage", None)
    if (not isinstance(shape, tuple) or storage is None or array.null_count or not hasattr(storage, "offsets")
            or not hasattr(storage.values, "to_numpy") or storage.values.null_count):
        return None
    rows, size = len(storage), int(np.prod(shape, dtype=np.int64))
    start, stop = (storage.offsets[0].as_py(), storage.offsets[rows].as_py()) if rows else (0, 0)
    if stop - start != rows * size:  # not uniform rows after all
        return None
    try:
        return storage.values.slice(start, rows * size).to_numpy(zero_copy_only=True).reshape(rows, *shape)
    except ValueError:  # values NumPy cannot view (booleans are bits): the general path copies them
        return None


def _artifact_source(model):
    """What `cuvil.load` takes: a reference from `put` fetched (a read-only view of the object store)."""
    if isinstance(model, ray.ObjectRef):
        return ray.get(model)
    if isinstance(model, (str, os.PathLike, bytes, bytearray, memoryview, np.ndarray)):
        return model
    raise UnsupportedError(f"cuvil.ray.Predictor: model must be a .cuv path, its bytes or a cuvil.ray.put "
                           f"reference, got a {type(model).__name__} (compiled objects: cuvil.ray.put(obj))")
