"""2-D convolutions through cuDNN's legacy convolution API (ctypes over the pip wheel's libcudnn, `nvidia-cudnn-cu12`,
the system's, or the library at `CUVIL_CUDNN`), the bias and relu fused by cudnnConvolutionBiasActivationForward.
Without the library, or with `CUVIL_CUDA_CONV=direct`, a Conv step runs Cuvil's direct conv kernel (its `direct`).

`plan` makes, once per Conv step and shape, the descriptors (NCHW tensors, the filter, the convolution with its group
count), the algorithm cudnnGetConvolutionForwardAlgorithm_v7 ranks first among those that work, and that algorithm's
workspace size, which the runtime adds to the arena before capturing; `forward` enqueues the call on the stream.
"""
from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass

from .driver import CudaDriverError
from .toolchain import wheel_libraries

log = logging.getLogger("cuvil.backends.cuda")
DATA_TYPE = {"f32": 0, "f16": 2, "bf16": 9}  # CUDNN_DATA_FLOAT, _HALF, _BFLOAT16
TENSOR_NCHW = 0
CROSS_CORRELATION = 1  # what deep-learning frameworks call convolution
ACTIVATION = {"relu": 1, "none": 5}  # CUDNN_ACTIVATION_RELU, _IDENTITY
NOT_PROPAGATE_NAN = 0
MATH = {"f32": 0, "f16": 1, "bf16": 1}  # CUDNN_DEFAULT_MATH; CUDNN_TENSOR_OP_MATH for the 16-bit types
IMPLICIT_PRECOMP_GEMM = 1  # the one algorithm cudnnConvolutionBiasActivationForward takes with IDENTITY
ALGO_COUNT = 8  # CUDNN_CONVOLUTION_FWD_ALGO_COUNT
WORKSPACE_LIMIT = 256 << 20  # an algorithm asking more is passed over


class AlgoPerf(ctypes.Structure):
    """cudnnConvolutionFwdAlgoPerf_t."""

    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int), ("math_type", ctypes.c_int),
                ("reserved", ctypes.c_int * 3)]


@dataclass(frozen=True)
class ConvPlan:
    """One Conv step at one shape: descriptors (x, w, conv, y, bias or None, activation or None), algorithm, bytes."""

    descs: tuple
    algo: int
    workspace: int


def candidates() -> list:
    """The libraries to try: `CUVIL_CUDNN`, then the pip wheel's and the system's libcudnn.so.9."""
    env = os.environ.get("CUVIL_CUDNN", "")
    return ([env] if env else []) + [p for p in wheel_libraries("libcudnn") if ".so.1" not in p] + ["libcudnn.so.9"]


_opened: dict = {}


def load():
    """A `Cudnn` on the first library that opens, or None (the direct kernels run): none found,
    `CUVIL_CUDA_CONV=direct`, or cudnnCreate failing (logged)."""
    if os.environ.get("CUVIL_CUDA_CONV", "").strip().lower() == "direct":
        return None
    for path in candidates():
        if path not in _opened:
            try:
                _opened[path] = ctypes.CDLL(path)
            except OSError:
                _opened[path] = None
        if _opened[path] is not None:
            try:
                return Cudnn(_opened[path])
            except CudaDriverError as e:
                log.warning("cuDNN at %s: %s; convolutions use the direct kernels", path, e)
                return None
    return None


