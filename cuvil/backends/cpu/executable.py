"""Calling a compiled CPU function from Python: bind sizes, check and convert inputs, call the C entry.

Calls take the C path (fastcall.c) when it is built: it checks and binds exactly-matching NumPy inputs and
calls the entry in about a microsecond. Anything it declines (other dtypes, non-contiguous or non-array
inputs, wrong sizes) and every call without the extension take the ctypes path below, which casts or copies
what it can and raises on the rest. Its per-call work is kept small too: a binding table built once,
preallocated ctypes pointer arrays, a per-thread arena reused across calls (so concurrent calls from several
threads never share scratch).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import threading
from typing import TYPE_CHECKING

import numpy as np

from ...errors import CuvilError, IndexRangeError, ShapeError, UnsupportedError
from ...ir.core import Location
from ...ir.symbolic import evaluate, plain_symbol
from ... import mapped_pages
from . import fastcall
from .kernels import aligned_empty

if TYPE_CHECKING:  # the code generator is not imported to run a library loaded from the artifact cache
    from .codegen import CProgram

log = logging.getLogger("cuvil.backends.cpu")


def _address(a: np.ndarray) -> int:
    """The data pointer: through the buffer protocol (3x faster than `a.ctypes.data`), which needs a writable,
    non-empty buffer; `ctypes.data` otherwise."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


ERROR_INDEX = 1  # cuvil_rt.h's CUVIL_ERROR_INDEX


def call_failure(last_error, rc: int) -> CuvilError:
    """The error for a call whose entry returned `rc`, from the library's message (`last_error()`, read in the
    calling thread): an index out of range is the IndexRangeError the interpreter raises, with its location."""
    text = (last_error() or b"").decode("utf-8", "replace")
    if rc != ERROR_INDEX:
        return CuvilError(f"compiled function failed with code {rc}" + (f": {text}" if text else ""))
    message, at, loc = text.rpartition(" (at ")
    if not at or not loc.endswith(")"):
        return IndexRangeError(text)
    return IndexRangeError(message, Location(node=loc[:-1]))


def _swap_threads(lib: ctypes.CDLL):
    """The pool's cuvil_swap_call_threads that `lib`'s kernels use: an exported library's own copy, else the loaded
    kernel library's (in the process's global scope, where the model library found it); None if neither has it."""
    for where in (lib, ctypes.CDLL(None)):
        fn = getattr(where, "cuvil_swap_call_threads", None)
        if fn is not None:
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
            return fn
    return None


def binding_table(symbols, arg_types) -> list:
    """(input, axis) that binds each symbolic size."""
    table = []
    for name in symbols:
        site = next(((i, ax) for i, t in enumerate(arg_types) for ax, d in enumerate(t.shape)
                     if plain_symbol(d) == name), None)
        if site is None:
            raise CuvilError(f"symbolic size {name} is not a dimension of any input, so a call cannot bind it")
        table.append(site)
    return table


