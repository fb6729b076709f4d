"""Cuvil's CPU kernel library (GEMM and its epilogues, convs, int8 and 16-bit GEMMs): built once per machine and
flags, in units that a model builds only when it calls them, loaded with ctypes.

    >>> import numpy as np
    >>> from cuvil.backends.cpu import kernels
    >>> a, b = kernels.aligned_array(np.ones((2, 3))), kernels.aligned_array(np.ones((3, 4)))
    >>> kernels.sgemm(a, b, bias=np.full(4, -4, np.float32), act="relu", opt_level=1).tolist()
    [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]

Generated model code includes `cuvil_kernels.h` (in `include_dir()`) and calls the C ABI declared there; the
library is loaded with RTLD_GLOBAL so that a model library compiled afterwards resolves its symbols.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np

from ...errors import ShapeError
from . import targets, toolchain

ACTIVATIONS = {"none": 0, "relu": 1, "gelu_tanh": 2, "gelu_erf": 3, "sigmoid": 4, "tanh": 5, "relu6": 6, "silu": 7,
               "hardswish": 8}
ABI_VERSION = 1
# Every kernel runs on cuvil_pool.c's threads; the sources share cuvil_internal.h's helpers. wasm32 and the sanitizer
# test compile them as one unit, in this order.
SOURCES = ("cuvil_pool.c", "gemm.c", "gemm_kernel.c", "gemm_epilogue.c", "attention.c", "dwconv.c", "conv_nchwc.c",
           "winograd.c", "gemm_int8.c", "gemm_int4.c", "gemm_lowp.c", "gemm_int8_amx.c", "conv_int8.c", "conv_lowp.c")
HEADERS = ("cuvil_kernels.h", "cuvil_internal.h", "cuvil_gemm.h", "cuvil_nchwc.h", "cuvil_simd.h", "cuvil_math.inc",
           "cuvil_scalar.inc", "cuvil_omp.h")
# On the host the library is built in units, one source each, each its own cached object, compiled at once (a first
# call on a new machine waits for the slowest unit, not for the sum). Generated code links the CORE and only the
# other units whose functions it calls: the blocked and Winograd convs and the int8, int4 and 16-bit GEMMs are
# three quarters of the build, and an MLP or a transformer calls none of them.
# The int8 and bf16 convolutions share the int8 and 16-bit GEMMs' static helpers and layouts: one unit, in order.
LOWP = ("gemm_int8.c", "gemm_lowp.c", "gemm_int8_amx.c", "conv_int8.c", "conv_lowp.c")
UNITS = {name.removesuffix(".c").removeprefix("cuvil_"): (name,) for name in SOURCES if name not in LOWP} | \
    {"lowp": LOWP}
# One shared library; every other unit is a library of its own, loaded after it. The GEMM is three units (its drivers,
# its micro-kernels, its epilogue: 0.6, 0.5 and 0.4 s of compiler time at -O2, against 1.5 s as one unit).
CORE = ("pool", "gemm", "gemm_kernel", "gemm_epilogue")
# The most a unit is optimised: at -O2 the GEMM's and the blocked conv's explicit vector code runs as fast as at -O3
# (interleaved, 0.95-1.01x on five GEMM shapes with an epilogue and on three ResNet layers) and compiles in half the
# time; Winograd's transforms are 1.1-3.7x slower at -O2, so it keeps -O3.
UNIT_LEVELS = {"gemm": 2, "gemm_kernel": 2, "gemm_epilogue": 2, "conv_nchwc": 2}

_i64, _f32, _int, _ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_int, ctypes.c_void_p
_SGEMM_ARGS = [_i64, _i64, _i64, _f32, _ptr, _i64, _i64, _ptr, _i64, _i64, _f32, _ptr, _i64, _ptr, _int]
# Argument types of each exported function: rules as data, checked against cuvil_kernels.h by the tests.
SIGNATURES = {
    "cuvil_kernels_abi_version": ([], _int),
    "cuvil_kernels_config": ([], ctypes.c_char_p),
    "cuvil_set_num_threads": ([_int], None),
    "cuvil_get_num_threads": ([], _int),
    "cuvil_swap_call_threads": ([_int], _int),
    "cuvil_threads_for": ([_i64], _int),
    "cuvil_last_team": ([], _int),
    "cuvil_pool_state": ([_ptr], None),
    "cuvil_pool_waits": ([_ptr], None),
    "cuvil_pool_idle": ([_ptr], None),
    "cuvil_sgemm": (_SGEMM_ARGS, None),
    "cuvil_sgemm_row_bias": (_SGEMM_ARGS, None),
    "cuvil_sgemm_serial": (_SGEMM_ARGS, None),
    "cuvil_attention": ([_ptr], None),
    "cuvil_sgemm_packed_size": ([_i64, _i64], _i64),
    "cuvil_sgemm_pack_b": ([_i64, _i64, _ptr, _i64, _i64, _ptr], None),
    "cuvil_sgemm_packed": ([_i64, _i64, _i64, _f32, _ptr, _i64, _i64, _ptr, _f32, _ptr, _i64, _ptr, _int], None),
    "cuvil_sgemm_pack_b_serial": ([_i64, _i64, _ptr, _i64, _i64, _ptr], None),
    "cuvil_sgemm_packed_serial": ([_i64, _i64, _i64, _f32, _ptr, _i64, _i64, _ptr, _f32, _ptr, _i64, _ptr, _int],
                                  None),
    "cuvil_sgemm_batched": ([_i64, _i64, _i64, _i64, _f32, _ptr, _i64, _i64, _i64, _ptr, _i64, _i64, _i64, _f32,
                             _ptr, _i64, _i64, _ptr, _int], None),
    "cuvil_dwconv2d": ([_i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _f32, _f32], None),
    "cuvil_dwconv_nchwc": ([_ptr, _ptr, _ptr, _ptr, _ptr, _int], None),
    "cuvil_spatial_sum_nchwc": ([_ptr, _ptr, _i64, _i64], None),
    "cuvil_conv_nchwc_block": ([], _int),
    "cuvil_conv_nchwc": ([_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _int], None),
    "cuvil_winograd_weight_size": ([_i64, _i64], _i64),
    "cuvil_winograd_weight": ([_ptr, _i64, _i64, _ptr], None),
    "cuvil_conv_winograd": ([_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _int], None),
    "cuvil_activation": ([_int, _i64, _ptr, _ptr], None),
    # int8 and int4 (gemm_int8.c, gemm_int4.c; Python side in kernels_int8.py)
    "cuvil_int8_isa": ([], _int),
    "cuvil_int8_set_isa": ([_int], None),
    "cuvil_qgemm_packed_bytes": ([_i64, _i64], _i64),
    "cuvil_qgemm_pack": ([_i64, _i64, _ptr, _ptr], None),
    "cuvil_qgemm": ([_ptr], None),
    "cuvil_quantize_rows_u8": ([_i64, _i64, _ptr, _i64, _ptr, _i64, _ptr, _ptr, _f32, ctypes.c_int32], None),
    "cuvil_qlinear_scratch_bytes": ([_i64, _i64], _i64),
    "cuvil_qlinear": ([_ptr, _ptr, _int, _f32, ctypes.c_int32, _ptr], None),
    "cuvil_qconv_packed_bytes": ([_i64, _i64, _i64, _i64], _i64),
    "cuvil_qconv_pack": ([_i64, _i64, _i64, _i64, _ptr, _ptr], None),
    "cuvil_qconv_scratch_bytes": ([_ptr], _i64),
    "cuvil_qconv": ([_ptr, _int, _f32, ctypes.c_int32, _ptr, _ptr, _ptr, _ptr, _f32, ctypes.c_int32, _int, _ptr,
                     _f32, ctypes.c_int32, _ptr, _ptr], None),
    "cuvil_max_pool_u8": ([_ptr, _ptr, _i64, _ptr], None),
    "cuvil_conv_bf16_packed_bytes": ([_i64, _i64, _i64, _i64], _i64),
    "cuvil_conv_bf16_pack": ([_i64, _i64, _i64, _i64, _ptr, _ptr], None),
    "cuvil_conv_bf16_scratch_bytes": ([_ptr], _i64),
    "cuvil_conv_bf16": ([_ptr, _ptr, _ptr, _ptr, _int, _ptr, _ptr, _ptr], None),
    "cuvil_gemm_int4_scratch_bytes": ([_i64, _i64, _i64], _i64),
    "cuvil_gemm_int4": ([_i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _int, _ptr, _ptr], None),
    # bf16 / fp16 (gemm_lowp.c; Python side in kernels_lowp.py)
    "cuvil_lowp_packed_size": ([_i64, _i64, _int], _i64),
    "cuvil_lowp_pack_b": ([_i64, _i64, _int, _ptr, _i64, _i64, _ptr], None),
    "cuvil_lowp_path": ([], _int),
    "cuvil_lowp_set_path": ([_int], _int),
    "cuvil_lowp_gemm_packed": ([_i64, _i64, _i64, _ptr, _i64, _i64, _ptr, _int, _ptr, _i64, _ptr, _int], None),
}
LOWP_PATHS = ("generic", "avx512_bf16", "amx_bf16")  # the bf16 GEMM's paths (gemm_lowp.c), by their number


def activation_code(op) -> int:
    """The epilogue code (ACTIVATIONS) of an activation op: relu, gelu (either form), sigmoid, tanh, silu, hardswish."""
    if op.name == "gelu":
        return ACTIVATIONS["gelu_tanh" if op.attrs["approximate"] == "tanh" else "gelu_erf"]
    return ACTIVATIONS[op.name]


def conv_block():
    """Channels per block of the blocked convolution kernel: one vector of f32 on the target compiled for (the
    host by default); None where the levels of one file differ in width (convolutions stay unblocked)."""
    return targets.layout_lanes()


def include_dir() -> Path:
    """The folder holding `cuvil_kernels.h` and `cuvil_simd.h`, for `-I` when compiling generated code."""
    return Path(str(resources.files(__package__) / "kernels"))


def unit_source(unit: str) -> str:
    """The C of one unit: cuvil_internal.h's helpers, then its sources."""
    return '#include "cuvil_internal.h"\n' + "".join(f'#include "{name}"\n' for name in UNITS[unit])


