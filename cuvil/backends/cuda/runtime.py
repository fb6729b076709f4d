"""Running a `CudaProgram` through the driver API: one device arena from the memory plan, constants uploaded once,
and the whole function captured once per input shape into a CUDA Graph, then replayed.

Per shape (`ShapeState`): the arena (every slot of the plan, then the error word, then the workspace cuBLASLt and
cuDNN share: the larger of what they ask), device buffers for the inputs and outputs, pinned host buffers for them,
and the instantiated graph: copies in, every kernel, GEMM and cuDNN convolution, copies out. A call copies NumPy
inputs into the pinned buffers, launches the graph on the runtime's stream (created with the priority asked for)
and waits; `run_device` takes and returns device arrays (DLPack or `__cuda_array_interface__`: torch CUDA tensors,
CuPy arrays) and copies device to device instead. The error word is cleared in the graph and read after it: a
gather's index outside its axis raises IndexRangeError naming the op, as on the CPU.
"""
from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field

import numpy as np

from ...errors import IndexRangeError, ShapeError
from ...ir.symbolic import SymExpr, evaluate
from . import cublaslt, cudnn, dlpack
from .program import Buf, Conv, Copy, CudaProgram, Gemm, Launch
from .driver import CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, \
    CU_STREAM_NON_BLOCKING

log = logging.getLogger("cuvil.backends.cuda")
ALIGN = 256  # cuBLASLt and vector loads want 256-byte aligned buffers
ERROR_BYTES = 256
PARAM_TYPES = {"null": ctypes.c_uint64, "sym": ctypes.c_int64, "dim": ctypes.c_int64, "f32": ctypes.c_float,
               "i32": ctypes.c_int32}  # and
# a Buf: a device pointer (c_uint64)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def pick_image(images: dict, major: int, minor: int) -> bytes:
    """The cubin built for the device's architecture, else the PTX (the driver compiles it for the device)."""
    return images.get(f"sm_{major}{minor}") or images["ptx"]


@dataclass
class ShapeState:
    """What one input shape needs on the device; `graph_exec` replays the whole function."""

    env: dict
    arena: int
    arena_bytes: int
    inputs: list
    outputs: list
    host_in: list
    host_out: list
    in_bytes: list
    out_bytes: list
    out_shapes: list
    graph_exec: int = 0
    graph: int = 0
    device_graph: int = 0  # the graph without host copies (run_device)
    replays: int = field(default=0)
    conv_plans: dict = field(default_factory=dict)  # step index -> cudnn.ConvPlan (absent: the direct kernel)


