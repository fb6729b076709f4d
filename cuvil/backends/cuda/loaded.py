"""A cuda `.cuv` behind `cuvil.runtime.Runtime(device="cuda", stream_priority=p)`: the artifact and function
objects the Runtime's `LoadedExecutable` and `RuntimeFunction` expect, over the `CudaRun`s of artifact.py.

A call takes host arrays (NumPy, `cuvil.nd` NDArrays: copied in and out through pinned buffers, outputs from the
Runtime's pool) or device arrays (anything with `__dlpack__` or `__cuda_array_interface__`: torch CUDA tensors,
CuPy arrays; zero-copy, outputs are device arrays valid until the function's next call).
"""
from __future__ import annotations

import numpy as np

from ...errors import CuvilError, ShapeError, UnsupportedError
from ...runtime.function import Param
from ...runtime.nd import NDArray, as_numpy
from . import artifact


def on_device(x) -> bool:
    """Whether `x` is a device array (DLPack on a CUDA device, or `__cuda_array_interface__`)."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    device = getattr(x, "__dlpack_device__", None)
    return device is not None and not isinstance(x, (np.ndarray, NDArray)) and device()[0] in (2, 3, 13)


class CudaEntry:
    """One entry point of a cuda `.cuv`: the Function interface of cuvil.runtime (name, inputs, outputs, run)."""

    def __init__(self, name: str, run, meta: dict):
        self.name, self._run, self.metadata = name, run, meta
        self.inputs = [Param(p["name"], p["dtype"], tuple(p["shape"])) for p in meta["inputs"]]
        self.outputs = [Param(p["name"], p["dtype"], tuple(p["shape"])) for p in meta["outputs"]]

    def run(self, inputs: list, outputs=None, workspace=None) -> list:
        """Host arrays in; the results (written into `outputs` when given). `workspace`: unused, the device's arena
        is the function's own."""
        results = self._run([np.asarray(a) for a in inputs])
        if outputs is None:
            return results
        for k, (o, r) in enumerate(zip(outputs, results)):
            if o.shape != r.shape or o.dtype != r.dtype:
                raise ShapeError(f"{self.name}: output {k} is {r.dtype}{list(r.shape)}, the buffer given is "
                                 f"{o.dtype}{list(o.shape)}")
            np.copyto(o, r)
        return list(outputs)

    def call(self, runtime_function, inputs: list, bound=None):
        """A Runtime's call (RuntimeFunction._call): device inputs give device outputs; host inputs host outputs,
        from the Runtime's pool or the bound arrays."""
        if any(on_device(a) for a in inputs):
            if bound and any(b is not None for b in bound):
                raise UnsupportedError(f"{self.name}: bind_output takes host arrays; a call with device inputs "
                                       "returns its outputs on the device")
            results = self.run_device(list(inputs))
        else:
            arrays = [as_numpy(a) for a in inputs]
            outputs = runtime_function._outputs(arrays, bound or [None] * len(self.outputs))
            results = [NDArray(r) for r in self.run(arrays, outputs)]
        return results[0] if len(results) == 1 else tuple(results)

    def run_device(self, inputs: list) -> list:
        return self._run.run_device(inputs)

    def set_num_threads(self, n: int) -> None:
        """Nothing to set: a GPU's threads are its kernels' launch geometry."""

    @property
    def stream_priority(self) -> int:
        """The priority of the function's stream, once its device is open (clamped to the device's range)."""
        return self._run.function.stream_priority


class CudaArtifact:
    """A cuda `.cuv` opened for a Runtime: its entries, metadata and functions."""

    def __init__(self, path, stream_priority: int = 0):
        self.path = str(path)
        self.metadata, runs = artifact.read(path, stream_priority=stream_priority)
        self._functions = {name: CudaEntry(name, run, self.metadata["entries"][name]) for name, run in runs.items()}
        self.closed = False

    @property
    def entries(self) -> list:
        return list(self._functions)

    def function(self, name: str = "main") -> CudaEntry:
        if self.closed:
            raise CuvilError(f"{self.path} is closed")
        if name not in self._functions:
            raise KeyError(f"{self.path} has no entry {name!r} (entries: {', '.join(self._functions)})")
        return self._functions[name]

    def close(self) -> None:
        self.closed = True
