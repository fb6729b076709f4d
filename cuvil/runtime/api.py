"""`cuvil.runtime.Runtime`: the seed's and TVM's way to run a `.cuv` file, on top of `cuvil.load`.

    rt = cuvil.runtime.Runtime(device="cpu", memory_pool_size_mb=64, num_threads=4, enable_async=False)
    exe = rt.load_executable("model.cuv")
    fn = exe.get_function("main")
    y = fn(cuvil.nd.array(x))                 # an NDArray (a tuple of them for several outputs)
    rt.bind_input("x", x); rt.bind_output("y", out); rt.run()   # in place: `out` holds the result, no copies

What a Runtime adds to `cuvil.load`: outputs and each call's workspace come from its memory pool (reused
across calls, at most `memory_pool_size_mb` held), its thread count applies to every function it loads, and with
`enable_async=True` calls return `concurrent.futures.Future`s (run in submission order on one worker thread).
Calls of one function from several threads at once are safe; `bind_input` / `bind_output` / `run` keep state on
the Runtime and are for one thread at a time.

`Runtime(device="cuda", stream_priority=p)` runs a `.cuv` exported with target="cuda" (backends/cuda/loaded.py): host
arrays in give host outputs (from the pool), device arrays (`__dlpack__`, `__cuda_array_interface__`) give device
outputs; each function's stream has priority `p` (lower is higher, clamped to the device's range).
"""
from __future__ import annotations

import threading
from typing import Optional

from ..errors import CuvilError, ShapeError, UnsupportedError
from ..ir.symbolic import parse_dim
from .nd import DEVICES, NDArray, as_numpy, numpy_dtype
from .pool import MemoryPool


class Runtime:
    """Loads `.cuv` files and runs their functions with one memory pool, thread count and (optional) worker."""

    def __init__(self, device: str = "cpu", memory_pool_size_mb: Optional[float] = None,
                 num_threads: Optional[int] = None, enable_async: bool = False, stream_priority: int = 0):
        if device not in (*DEVICES, "cuda"):
            raise UnsupportedError(f"Runtime: device {device!r} is not supported yet "
                                   f"(supported: {', '.join(DEVICES)}, cuda)")
        if stream_priority and device != "cuda":
            raise ValueError(f"Runtime: stream_priority is for device='cuda' (a CUDA stream's), not {device!r}")
        self.device, self.stream_priority = device, stream_priority
        cap = None if memory_pool_size_mb is None else int(memory_pool_size_mb * (1 << 20))
        self.pool = MemoryPool(cap)
        self.num_threads = _check_threads(num_threads)
        self.enable_async = enable_async
        self._worker = _worker() if enable_async else None
        self._executables: list[LoadedExecutable] = []
        self._bound_inputs: dict = {}
        self._bound_outputs: dict = {}
        self._last_outputs: tuple = ()

    # -- loading -------------------------------------------------------------------------------------------------
    def load_executable(self, path) -> "LoadedExecutable":
        """Open a `.cuv` file (checked in full before any of its code runs; see docs/artifact.md)."""
        if self.device == "cuda":  # kernels for the GPU (backends/cuda/loaded.py), the stream at this priority
            from ..backends.cuda.loaded import CudaArtifact

            exe = LoadedExecutable(self, CudaArtifact(path, self.stream_priority))
        else:
            from .artifact import load

            exe = LoadedExecutable(self, load(path))
        self._executables.append(exe)
        self._bound_inputs, self._bound_outputs, self._last_outputs = {}, {}, ()  # bindings were for the last one
        return exe

    def set_num_threads(self, n: int) -> None:
        """The threads each call of this runtime's functions may use, from now on."""
        self.num_threads = _check_threads(n)
        for exe in self._executables:
            exe._apply_threads()

    # -- bind, run, get_output (TVM's graph executor) ------------------------------------------------------------
    def bind_input(self, name: str, array) -> None:
        """Use `array` (an NDArray or a NumPy array, read in place) as input `name` of the next `run()`."""
        fn = self._main()
        _index(fn.inputs, name, "input", fn.name)
        self._bound_inputs[name] = array

    def bind_output(self, name: str, array) -> None:
        """Write output `name` of the next `run()`s into `array` (an NDArray or a C-contiguous NumPy array)."""
        fn = self._main()
        _index(fn.outputs, name, "output", fn.name)
        self._bound_outputs[name] = array

    def run(self, entry: str = "main"):
        """Run `entry` of the last loaded executable on the bound inputs; outputs go into the bound outputs (the
        rest into pool buffers). Returns what a call returns (a Future with `enable_async`); `get_output` too."""
        fn = self._main(entry)
        missing = [p.name for p in fn.inputs if p.name not in self._bound_inputs]
        if missing:
            raise ShapeError(f"run: bind the input(s) {', '.join(missing)} of {fn.name!r} first (rt.bind_input)")
        arrays = [self._bound_inputs[p.name] for p in fn.inputs]
        outputs = [self._bound_outputs.get(p.name) for p in fn.outputs]
        if self._worker is None:
            return self._remember(fn._call(arrays, outputs))
        return self._worker.submit(lambda: self._remember(fn._call(arrays, outputs)))

    def _remember(self, result):
        self._last_outputs = result if isinstance(result, tuple) else (result,)
        return result

    def get_output(self, index=0) -> NDArray:
        """Output `index` (a position or a name) of the last `run()`."""
        if not self._last_outputs:
            raise CuvilError("get_output: nothing has run yet (rt.run() first)")
        if isinstance(index, str):
            index = _index(self._main().outputs, index, "output", "main")
        return self._last_outputs[index]

    def _main(self, entry: str = "main") -> "RuntimeFunction":
        if not self._executables:
            raise CuvilError("no executable loaded: call rt.load_executable(path) first")
        return self._executables[-1].get_function(entry)

    # -- lifetime ------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for queued calls, then close every executable this runtime loaded."""
        if self._worker is not None:
            self._worker.shutdown(wait=True)
        for exe in self._executables:
            exe.close()
        self._executables.clear()
        self.pool.clear()

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        cap = "no cap" if self.pool.cap_bytes is None else f"cap {self.pool.cap_bytes >> 20} MiB"
        return (f"<cuvil.runtime.Runtime {self.device}, pool {cap}, threads {self.num_threads or 'default'}"
                f"{', async' if self.enable_async else ''}: {len(self._executables)} executable(s)>")