class CudaFunction:
    """A compiled function on one CUDA device: call it with NumPy arrays (or `run_device` with device arrays)."""

    def __init__(self, program: CudaProgram, images: dict, constants: dict, driver, blas=None,
                 stream_priority: int = 0, device: int = 0):
        self.program, self.driver, self.device = program, driver, device
        fn = program.function
        self.arg_types, self.out_types = [a.type for a in fn.args], list(fn.result_types)
        driver.cuInit(0)
        dev = driver.cuDeviceGet(device)
        driver.cuCtxSetCurrent(driver.cuDevicePrimaryCtxRetain(dev))
        cc = (driver.cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
              driver.cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
        self.module = driver.cuModuleLoadData(pick_image(images, *cc))
        self.functions = {name: driver.cuModuleGetFunction(self.module, name) for name in program.kernel_names}
        least, greatest = driver.cuCtxGetStreamPriorityRange()
        self.stream_priority = min(max(stream_priority, greatest), least)  # lower numbers are higher priorities
        self.stream = driver.cuStreamCreateWithPriority(CU_STREAM_NON_BLOCKING, self.stream_priority)
        self.constants = [self._upload(np.ascontiguousarray(constants[name])) for name in program.constants]
        self._blas_factory = blas
        self._blas = None
        self.dnn = cudnn.load() if any(isinstance(s, Conv) for s in program.steps) else None
        self.states: dict = {}

    def _upload(self, array: np.ndarray) -> int:
        ptr = self.driver.cuMemAlloc(array.nbytes)
        self.driver.cuMemcpyHtoDAsync(ptr, array.ctypes.data, array.nbytes, self.stream)
        self.driver.cuStreamSynchronize(self.stream)
        return ptr

    @property
    def blas(self):
        if self._blas is None:
            self._blas = (self._blas_factory or cublaslt.CublasLt)()
        return self._blas

    # -- binding ---------------------------------------------------------------------------------------------
    def bind(self, shapes: list, dtypes: list) -> dict:
        """The symbols' values for inputs of `shapes`; ShapeError when the signature refuses them."""
        if len(shapes) != len(self.arg_types):
            raise ShapeError(f"the compiled function takes {len(self.arg_types)} inputs, got {len(shapes)}")
        env: dict = {}
        for i, (t, shape, dtype) in enumerate(zip(self.arg_types, shapes, dtypes)):
            if np.dtype(dtype) != t.dtype.numpy:
                raise ShapeError(f"input {i} must have element type {t.dtype}, got {np.dtype(dtype)}")
            if len(shape) != t.rank:
                raise ShapeError(f"input {i} must have rank {t.rank} ({t}), got shape {tuple(shape)}")
            for d, n in zip(t.shape, shape):
                if isinstance(d, SymExpr) and len(d.free_symbols) == 1 and str(d) in d.free_symbols:
                    env.setdefault(str(d), int(n))
        for i, (t, shape) in enumerate(zip(self.arg_types, shapes)):
            want = tuple(evaluate(d, env) for d in t.shape)
            if want != tuple(shape):
                raise ShapeError(f"input {i} must have shape {t} = {want}, got {tuple(shape)}")
        return env

    # -- one shape: buffers and the graph --------------------------------------------------------------------
    def state(self, env: dict) -> ShapeState:
        key = tuple(sorted(env.items()))
        if key not in self.states:
            self.states[key] = self._new_state(env)
        return self.states[key]

    def _new_state(self, env: dict) -> ShapeState:
        d = self.driver
        plan = self.program.plan
        slots = plan.arena_bytes(env)
        gemm = any(isinstance(s, Gemm) for s in self.program.steps)
        plans = self._conv_plans(env)
        workspace = max([cublaslt.WORKSPACE_BYTES if gemm else 0, *(p.workspace for p in plans.values())])
        arena_bytes = _align(slots) + ERROR_BYTES + _align(workspace)
        in_bytes = [_nbytes(t, env) for t in self.arg_types]
        out_bytes = [_nbytes(t, env) for t in self.out_types]
        state = ShapeState(env, d.cuMemAlloc(arena_bytes), arena_bytes, [d.cuMemAlloc(n) for n in in_bytes],
                           [d.cuMemAlloc(n) for n in out_bytes], [d.cuMemHostAlloc(n) for n in in_bytes],
                           [d.cuMemHostAlloc(n) for n in out_bytes], in_bytes, out_bytes,
                           [tuple(evaluate(x, env) for x in t.shape) for t in self.out_types], conv_plans=plans)
        return state

    def _conv_plans(self, env: dict) -> dict:
        """cuDNN's plan of each Conv step at this shape (made before capture: it sizes the workspace)."""
        if self.dnn is None:
            return {}
        plans = {k: self.dnn.plan(s, lambda x: evaluate(x, env)) for k, s in enumerate(self.program.steps)
                 if isinstance(s, Conv)}
        return {k: p for k, p in plans.items() if p is not None}

    def _capture(self, state: ShapeState) -> None:
        """Record the whole function on the stream into a graph, once: the replays launch it whole."""
        d, s = self.driver, self.stream
        d.cuStreamBeginCapture(s)
        d.cuMemsetD32Async(self._err(state), 0, 4, s)
        for k, n in enumerate(state.in_bytes):
            if n:
                d.cuMemcpyHtoDAsync(state.inputs[k], state.host_in[k], n, s)
        self.enqueue(state)
        for k, n in enumerate(state.out_bytes):
            if n:
                d.cuMemcpyDtoHAsync(state.host_out[k], state.outputs[k], n, s)
        state.graph = d.cuStreamEndCapture(s)
        state.graph_exec = d.cuGraphInstantiate(state.graph)

    def enqueue(self, state: ShapeState) -> None:
        """Every step of the program on the stream, for the buffers of `state`."""
        for k, step in enumerate(self.program.steps):
            if isinstance(step, Launch):
                self._launch(step, state)
            elif isinstance(step, Conv):
                self._conv(k, step, state)
            elif isinstance(step, Gemm):
                g = cublaslt.gemm_layouts(step, lambda x: evaluate(x, state.env))
                bias = self.address(step.bias, state) if step.bias is not None else 0
                self.blas.matmul(step, g, self.address(step.a, state), self.address(step.b, state),
                                 self.address(step.c, state), bias, self._workspace(state), self.stream)
            elif isinstance(step, Copy):
                n = evaluate(step.nbytes, state.env)
                if n:
                    self.driver.cuMemcpyDtoDAsync(self.address(step.dst, state), self.address(step.src, state), n,
                                                  self.stream)

    def _conv(self, k: int, step: Conv, state: ShapeState) -> None:
        """cuDNN with its plan, then the epilogue it cannot fuse; the direct kernel where there is no plan."""
        plan = state.conv_plans.get(k)
        if plan is None:
            self._launch(step.direct, state)
            return
        bias = self.address(step.bias, state) if step.bias is not None else 0
        self.dnn.forward(plan, self.address(step.x, state), self.address(step.w, state), bias,
                         self.address(step.y, state), self._workspace(state), self.stream)
        for launch in step.after:
            self._launch(launch, state)

    def _launch(self, step: Launch, state: ShapeState) -> None:
        work = evaluate(step.kernel.work, state.env)
        if work <= 0:
            return
        params = []
        for arg in step.args:
            kind = arg.kind if isinstance(arg, Buf) else arg if isinstance(arg, str) else arg[0]
            if isinstance(arg, Buf):
                value = self.address(arg, state)
            elif kind == "null":
                value = 0
            elif kind == "sym":
                value = state.env[arg[1]]
            elif kind == "dim":
                value = evaluate(arg[1], state.env)
            else:
                value = arg[1]
            params.append((ctypes.c_uint64 if isinstance(arg, Buf) else PARAM_TYPES[kind], value))
        grid = step.kernel.grid(work)
        self.driver.cuLaunchKernel(self.functions[step.kernel.name], (grid, 1, 1), (step.kernel.threads, 1, 1),
                                   step.kernel.shared_bytes, self.stream, params)

    def address(self, buf: Buf, state: ShapeState) -> int:
        if buf.kind == "in":
            return state.inputs[buf.index]
        if buf.kind == "out":
            return state.outputs[buf.index]
        if buf.kind == "const":
            return self.constants[buf.index]
        if buf.kind == "err":
            return self._err(state)
        return state.arena + self.program.plan.offset(buf.index, state.env)

    def _err(self, state: ShapeState) -> int:
        return state.arena + _align(self.program.plan.arena_bytes(state.env))

    def _workspace(self, state: ShapeState) -> int:
        return self._err(state) + ERROR_BYTES

    # -- calls -----------------------------------------------------------------------------------------------
    def __call__(self, inputs: list) -> list:
        arrays = [_contiguous(x) for x in inputs]
        state = self.state(self.bind([a.shape for a in arrays], [a.dtype for a in arrays]))
        for k, a in enumerate(arrays):
            ctypes.memmove(state.host_in[k], a.ctypes.data, a.nbytes)
        self.replay(state)
        outs = []
        for k, t in enumerate(self.out_types):
            out = np.empty(state.out_shapes[k], t.dtype.numpy)
            ctypes.memmove(out.ctypes.data, state.host_out[k], out.nbytes)
            outs.append(out)
        return outs

    def run_device(self, inputs: list) -> list:
        """Device arrays in and out, zero-copy at the edges: each input is anything with a CUDA `__dlpack__` or a
        `__cuda_array_interface__` (torch CUDA tensors, CuPy arrays; C-contiguous), copied device to device into the
        graph's input buffers; the outputs are `DeviceArray` views of the graph's output buffers (torch.from_dlpack(y)
        and cupy.from_dlpack(y) read them in place), valid until this function's next call."""
        views = [_interface(x, i, self.stream) for i, x in enumerate(inputs)]  # (a DLPack view keeps its capsule)
        state = self.state(self.bind([v["shape"] for v in views], [v["typestr"] for v in views]))
        for k, v in enumerate(views):
            if state.in_bytes[k]:
                self.driver.cuMemcpyDtoDAsync(state.inputs[k], v["data"][0],
                                              state.in_bytes[k], self.stream)
        self._launch_graph_from_device(state)
        return [DeviceArray(state.outputs[k], state.out_shapes[k], t.dtype.numpy, self.device)
                for k, t in enumerate(self.out_types)]

    def _launch_graph_from_device(self, state: ShapeState) -> None:
        """The graph without its host copies: captured once per shape, for device-resident inputs and outputs."""
        if not state.device_graph:
            d, s = self.driver, self.stream
            d.cuStreamBeginCapture(s)
            d.cuMemsetD32Async(self._err(state), 0, 4, s)
            self.enqueue(state)
            state.device_graph = d.cuGraphInstantiate(d.cuStreamEndCapture(s))
        self.driver.cuGraphLaunch(state.device_graph, self.stream)
        self.driver.cuStreamSynchronize(self.stream)
        self._raise_recorded_error(state)

    def replay(self, state: ShapeState) -> None:
        if not state.graph_exec:
            self._capture(state)
        self.driver.cuGraphLaunch(state.graph_exec, self.stream)
        self.driver.cuStreamSynchronize(self.stream)
        state.replays += 1
        self._raise_recorded_error(state)

    def _raise_recorded_error(self, state: ShapeState) -> None:
        if not self.program.errors:
            return
        word = (ctypes.c_int64 * 2)()
        self.driver.cuMemcpyDtoHAsync(ctypes.addressof(word), self._err(state), 16, self.stream)
        self.driver.cuStreamSynchronize(self.stream)
        code = word[0] & 0xFFFFFFFF
        if code:
            name, loc, axis, size = self.program.errors[code - 1]
            size = evaluate(size, state.env)
            index = "" if word[1] == -(1 << 63) else f" {word[1]}"
            raise IndexRangeError(f"'{name}': index{index} is out of bounds for axis {axis} with size {size}",
                                  loc or None)


class DeviceArray:
    """A C-contiguous array in device memory, readable in place through DLPack (`torch.from_dlpack(y)`,
    `cupy.from_dlpack(y)`) and `__cuda_array_interface__` (version 3)."""

    def __init__(self, ptr: int, shape: tuple, dtype, device: int = 0):
        self.ptr, self.shape, self.dtype, self.device = ptr, tuple(shape), np.dtype(dtype), device

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "strides": None,
                "version": 3}

    def __dlpack_device__(self) -> tuple:
        return (dlpack.KDL_CUDA, self.device)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A "dltensor" capsule of this memory (the run's stream was synchronised: any consumer stream may read it)."""
        if copy or (dl_device is not None and tuple(dl_device) != self.__dlpack_device__()):
            raise BufferError("a CUDA run's output is exported in place on its own device only")
        return dlpack.to_capsule(self.ptr, self.shape, self.dtype, self.__dlpack_device__(), self)


def _interface(x, i: int, stream: int = 0) -> dict:
    """The `__cuda_array_interface__` of input `i` (or its DLPack tensor's, made on `stream`, in the same form with
    the capsule under "keep"), refused (ShapeError) unless it is a C-contiguous device array."""
    view = getattr(x, "__cuda_array_interface__", None)
    if view is None and hasattr(x, "__dlpack__"):
        view = _dlpack_view(x, i, stream)
    if view is None:
        raise ShapeError(f"input {i}: run_device takes device arrays (__dlpack__ on a CUDA device or "
                         f"__cuda_array_interface__: torch CUDA tensors, CuPy arrays), not {type(x).__name__}")
    itemsize = np.dtype(view["typestr"]).itemsize
    strides = view.get("strides")
    dense = _contiguous_strides(view["shape"], itemsize)
    if strides is not None and any(s != d for s, d, n in zip(strides, dense, view["shape"]) if n > 1):
        raise ShapeError(f"input {i}: a non-contiguous device array (strides {tuple(strides)}); pass .contiguous()")
    return view


def _dlpack_view(x, i: int, stream: int):
    """Input `i`'s DLPack tensor as a `__cuda_array_interface__` dict; None for one on the host (not taken)."""
    device = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else None
    if device is not None and device not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
        return None
    try:
        capsule = x.__dlpack__(stream=stream or None)  # the producer orders its work before our stream's
    except TypeError:
        capsule = x.__dlpack__()
    t = dlpack.from_capsule(capsule)
    if t["device"][0] not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
        return None
    strides = None if t["strides"] is None else tuple(s * t["dtype"].itemsize for s in t["strides"])
    return {"shape": t["shape"], "typestr": t["dtype"].str, "data": (t["data"], False), "strides": strides,
            "version": 3, "keep": capsule}


def _contiguous_strides(shape, itemsize: int) -> tuple:
    out, step = [], itemsize
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def _contiguous(x) -> np.ndarray:
    """`x` as a C-contiguous array of its own rank (np.ascontiguousarray makes a 0-d array 1-d)."""
    a = np.asarray(x)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _nbytes(t, env: dict) -> int:
    return int(evaluate(t.numel, env)) * t.dtype.itemsize