def unit_objects(units, level: int, target=None, defines: tuple = ()) -> list:
    """The object files of kernel `units` at `level` (UNIT_LEVELS caps it), cached by content, flags, compiler and
    CPU, the missing ones compiled in parallel; `defines` are extra `-D` flags (block sizes)."""
    folder, compiler = include_dir(), toolchain.find_compiler(target)

    def build(unit):
        unit_level = min(level, UNIT_LEVELS.get(unit, level))
        flags = toolchain.object_flags(unit_level, tuple(f"-D{d}" for d in defines), target, compiler)
        depends = [folder / name for name in UNITS[unit] + HEADERS]
        return toolchain.build_library(unit_source(unit), name=f"obj-kernels-{unit}", flags=flags,
                                       include_dirs=[folder], depends=depends, target=target).path

    if len(units) == 1:
        return [build(units[0])]
    with ThreadPoolExecutor(len(units)) as pool:  # each build is a compiler subprocess
        return list(pool.map(build, units))


@functools.lru_cache(maxsize=None)
def exported(unit: str) -> frozenset:
    """The functions a kernel unit defines for others: its non-static definitions (checked against nm in tests)."""
    texts = [(include_dir() / name).read_text() for name in UNITS[unit]]
    return frozenset(name for text in texts for name in _EXPORTED.findall(text))