def _ptr(address: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(address or None)


class Cudnn:
    """cuDNN on one handle: `plan(step, env_value)` per shape, then `forward(...)` with device pointers."""

    def __init__(self, lib):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        self._check("cudnnCreate", ctypes.byref(self.handle))
        self.one, self.zero = ctypes.c_float(1.0), ctypes.c_float(0.0)  # alive while a captured call refers to them
        self._plans: dict = {}

    def _check(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise CudaDriverError(f"{name} failed: cudnnStatus {rc}")

    def _descriptor(self, kind: str) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        self._check(f"cudnnCreate{kind}Descriptor", ctypes.byref(h))
        return h

    def _tensor(self, dtype: str, dims: tuple) -> ctypes.c_void_p:
        h = self._descriptor("Tensor")
        self._check("cudnnSetTensor4dDescriptor", h, ctypes.c_int(TENSOR_NCHW), ctypes.c_int(DATA_TYPE[dtype]),
                    *map(ctypes.c_int, dims))
        return h

    def plan(self, step, env_value):
        """The ConvPlan of Conv `step` with its dims evaluated by `env_value`; None when cuDNN offers no algorithm."""
        dims = tuple(tuple(int(env_value(d)) for d in shape) for shape in (step.x_shape, step.w_shape, step.y_shape))
        key = (step.dtype, dims, step.pads, step.strides, step.dilations, step.groups, step.act, step.bias is not None)
        if key not in self._plans:
            self._plans[key] = self._make_plan(step, *dims)
        return self._plans[key]

    def _make_plan(self, step, x_dims: tuple, w_dims: tuple, y_dims: tuple):
        x, y = self._tensor(step.dtype, x_dims), self._tensor(step.dtype, y_dims)
        w = self._descriptor("Filter")
        self._check("cudnnSetFilter4dDescriptor", w, ctypes.c_int(DATA_TYPE[step.dtype]), ctypes.c_int(TENSOR_NCHW),
                    *map(ctypes.c_int, w_dims))
        conv = self._descriptor("Convolution")
        self._check("cudnnSetConvolution2dDescriptor", conv, *map(ctypes.c_int, (*step.pads, *step.strides,
                                                                                   *step.dilations)),
                    ctypes.c_int(CROSS_CORRELATION), ctypes.c_int(DATA_TYPE["f32"]))  # f32 accumulation
        self._check("cudnnSetConvolutionGroupCount", conv, ctypes.c_int(step.groups))
        self._check("cudnnSetConvolutionMathType", conv, ctypes.c_int(MATH[step.dtype]))
        bias = act = None
        if step.bias is not None:
            bias = self._tensor(step.dtype, (1, y_dims[1], 1, 1))
            act = self._descriptor("Activation")
            self._check("cudnnSetActivationDescriptor", act, ctypes.c_int(ACTIVATION[step.act]),
                        ctypes.c_int(NOT_PROPAGATE_NAN), ctypes.c_double(0.0))
        algo = self._algorithm(x, w, conv, y, identity=bias is not None and step.act == "none")
        if algo is None:
            log.info("cuDNN has no algorithm for the conv %s * %s: the direct kernel runs it", x_dims, w_dims)
            return None
        size = ctypes.c_size_t()
        self._check("cudnnGetConvolutionForwardWorkspaceSize", self.handle, x, w, conv, y, ctypes.c_int(algo),
                    ctypes.byref(size))
        return ConvPlan((x, w, conv, y, bias, act), algo, size.value)

    def _algorithm(self, x, w, conv, y, identity: bool):
        """cuDNN's best-ranked working algorithm within WORKSPACE_LIMIT (IMPLICIT_PRECOMP_GEMM for a fused identity)."""
        perf = (AlgoPerf * ALGO_COUNT)()
        count = ctypes.c_int()
        self._check("cudnnGetConvolutionForwardAlgorithm_v7", self.handle, x, w, conv, y, ctypes.c_int(ALGO_COUNT),
                    ctypes.byref(count), perf)
        for p in perf[:count.value]:
            if p.status == 0 and p.memory <= WORKSPACE_LIMIT and (not identity or p.algo == IMPLICIT_PRECOMP_GEMM):
                return p.algo
        return IMPLICIT_PRECOMP_GEMM if identity else None

    def forward(self, plan: ConvPlan, x: int, w: int, bias: int, y: int, workspace: int, stream: int) -> None:
        """y = act(conv(x, w) + bias) on `stream` (into its graph while capturing)."""
        xd, wd, conv, yd, bd, act = plan.descs
        self._check("cudnnSetStream", self.handle, ctypes.c_void_p(stream or None))
        head = (self.handle, ctypes.byref(self.one), xd, _ptr(x), wd, _ptr(w), conv, ctypes.c_int(plan.algo),
                _ptr(workspace), ctypes.c_size_t(plan.workspace), ctypes.byref(self.zero))
        if bd is None:
            self._check("cudnnConvolutionForward", *head, yd, _ptr(y))
        else:  # z is y with alpha2 = 0: cuDNN reads nothing from it
            self._check("cudnnConvolutionBiasActivationForward", *head, yd, _ptr(y), bd, _ptr(bias), act, yd, _ptr(y))