class CpuFunction:
    """The callable behind an Executable on the CPU target: NumPy arrays in, NumPy arrays out."""

    def __init__(self, program: CProgram, lib: ctypes.CDLL, constants: dict, prepared: dict | None = None,
                 prefix: str = "cuvil_"):
        self.program = program
        fn = program.function
        self.arg_types = [a.type for a in fn.args]
        self.out_types = fn.result_types
        entry = functools.partial(getattr, lib)  # the entry points are named `prefix` main, ... (docs/artifact.md)
        self._entry = entry(prefix + "main")
        self._entry.argtypes = [ctypes.c_void_p] * 5
        self._entry.restype = ctypes.c_int
        self._arena_bytes = entry(prefix + "arena_bytes")
        self._arena_bytes.argtypes = [ctypes.c_void_p]
        self._arena_bytes.restype = ctypes.c_int64
        lib.cuvil_last_error.restype = ctypes.c_char_p
        self._failure = functools.partial(call_failure, lib.cuvil_last_error)  # holds the library, not self
        self._binders = binding_table(program.symbols, self.arg_types)
        self._constraints = list(fn.constraints)
        # None: a constant a .cuv left out because only prepare reads it and its prepared forms are saved
        self._consts = [None if constants[name] is None else np.ascontiguousarray(constants[name])
                        for name in program.constants]
        saved = prepared or {}
        self.prepared = self._prepared_buffers(entry(prefix + "packed_count"), entry(prefix + "packed_bytes"), saved)
        source = entry(prefix + "packed_source")
        source.argtypes, source.restype = [ctypes.c_int64], ctypes.c_int64
        for j in range(len(self.prepared)):  # before any prepare: what it reads must be there
            src = int(source(j))
            if j not in saved and not (0 <= src < len(self._consts) and self._consts[src] is not None):
                raise ValueError(f"prepared buffer {j} is neither saved nor made from a stored constant ({src})")
        self._consts += self.prepared
        self._const_ptrs = (ctypes.c_void_p * max(len(self._consts), 1))(
            *[None if c is None else c.ctypes.data for c in self._consts])
        prepare = entry(prefix + "prepare")
        prepare.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        for j in range(len(self.prepared)):
            if j not in saved:
                prepare(self._const_ptrs, j)
                mapped_pages.release(self._consts[int(source(j))])  # packed: its pages mapped from a model file can go
        self._data = list(program.data_sizes)  # the sizes the call computes, written after the input sizes in dims
        self._static = not program.symbols and not self._data
        self._fast_path_tables()
        self._local = threading.local()
        self._sizes: dict = {}
        # The C path alone: exactly-matching NumPy arrays in, the outputs out; None where they do not match.
        self.call_exact = None if self._data else fastcall.caller(
            lib, self._const_ptrs, self.arg_types, self.out_types, self.program.symbols, self._binders,
            self._constraints, self._failure, prefix)
        self._swap_threads = _swap_threads(lib)
        self.num_threads = 0  # this function's thread count; 0: the process's (CUVIL_NUM_THREADS, the cores)

    def set_num_threads(self, n: int) -> None:
        """Run this function's kernels on `n` threads (0: the process's count), whatever other functions use."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"num_threads must be a non-negative int, got {n!r}")
        if self._swap_threads is None:
            raise CuvilError("this compiled library has no per-function thread count (built before Cuvil had one)")
        self.num_threads = n
        if self.call_exact is not None:
            self.call_exact.set_threads(n, ctypes.cast(self._swap_threads, ctypes.c_void_p).value)

    @staticmethod
    def _prepared_buffers(packed_count, packed_bytes, saved: dict) -> list:
        """The buffers cuvil_prepare derives from weights once (GEMM panels, Winograd transforms): new ones for
        it to fill, except those in `saved` (index -> array made by an earlier load of the same library, which
        the artifact cache keeps), which must have the sizes the library asks for."""
        packed_bytes.argtypes = [ctypes.c_int64]
        packed_bytes.restype = packed_count.restype = ctypes.c_int64
        sizes = [max(int(packed_bytes(j)), 64) for j in range(int(packed_count()))]
        if any(j >= len(sizes) or a.nbytes != sizes[j] or a.ctypes.data % 64 for j, a in saved.items()):
            raise ValueError(f"saved prepared buffers {[(j, a.nbytes) for j, a in saved.items()]} do not fit the "
                             f"library's sizes {sizes} (64-byte aligned)")
        return [np.ascontiguousarray(saved[j]) if j in saved else aligned_empty(n, np.uint8)
                for j, n in enumerate(sizes)]

    # -- a call ------------------------------------------------------------------------------------
    def _fast_path_tables(self) -> None:
        """What the per-call checks compare against, computed once."""
        self._np_dtypes = [t.dtype.numpy for t in self.arg_types]
        self._static_shapes = [tuple(t.shape) if t.is_static else None for t in self.arg_types]
        self._out_dtypes = [t.dtype.numpy for t in self.out_types]
        self._out_static = [tuple(t.shape) if t.is_static else None for t in self.out_types]

    def __call__(self, inputs: list) -> list:
        if self.call_exact is not None:
            outs = self.call_exact(*inputs)
            if outs is not None:
                return outs
        return self.call_ctypes(inputs)

    def call_ctypes(self, inputs: list) -> list:
        """The call without the C path: converts inputs where it can, raises on the rest."""
        arrays, dims, shapes = self._bind(inputs)
        if self._data:
            return self._call_sized(arrays, dims)
        outs = [np.empty(s, dt) for s, dt in zip(shapes, self._out_dtypes)]
        self._invoke(arrays, outs, dims)
        return outs

    def _call_sized(self, arrays: list, dims: tuple) -> list:
        """A call that computes sizes: each output is allocated at its upper bound, and returned at the size the call
        wrote into dims (a view of the bound buffer's front, where the kernel packed it)."""
        env = dict(zip(self.program.symbols, dims))
        bound = {**env, **{s: evaluate(b, env) for s, b in self.program.data_sizes.items()}}
        outs = [np.empty(evaluate(t.numel, bound), dt) for t, dt in zip(self.out_types, self._out_dtypes)]
        self._invoke(arrays, outs, dims)
        env.update(self.found_sizes())
        shapes = [tuple(evaluate(d, env) for d in t.shape) for t in self.out_types]
        return [o[:int(np.prod(s))].reshape(s) for o, s in zip(outs, shapes)]

    def found_sizes(self) -> dict:
        """The data-dependent sizes (symbol -> value) that this thread's last call computed."""
        written, base = self._thread_state().dims, len(self.program.symbols)
        return {s: int(written[base + k]) for k, s in enumerate(self._data)}

    def call_into(self, inputs: list, outs: list, workspace=None) -> list:
        """The call with the caller's output arrays (C-contiguous, writable, of the output dtypes and sizes, apart
        from every input): written in place, nothing allocated for them. `workspace(nbytes)`, if given, returns the
        call's scratch (a 64-byte aligned uint8 array; a Runtime's memory pool) instead of the thread's own."""
        if self._data:
            raise UnsupportedError("call_into needs output buffers of known sizes, but this function computes the "
                                   f"sizes {', '.join(self._data)} from the data; call it instead")
        arrays, dims, shapes = self._bind(inputs)
        if len(outs) != len(shapes):
            raise ShapeError(f"the compiled function has {len(shapes)} outputs, got {len(outs)} output buffers")
        for j, (o, shape, dt) in enumerate(zip(outs, shapes, self._out_dtypes)):
            if type(o) is not np.ndarray or o.dtype != dt or o.shape != tuple(shape) or not o.flags.c_contiguous \
                    or not o.flags.writeable:
                raise ShapeError(f"output buffer {j} must be a writable C-contiguous {np.dtype(dt).name} array of "
                                 f"shape {tuple(shape)}, got {getattr(o, 'dtype', type(o).__name__)} "
                                 f"{getattr(o, 'shape', '')}")
            if any(np.may_share_memory(o, x) for x in (*arrays, *outs[:j])):
                raise ShapeError(f"output buffer {j} overlaps an input or another output")
        self._invoke(arrays, outs, dims, workspace)
        return outs

    def _bind(self, inputs: list) -> tuple:
        """The inputs converted (or refused), the symbols' values and the output shapes."""
        if len(inputs) != len(self.arg_types):
            raise ShapeError(f"the compiled function takes {len(self.arg_types)} inputs, got {len(inputs)}")
        arrays = []
        for i, x in enumerate(inputs):
            a = x if type(x) is np.ndarray else np.asarray(x)
            want = self._static_shapes[i]
            if a.dtype is not self._np_dtypes[i] or not a.flags.c_contiguous or (
                    a.shape != want if want is not None else a.ndim != self.arg_types[i].rank):
                a = self._prepare(i, a)
            arrays.append(a)
        dims = tuple(arrays[i].shape[ax] for i, ax in self._binders)
        if self._static:
            return arrays, dims, self._out_static
        env = dict(zip(self.program.symbols, dims))
        self._check_sizes(arrays, env)
        if self._data:
            return arrays, dims, None  # known after the call
        return arrays, dims, [s if s is not None else tuple(evaluate(d, env) for d in t.shape)
                              for s, t in zip(self._out_static, self.out_types)]

    def _invoke(self, arrays: list, outs: list, dims: tuple, workspace=None) -> None:
        state = self._thread_state()
        scratch = None if workspace is None else self._scratch(state, dims, workspace)  # alive through the call
        arena = self._arena(state, dims) if scratch is None else scratch.ctypes.data
        args, out_ptrs = state.args, state.outs
        for k, a in enumerate(arrays):
            args[k] = _address(a)
        for k, o in enumerate(outs):
            out_ptrs[k] = _address(o)
        if dims:
            state.dims[:len(dims)] = dims
        if self.num_threads:
            before = self._swap_threads(self.num_threads)
            try:
                rc = self._entry(args, out_ptrs, state.dims, arena, self._const_ptrs)
            finally:
                self._swap_threads(before)
        else:
            rc = self._entry(args, out_ptrs, state.dims, arena, self._const_ptrs)
        if rc != 0:
            raise self._failure(rc)

    def _prepare(self, i: int, x) -> np.ndarray:
        t = self.arg_types[i]
        a = np.asarray(x)
        if a.dtype != t.dtype.numpy:
            if not np.can_cast(a.dtype, t.dtype.numpy, "same_kind"):
                raise ShapeError(f"input {i} must have element type {t.dtype}, got {a.dtype}")
            log.debug("input %d: casting %s to %s", i, a.dtype, t.dtype)
            a = a.astype(t.dtype.numpy)
        if a.ndim != t.rank:
            raise ShapeError(f"input {i} must have rank {t.rank} ({t}), got shape {a.shape}")
        for ax, d in enumerate(t.shape):
            if isinstance(d, int) and a.shape[ax] != d:
                raise ShapeError(f"input {i} must have shape {t}, got {a.shape}")
        if not a.flags.c_contiguous:
            log.debug("input %d: copying a non-contiguous array", i)
            a = np.ascontiguousarray(a)
        return a

    def _check_sizes(self, arrays: list, env: dict) -> None:
        for i, (t, a) in enumerate(zip(self.arg_types, arrays)):
            for ax, d in enumerate(t.shape):
                if evaluate(d, env) != a.shape[ax]:
                    raise ShapeError(f"input {i} must have shape {t} = "
                                     f"{tuple(evaluate(e, env) for e in t.shape)}, got {a.shape}")
        for relation in self._constraints:  # before any native code runs: kernels rely on them
            if not relation.holds(env):
                raise relation.failure(env)

    def _thread_state(self):
        state = self._local
        if not hasattr(state, "args"):
            state.args = (ctypes.c_void_p * max(len(self.arg_types), 1))()
            state.outs = (ctypes.c_void_p * max(len(self.out_types), 1))()
            state.dims = (ctypes.c_int64 * max(len(self.program.symbols) + len(self._data), 1))()
            state.arena, state.arena_ptr, state.arena_dims = None, None, None
        return state

    def _arena(self, state, dims: tuple) -> int:
        if state.arena is not None and state.arena_dims == dims:
            return state.arena_ptr
        size = self._arena_size(state, dims)
        if state.arena is None or state.arena.nbytes < size:
            state.arena = aligned_empty(max(size, 64), np.uint8)
            state.arena_ptr = state.arena.ctypes.data
        state.arena_dims = dims
        return state.arena_ptr

    def _arena_size(self, state, dims: tuple) -> int:
        size = self._sizes.get(dims)
        if size is None:
            state.dims[:len(dims)] = dims
            size = self._sizes[dims] = int(self._arena_bytes(state.dims))
        return size

    def _scratch(self, state, dims: tuple, workspace) -> np.ndarray:
        size = max(self._arena_size(state, dims), 64)
        scratch = workspace(size)
        if scratch.dtype != np.uint8 or scratch.nbytes < size or scratch.ctypes.data % 64:
            raise CuvilError(f"the workspace given for this call must be {size} 64-byte aligned bytes, got "
                             f"{scratch.nbytes} {scratch.dtype} at offset {scratch.ctypes.data % 64}")
        return scratch

    def arena_bytes(self, *inputs) -> int:
        """The arena size the plan needs for these inputs' sizes."""
        env = {s: np.shape(inputs[i])[ax] for s, (i, ax) in zip(self.program.symbols, self._binders)}
        return self.program.plan.arena_bytes(env)