_EXPORTED = re.compile(r"^(?!static\b)[A-Za-z_][\w \t]*?[\s*](cuvil_\w+)\s*\(", re.M)


# Units that call another (non-core) unit's functions: gemm_int4.c follows gemm_int8.c's cuvil_int8_isa.
UNIT_NEEDS = {"gemm_int4": ("lowp",)}


def with_needs(units) -> tuple:
    """`units` with the units each one calls placed before it (dlopen resolves a library's symbols as it loads)."""
    return tuple(dict.fromkeys(n for u in units for n in (*UNIT_NEEDS.get(u, ()), u)))


def units_for(source: str) -> tuple:
    """The kernel units generated C `source` links: the core and every other unit one of whose functions it names."""
    names = set(re.findall(r"\bcuvil_\w+", source))
    return CORE + with_needs(u for u in UNITS if u not in CORE and names & exported(u))


class KernelLibrary:
    """The loaded kernel library: the core's shared library and the other units', each loaded (and built) when a
    model or a binding first needs a function of it; a function's argument types come from SIGNATURES."""

    def __init__(self, opt_level: int, defines: tuple):
        self.opt_level, self.defines = opt_level, defines
        self._libs: dict = {}
        self._lock = threading.Lock()

    def require(self, units) -> None:
        """Build what is missing of `units` (in parallel) and load it, the core first (the others resolve into it)."""
        with self._lock:
            loaded = {u for group in self._libs for u in group}
            missing = [u for u in dict.fromkeys(CORE + with_needs(units)) if u not in loaded]
            if not missing:
                return
            objects = dict(zip(missing, unit_objects(missing, self.opt_level, defines=self.defines)))
            groups = ([CORE] if CORE[0] in objects else []) + [(u,) for u in missing if u not in CORE]
            for group in groups:
                build = toolchain.link_library([objects[u] for u in group], name="cuvil-kernels-" + "-".join(group))
                self._libs[group] = ctypes.CDLL(str(build.path), mode=ctypes.RTLD_GLOBAL)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        unit = next((u for u in UNITS if name in exported(u)), None)
        if unit is None:
            raise AttributeError(f"the kernel library has no function {name}")
        self.require((unit,))
        fn = getattr(next(lib for group, lib in self._libs.items() if unit in group), name)
        if name in SIGNATURES:
            fn.argtypes, fn.restype = SIGNATURES[name]
        setattr(self, name, fn)  # later lookups skip __getattr__
        return fn