class LoadedExecutable:
    """A `.cuv` file opened by a Runtime: its entry points by name (`get_function`, `exe["main"]`)."""

    def __init__(self, runtime: Runtime, artifact):
        self.runtime, self.artifact = runtime, artifact
        self._functions: dict = {}
        self._lock = threading.Lock()

    entries = property(lambda self: list(self.artifact.entries))
    metadata = property(lambda self: self.artifact.metadata)

    def get_function(self, name: str = "main") -> "RuntimeFunction":
        with self._lock:
            fn = self._functions.get(name)
            if fn is None:
                fn = self._functions[name] = RuntimeFunction(self.runtime, self.artifact.function(name))
                fn._apply_threads()
        return fn

    __getitem__ = get_function

    def __call__(self, *arrays, **named):
        return self.get_function("main")(*arrays, **named)

    def _apply_threads(self) -> None:
        for fn in self._functions.values():
            fn._apply_threads()

    def close(self) -> None:
        self.artifact.close()

    def __repr__(self) -> str:
        return f"<cuvil.runtime.LoadedExecutable entries {', '.join(self.entries)}>"


class RuntimeFunction:
    """An entry point run through a Runtime: NDArrays (or NumPy arrays) in, NDArrays out, outputs from its pool."""

    def __init__(self, runtime: Runtime, function):
        self.runtime, self.function = runtime, function
        self.name, self.inputs, self.outputs = function.name, list(function.inputs), list(function.outputs)
        self._num_threads: Optional[int] = None  # set on this function; else the runtime's
        self._sites = _symbol_sites(self.inputs)
        self._out_dims = [[parse_dim(d) if isinstance(d, str) else d for d in p.shape] for p in self.outputs]

    def __call__(self, *arrays, **named):
        """One output as an NDArray, several as a tuple; a Future of that with `enable_async`."""
        inputs = self._arrange(arrays, named)
        if self.runtime._worker is None:
            return self._call(inputs)
        return self.runtime._worker.submit(self._call, inputs)

    def run(self, inputs: list, outputs: Optional[list] = None) -> list:
        """`cuvil.load`'s zero-copy call: NumPy arrays (or NDArrays) in, results written into `outputs` (with the
        workspace from the pool)."""
        if outputs is None:
            return self.function.run([as_numpy(a) for a in inputs])
        return self.function.run([as_numpy(a) for a in inputs], [as_numpy(o) for o in outputs],
                                 workspace=self.runtime.pool.scratch)

    def set_num_threads(self, n: int) -> None:
        """The threads each call of this function may use (instead of the runtime's)."""
        self._num_threads = _check_threads(n)
        self._apply_threads()

    def _apply_threads(self) -> None:
        n = self._num_threads or self.runtime.num_threads
        if n:
            self.function.set_num_threads(n)

    def _call(self, inputs: list, bound: Optional[list] = None):
        if hasattr(self.function, "call"):  # a device's function (backends/cuda/loaded.py): device arrays too
            return self.function.call(self, inputs, bound)
        arrays = [as_numpy(a) for a in inputs]
        outputs = self._outputs(arrays, bound or [None] * len(self.outputs))
        workspace = None if outputs is None else self.runtime.pool.scratch
        results = [NDArray(r) for r in self.function.run(arrays, outputs, workspace=workspace)]
        return results[0] if len(results) == 1 else tuple(results)

    def _outputs(self, arrays: list, bound: list) -> Optional[list]:
        """The bound outputs, the others from the pool; None (the function allocates) when the inputs' sizes do
        not give every output's (the call then reports what is wrong with them)."""
        try:
            env = {s: arrays[i].shape[ax] for s, (i, ax) in self._sites.items()}
            return [as_numpy(b) if b is not None else
                    self.runtime.pool.take([d if isinstance(d, int) else d.evaluate(env) for d in dims],
                                           numpy_dtype(p.dtype))
                    for b, dims, p in zip(bound, self._out_dims, self.outputs)]
        except (IndexError, KeyError, AttributeError):
            if any(b is not None for b in bound):
                raise ShapeError(f"{self.name}: the inputs' shapes do not match the signature "
                                 f"{describe(self)}") from None
            return None

    def _arrange(self, arrays: tuple, named: dict) -> list:
        names = [p.name for p in self.inputs]
        unknown = sorted(set(named) - set(names[len(arrays):]))
        if len(arrays) > len(names) or unknown:
            raise ShapeError(f"{self.name} takes {describe(self)}; got {len(arrays)} positional input(s)"
                             + (f" and {', '.join(unknown)} by name" if unknown else ""))
        missing = [n for n in names[len(arrays):] if n not in named]
        if missing:
            raise ShapeError(f"{self.name}: missing input(s) {', '.join(missing)} (signature {describe(self)})")
        return list(arrays) + [named[n] for n in names[len(arrays):]]

    def __repr__(self) -> str:
        return f"<cuvil.runtime.RuntimeFunction {describe(self)}>"


