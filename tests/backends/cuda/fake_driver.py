"""A recording fake of the CUDA driver API (and of cuBLASLt) that checks what the runtime asks of it.

Device memory is host memory here, so copies really move bytes and a test can read what a copy wrote; kernels do
not run (a test may register `effects[name]`, a function of the launch's parameters, to stand in for one). Checked:
- modules are PTX whose `.entry` signatures give each kernel's parameter sizes and `.maxntid`; a launch names a
  loaded kernel, passes exactly its parameters with their sizes, a block within its bounds and a non-empty grid;
- every device pointer a launch, copy, memset or GEMM touches lies, with its extent, inside a live allocation;
- streams exist; nothing synchronises or allocates while a stream is being captured; a captured stream's work goes
  into the graph (not run), and cuGraphLaunch runs the graph's nodes in order.
"""
from __future__ import annotations

import ctypes
import re

import numpy as np

from cuvil.backends.cuda.driver import CudaDriverError

PTX_SIZES = {"u64": 8, "b64": 8, "s64": 8, "f64": 8, "u32": 4, "b32": 4, "s32": 4, "f32": 4, "u16": 2, "b16": 2,
             "s16": 2, "u8": 1, "b8": 1, "s8": 1}


def ptx_entries(ptx: str) -> dict:
    """name -> (parameter sizes, max threads a block) of every kernel in `ptx`."""
    out = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\(([^)]*)\)([^{]*)\{", ptx):
        sizes = [PTX_SIZES[t] for t in re.findall(r"\.param\s+\.(\w+)", m.group(2))]
        ntid = re.search(r"\.maxntid\s+(\d+)", m.group(3))
        out[m.group(1)] = (sizes, int(ntid.group(1)) if ntid else 1024)
    return out


class FakeDriver:
    """The driver API of one fake device of compute capability `cc` (7.5: no cubin matches, so PTX loads)."""

    def __init__(self, cc=(7, 5), priority_range=(0, -5)):
        self.cc, self.priority_range = cc, priority_range
        self.calls: list = []  # (name, details) of every call, in order
        self.launches: list = []  # kernel launches run (by a graph replay or outside capture)
        self.allocs: dict = {}  # device pointer -> (buffer, size)
        self.host: dict = {}  # pinned host pointer -> (buffer, size)
        self.kernels: dict = {}  # function handle -> (name, parameter sizes, max threads)
        self.streams: dict = {}  # stream -> priority
        self.capturing: dict = {}  # stream -> nodes recorded so far
        self.graphs: dict = {}
        self.execs: dict = {}
        self.effects: dict = {}
        self.library = None  # the emulator's host build of the kernels (emulator.py): launches then compute
        self.prefix = ""  # the library's name for kernel k is prefix + k
        self._handles = 0x1000
        self.initialised = False

    def _handle(self) -> int:
        self._handles += 16
        return self._handles

    def _record(self, name: str, **details) -> None:
        self.calls.append((name, details))

    def _fail(self, message: str):
        raise CudaDriverError(f"fake driver: {message}")

    def _check_device(self, ptr: int, nbytes: int, what: str) -> None:
        for base, (_, size) in self.allocs.items():
            if base <= ptr and ptr + nbytes <= base + size:
                return
        self._fail(f"{what}: [{ptr:#x}, +{nbytes}) is not inside a device allocation")

    def _check_host(self, ptr: int, nbytes: int, what: str) -> None:
        for base, (_, size) in self.host.items():
            if base <= ptr and ptr + nbytes <= base + size:
                return
        self._fail(f"{what}: host [{ptr:#x}, +{nbytes}) is not pinned memory")

    def _on_stream(self, stream: int, node) -> None:
        if stream not in self.streams:
            self._fail(f"unknown stream {stream:#x}")
        if stream in self.capturing:
            self.capturing[stream].append(node)
        else:
            node()

    def _no_capture(self, name: str) -> None:
        if self.capturing:
            self._fail(f"{name} while a stream is being captured")

    # -- device and context ----------------------------------------------------------------------------------
    def cuInit(self, flags: int = 0) -> None:
        self._record("cuInit", flags=flags)
        self.initialised = True

    def cuDeviceGet(self, ordinal: int) -> int:
        if not self.initialised or ordinal != 0:
            self._fail(f"cuDeviceGet({ordinal}) before cuInit or of a missing device")
        return 0

    def cuDeviceGetAttribute(self, attribute: int, device: int) -> int:
        return {75: self.cc[0], 76: self.cc[1]}[attribute]

    def cuDevicePrimaryCtxRetain(self, device: int) -> int:
        return 0xC7C

    def cuCtxSetCurrent(self, ctx: int) -> None:
        self._record("cuCtxSetCurrent", ctx=ctx)

    def cuCtxGetStreamPriorityRange(self) -> tuple:
        return self.priority_range

    # -- modules ---------------------------------------------------------------------------------------------
    def cuModuleLoadData(self, image: bytes) -> int:
        if image[:4] == b"\x7fELF":
            self._fail("a cubin loaded on a device it was not built for")
        self.module = ptx_entries(image.decode())
        self._record("cuModuleLoadData", entries=sorted(self.module))
        return self._handle()

    def cuModuleGetFunction(self, module: int, name: str) -> int:
        if name not in self.module:
            self._fail(f"cuModuleGetFunction: no kernel {name!r} in the module")
        h = self._handle()
        self.kernels[h] = (name, *self.module[name])
        return h

    # -- memory ----------------------------------------------------------------------------------------------
    def cuMemAlloc(self, nbytes: int) -> int:
        self._no_capture("cuMemAlloc")
        buf = ctypes.create_string_buffer(max(nbytes, 1))
        ptr = ctypes.addressof(buf)
        self.allocs[ptr] = (buf, max(nbytes, 1))
        self._record("cuMemAlloc", nbytes=nbytes)
        return ptr

    def cuMemFree(self, ptr: int) -> None:
        self.allocs.pop(ptr)

    def cuMemHostAlloc(self, nbytes: int, flags: int = 1) -> int:
        self._no_capture("cuMemHostAlloc")
        buf = ctypes.create_string_buffer(max(nbytes, 1))
        self.host[ctypes.addressof(buf)] = (buf, max(nbytes, 1))
        self._record("cuMemHostAlloc", nbytes=nbytes)
        return ctypes.addressof(buf)

    def cuMemFreeHost(self, ptr: int) -> None:
        self.host.pop(ptr)

    def cuMemcpyHtoDAsync(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._check_device(dst, nbytes, "cuMemcpyHtoDAsync")
        self._record("cuMemcpyHtoDAsync", nbytes=nbytes, captured=stream in self.capturing)
        self._on_stream(stream, lambda: ctypes.memmove(dst, src, nbytes))

    def cuMemcpyDtoHAsync(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._check_device(src, nbytes, "cuMemcpyDtoHAsync")
        if stream in self.capturing:
            self._check_host(dst, nbytes, "cuMemcpyDtoHAsync in a graph")
        self._record("cuMemcpyDtoHAsync", nbytes=nbytes, captured=stream in self.capturing)
        self._on_stream(stream, lambda: ctypes.memmove(dst, src, nbytes))

    def cuMemcpyDtoDAsync(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._check_device(dst, nbytes, "cuMemcpyDtoDAsync destination")
        self._check_device(src, nbytes, "cuMemcpyDtoDAsync source")
        self._record("cuMemcpyDtoDAsync", nbytes=nbytes)
        self._on_stream(stream, lambda: ctypes.memmove(dst, src, nbytes))

    def cuMemsetD32Async(self, dst: int, value: int, count: int, stream: int) -> None:
        self._check_device(dst, 4 * count, "cuMemsetD32Async")
        self._record("cuMemsetD32Async", count=count)
        self._on_stream(stream, lambda: ctypes.memmove(dst, (ctypes.c_uint32 * count)(*[value] * count), 4 * count))

    # -- streams, launches, graphs ---------------------------------------------------------------------------
    def cuStreamCreateWithPriority(self, flags: int, priority: int) -> int:
        least, greatest = self.priority_range
        if not greatest <= priority <= least:
            self._fail(f"stream priority {priority} outside [{greatest}, {least}]")
        s = self._handle()
        self.streams[s] = priority
        self._record("cuStreamCreateWithPriority", flags=flags, priority=priority)
        return s

    def cuStreamSynchronize(self, stream: int) -> None:
        self._no_capture("cuStreamSynchronize")
        self._record("cuStreamSynchronize")

    def cuStreamDestroy(self, stream: int) -> None:
        self.streams.pop(stream)

    def cuLaunchKernel(self, func: int, grid: tuple, block: tuple, shared: int, stream: int, params: list) -> None:
        if func not in self.kernels:
            self._fail(f"cuLaunchKernel of an unknown function {func:#x}")
        name, sizes, max_threads = self.kernels[func]
        got = [ctypes.sizeof(t) for t, _ in params]
        if got != sizes:
            self._fail(f"{name}: parameters of sizes {got}, the kernel takes {sizes}")
        if min(grid) < 1 or min(block) < 1 or block[0] * block[1] * block[2] > max_threads:
            self._fail(f"{name}: grid {grid} block {block} (at most {max_threads} threads a block)")
        for t, v in params:
            if t is ctypes.c_uint64 and v:
                self._check_device(v, 1, f"{name}: pointer parameter")
        launch = {"kernel": name, "grid": grid, "block": block, "params": [v for _, v in params]}
        self._record("cuLaunchKernel", **launch, captured=stream in self.capturing)

        def run():
            self.launches.append(launch)
            if name in self.effects:
                self.effects[name](*launch["params"])
            if self.library is not None:
                getattr(self.library, self.prefix + name)(*[t(v) for t, v in params])

        self._on_stream(stream, run)

    def cuStreamBeginCapture(self, stream: int, mode: int = 1) -> None:
        if stream in self.capturing:
            self._fail("cuStreamBeginCapture on a stream already capturing")
        self.capturing[stream] = []
        self._record("cuStreamBeginCapture")

    def cuStreamEndCapture(self, stream: int) -> int:
        g = self._handle()
        self.graphs[g] = self.capturing.pop(stream)
        self._record("cuStreamEndCapture", nodes=len(self.graphs[g]))
        return g

    def cuGraphInstantiate(self, graph: int) -> int:
        e = self._handle()
        self.execs[e] = self.graphs[graph]
        self._record("cuGraphInstantiate")
        return e

    def cuGraphLaunch(self, exec_graph: int, stream: int) -> None:
        if exec_graph not in self.execs:
            self._fail("cuGraphLaunch of a graph never instantiated")
        self._record("cuGraphLaunch")
        for node in self.execs[exec_graph]:
            self._on_stream(stream, node)

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


class FakeBlas:
    """cuBLASLt's matmul against the fake driver: checks each matrix's extent lies in device memory, records the
    layouts, and runs on the stream (into the graph while capturing)."""

    def __init__(self, driver: FakeDriver, compute: bool = False):
        self.driver, self.compute = driver, compute  # compute: the GEMM in NumPy on the fake's memory (f32)
        self.calls: list = []

    def matmul(self, step, g, a, b, c, bias, workspace, stream) -> None:
        from cuvil.backends.cuda.cublaslt import ITEMSIZE, WORKSPACE_BYTES

        item = ITEMSIZE[step.dtype]
        for ptr, lay, what in ((b, g.a, "A' (B's buffer)"), (a, g.b, "B' (A's buffer)"), (c, g.d, "D")):
            extent = ((g.batch - 1) * lay.stride + lay.ld * (lay.cols - 1) + lay.rows) * item
            self.driver._check_device(ptr, extent, f"cublasLtMatmul {what}")
        if bias:
            self.driver._check_device(bias, g.d.rows * item, "cublasLtMatmul bias")
        self.driver._check_device(workspace, WORKSPACE_BYTES, "cublasLtMatmul workspace")
        self.calls.append((step, g))
        self.driver._on_stream(stream, (lambda: _numpy_gemm(step, g, a, b, c, bias)) if self.compute else lambda: None)


def _matrices(ptr: int, batch: int, stride: int, rows: int, cols: int) -> np.ndarray:
    count = (batch - 1) * stride + rows * cols
    flat = np.frombuffer((ctypes.c_float * count).from_address(ptr), np.float32)
    return np.lib.stride_tricks.as_strided(flat, (batch, rows, cols), (stride * 4, cols * 4, 4))


def _numpy_gemm(step, g, a: int, b: int, c: int, bias: int) -> None:
    """Row-major C = act(op(A) @ op(B) + bias), as cuBLASLt's column-major problem `g` defines it (f32)."""
    if step.dtype != "f32":
        raise CudaDriverError("fake cuBLASLt computes f32 GEMMs only")
    m, n = g.d.cols, g.d.rows
    k = g.a.rows if g.trans_a else g.a.cols
    am = _matrices(a, g.batch, g.b.stride, *((k, m) if step.ta else (m, k)))
    bm = _matrices(b, g.batch, g.a.stride, *((n, k) if step.tb else (k, n)))
    out = np.matmul(am.transpose(0, 2, 1) if step.ta else am, bm.transpose(0, 2, 1) if step.tb else bm,
                    dtype=np.float64)
    if bias:
        out += np.frombuffer((ctypes.c_float * n).from_address(bias), np.float32)
    if step.epilogue == "relu":
        out = np.maximum(out, 0)
    elif step.epilogue == "gelu":
        out = 0.5 * out * (1 + np.tanh(np.sqrt(2 / np.pi) * (out + 0.044715 * out ** 3)))
    _matrices(c, g.batch, m * n, m, n)[...] = out.astype(np.float32)