@functools.lru_cache(maxsize=None)
def load(opt_level: int = 3, defines: tuple = (), units: tuple = CORE) -> KernelLibrary:
    """Build (or find in the cache) and load the kernel library's `units` (more load on demand); `defines` are extra
    `-D` flags (block sizes)."""
    lib = _library(opt_level, defines)
    lib.require(units)
    return lib


_LIBRARY_LOCK = threading.Lock()


def _library(opt_level: int, defines: tuple) -> KernelLibrary:
    """The one KernelLibrary of these flags, whichever thread asks first (backend.prefetch's, a model's build)."""
    with _LIBRARY_LOCK:
        return _make_library(opt_level, defines)


@functools.lru_cache(maxsize=None)
def _make_library(opt_level: int, defines: tuple) -> KernelLibrary:
    lib = KernelLibrary(opt_level, defines)
    lib.require(CORE)
    if lib.cuvil_kernels_abi_version() != ABI_VERSION:
        raise RuntimeError(f"kernel library ABI {lib.cuvil_kernels_abi_version()} != {ABI_VERSION}")
    lib.cuvil_set_num_threads(default_num_threads())
    return lib


def lowp_path(opt_level: int = 3) -> str:
    """The bf16 GEMM path in use: chosen by the CPU's features less those `CUVIL_DISABLE_CPU_FEATURES` names
    (comma-separated /proc/cpuinfo flags, e.g. `amx_bf16,avx512_bf16`: how tests run the fallbacks)."""
    return LOWP_PATHS[load(opt_level).cuvil_lowp_path()]