def describe(fn) -> str:
    """`main(x: f32[batch,784]) -> (y: f32[batch,10])`: a signature as the CLI and error messages print it."""
    def params(ps):
        return ", ".join(f"{p.name}: {p.dtype}[{','.join(map(str, p.shape))}]" for p in ps)
    return f"{fn.name}({params(fn.inputs)}) -> ({params(fn.outputs)})"


def _symbol_sites(inputs: list) -> dict:
    """Each symbolic size that is a whole dimension of some input -> (input index, axis) where a call reads it."""
    sites: dict = {}
    for i, p in enumerate(inputs):
        for ax, d in enumerate(p.shape):
            if isinstance(d, str) and d.isidentifier():
                sites.setdefault(d, (i, ax))
    return sites


def _index(params: list, name: str, what: str, fn_name: str) -> int:
    for i, p in enumerate(params):
        if p.name == name:
            return i
    raise ShapeError(f"{fn_name!r} has no {what} named {name!r} (its {what}s: {', '.join(p.name for p in params)})")


def _worker():
    """The thread `enable_async` calls run on (concurrent.futures imported only then)."""
    import concurrent.futures

    return concurrent.futures.ThreadPoolExecutor(1, "cuvil-runtime")


def _check_threads(n: Optional[int]) -> Optional[int]:
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"num_threads must be a positive int, got {n!r}")
    return n