def default_num_threads() -> int:
    """`CUVIL_NUM_THREADS`, else the physical cores the process may run on, at most its cgroup's CPU quota (a
    container given 2 CPUs of a 64-core host runs 2 threads, not 64 that take turns)."""
    env = os.environ.get("CUVIL_NUM_THREADS", "")
    if env.strip().isdigit() and int(env) > 0:
        return int(env)
    quota = cgroup_cpu_quota(CGROUP_QUOTAS)
    cores = toolchain.physical_cores()
    return cores if quota is None else max(1, min(cores, quota))


CGROUP_QUOTAS = (("/sys/fs/cgroup/cpu.max", None),  # v2: "<quota> <period>" or "max <period>"
                 ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"))  # v1; -1: none


def cgroup_cpu_quota(files=CGROUP_QUOTAS) -> int | None:
    """The CPUs the process's cgroup may use, rounded up (a quota of 1.5 CPUs: 2), or None where it sets none."""
    for quota_file, period_file in files:
        try:
            fields = Path(quota_file).read_text().split()
            if period_file is not None:
                fields.append(Path(period_file).read_text().strip())
        except OSError:
            continue
        if len(fields) < 2 or fields[0] == "max" or not fields[0].isdigit() or not fields[1].isdigit():
            return None
        quota, period = int(fields[0]), int(fields[1])
        return -(-quota // period) if quota > 0 and period > 0 else None
    return None


def aligned_empty(shape, dtype=np.float32, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `align`-byte boundary."""
    dtype = np.dtype(dtype)
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    offset = -raw.ctypes.data % align
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def aligned_array(x, dtype=np.float32, align: int = 64) -> np.ndarray:
    """A 64-byte-aligned C-contiguous copy of `x` (cast to `dtype`)."""
    out = aligned_empty(np.shape(x), dtype, align)
    out[...] = x
    return out


def _matrix(x: np.ndarray, what: str) -> tuple[np.ndarray, int, int]:
    """(array, row stride, column stride) in elements; copies what the kernels cannot read in place."""
    if not isinstance(x, np.ndarray) or x.ndim != 2:
        raise ShapeError(f"sgemm: {what} must be a 2-D array, got {getattr(x, 'shape', type(x).__name__)}")
    if x.dtype != np.float32 or any(s % 4 for s in x.strides):
        x = aligned_array(x)
    return x, x.strides[0] // 4, x.strides[1] // 4


def _output(out, shape, what="out") -> np.ndarray:
    if out is None:
        return aligned_empty(shape)
    if out.dtype != np.float32 or out.shape != tuple(shape) or out.strides[1] != 4 or out.strides[0] % 4:
        raise ShapeError(f"sgemm: {what} must be float32 {shape} with unit column stride, got {out.dtype} "
                         f"{out.shape} strides {out.strides}")
    return out


def _bias(bias, n: int):
    if bias is None:
        return None
    bias = np.ascontiguousarray(bias, np.float32)
    if bias.shape != (n,):
        raise ShapeError(f"sgemm: bias must have shape ({n},), got {bias.shape}")
    return bias


def _act(act: str) -> int:
    if act not in ACTIVATIONS:
        raise ValueError(f"sgemm: unknown activation {act!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[act]


def _ptr_of(x):
    return None if x is None else x.ctypes.data


def sgemm(a, b, out=None, *, bias=None, row_bias=None, act="none", alpha=1.0, beta=0.0, opt_level=3) -> np.ndarray:
    """`out = act(alpha * a @ b + bias + beta * out)` for 2-D float32 arrays (views with any strides); `row_bias`
    (one per row of out, `cuvil_sgemm_row_bias`) instead of `bias` (one per column)."""
    a, rsa, csa = _matrix(a, "a")
    b, rsb, csb = _matrix(b, "b")
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k:
        raise ShapeError(f"sgemm: a is {a.shape} but b is {b.shape}")
    if bias is not None and row_bias is not None:
        raise ShapeError("sgemm: give bias (per column) or row_bias (per row), not both")
    lib, c = load(opt_level), _output(out, (m, n))
    entry, bias = (lib.cuvil_sgemm, _bias(bias, n)) if row_bias is None else (lib.cuvil_sgemm_row_bias,
                                                                             _bias(row_bias, m))
    entry(m, n, k, alpha, a.ctypes.data, rsa, csa, b.ctypes.data, rsb, csb, beta, c.ctypes.data, c.strides[0] // 4,
          _ptr_of(bias), _act(act))
    return c


class PackedB:
    """A constant right operand packed once for `sgemm_packed` (the layout belongs to the loaded library)."""

    def __init__(self, b, opt_level: int = 3):
        b, rsb, csb = _matrix(b, "b")
        self.k, self.n = b.shape
        self.opt_level = opt_level
        lib = load(opt_level)
        self.data = aligned_empty(lib.cuvil_sgemm_packed_size(self.k, self.n))
        lib.cuvil_sgemm_pack_b(self.k, self.n, b.ctypes.data, rsb, csb, self.data.ctypes.data)


def sgemm_packed(a, packed: PackedB, out=None, *, bias=None, act="none", alpha=1.0, beta=0.0) -> np.ndarray:
    """`sgemm` with a right operand packed by `PackedB`."""
    a, rsa, csa = _matrix(a, "a")
    m, k = a.shape
    if k != packed.k:
        raise ShapeError(f"sgemm_packed: a is {a.shape} but the packed operand is ({packed.k}, {packed.n})")
    c, bias = _output(out, (m, packed.n)), _bias(bias, packed.n)
    load(packed.opt_level).cuvil_sgemm_packed(m, packed.n, k, alpha, a.ctypes.data, rsa, csa,
                                              packed.data.ctypes.data, beta, c.ctypes.data, c.strides[0] // 4,
                                              _ptr_of(bias), _act(act))
    return c


def _batch_matrix(x, what: str):
    if not isinstance(x, np.ndarray) or x.ndim != 3:
        raise ShapeError(f"sgemm_batched: {what} must be a 3-D array, got {getattr(x, 'shape', type(x).__name__)}")
    if x.dtype != np.float32 or any(s % 4 for s in x.strides):
        x = aligned_array(x)
    return x, *(s // 4 for s in x.strides)


def sgemm_batched(a, b, out=None, *, bias=None, act="none", alpha=1.0, beta=0.0, opt_level=3) -> np.ndarray:
    """`out[t] = act(alpha * a[t] @ b[t] + bias + beta * out[t])`; a batch stride of 0 (broadcast_to) shares."""
    a, sa, rsa, csa = _batch_matrix(a, "a")
    b, sb, rsb, csb = _batch_matrix(b, "b")
    (batch, m, k), n = a.shape, b.shape[2]
    if b.shape[0] != batch or b.shape[1] != k:
        raise ShapeError(f"sgemm_batched: a is {a.shape} but b is {b.shape}")
    c = aligned_empty((batch, m, n)) if out is None else out
    if c.shape != (batch, m, n) or c.dtype != np.float32 or c.strides[2] != 4 or (batch > 1 and c.strides[0] == 0):
        raise ShapeError(f"sgemm_batched: out must be float32 {(batch, m, n)} with unit column stride")
    bias = _bias(bias, n)
    load(opt_level).cuvil_sgemm_batched(batch, m, n, k, alpha, a.ctypes.data, rsa, csa, sa, b.ctypes.data, rsb,
                                        csb, sb, beta, c.ctypes.data, c.strides[1] // 4, c.strides[0] // 4,
                                        _ptr_of(bias), _act(act))
    return c


def activation(x, act: str, opt_level: int = 3) -> np.ndarray:
    """`act` applied elementwise with the epilogue's vector math (for tests and as a reference point)."""
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    load(opt_level).cuvil_activation(_act(act), x.size, x.ctypes.data, y.ctypes.data)
    return y
