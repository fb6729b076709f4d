"""CUDA C for one `fused` group of kind "loop" or "reduce": the shared index layer (backends/common) rendered
as a kernel over the group's domain.

A pointwise group is one thread per output element in a grid-stride loop; the flat thread index is split into the
loop variables of `DomainRefiner` (or the output's axes), so each data-movement op maps whole variables, as in the CPU
loop nest. A reduce group is either one block per output element (the block's threads stride over the reduced
elements, then combine through warp shuffles and one shared-memory step: a block reduction) or, for short reductions
with many outputs, one thread per output element. A gather's index outside its axis reads element 0 instead and
records the op's error code in the run's error word (cuvil_fail), which the host turns into an IndexRangeError.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.core import Op, Value
from ...ir.dtypes import DType
from ..common.c_exprs import STORAGE, CType, c_dim, elementwise_expr, load, store_value
from ..common.index import INDEX_OPS, REDUCE_COMBINE, REDUCE_INIT, DomainRefiner, Idx, ValueEmitter, kernel_symbols, \
    reduce_init, wrapped_index

BLOCK = 256  # threads a block; every kernel is built with __launch_bounds__(BLOCK)
MAX_GRID = 1 << 16  # blocks a launch at most: grid-stride loops cover the rest
THREAD_REDUCE_MAX = 256  # a static reduction of at most this many elements runs one thread per output ...
THREAD_REDUCE_MIN_OUTPUTS = 2048  # ... when it has at least this many outputs
CUDA_STORAGE = {**STORAGE, DType.f16: "uint16_t"}  # f16 travels as its bits (cuvil_cuda.h converts)


@dataclass
class KernelLaunch:
    """How the host launches a kernel: `blocks_for` the element count `work` (a Dim), `params` the kinds of its
    parameters in order ("in", "out": device pointers; "err": the error word; "sym": an int64 size)."""

    name: str
    work: object
    per_block: int  # elements a block covers before the grid-stride loop repeats (1: one block per element)
    params: list
    shared_bytes: int = 0
    threads: int = BLOCK  # threads a block (at most the kernel's __launch_bounds__)

    def grid(self, work: int) -> int:
        return max(1, min(MAX_GRID, -(-work // self.per_block)))


class CudaKernel(ValueEmitter):
    """The CUDA C of one fused loop or reduce group; `error_code(gather op)` numbers its checked gathers."""

    def __init__(self, op: Op, name: str, error_code):
        self.op, self.name, self.error_code = op, name, error_code
        region = op.regions[0]
        self.args = region.args
        self.arg_index = {id(a): i for i, a in enumerate(region.args)}
        self.outputs = list(region.terminator.operands)
        self.gathers = [o for o in region.ops if o.name == "gather"]
        self.lines: list[str] = []
        self.memo: list[dict] = [{}]
        self.counter = 0
        self.reduce_op = next((o for o in region.ops if o.name in REDUCE_INIT), None) \
            if op.attrs["kind"] == "reduce" else None
        types = [a.type for a in self.args] + [v.type for v in self.outputs]
        if self.reduce_op is not None:
            types.append(self.reduce_op.operands[0].type)
        self.symbols = kernel_symbols(op, types)

    # -- the hooks of the shared index layer -----------------------------------------------------------
    def _line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def load_input(self, v: Value, flat: str) -> str:
        ptr = f"in{self.arg_index[id(v)]}"
        return f"cuvil_f16_to_f32({ptr}[{flat}])" if v.type.dtype is DType.f16 else load(v.type.dtype, ptr, flat)

    def elementwise(self, op: Op, operands: list) -> str:
        src = op.operands[0].type.dtype
        if op.name == "cast" and op.attrs["dtype"] is DType.f16 and src is not DType.f16:  # round to f16 here
            return f"cuvil_f16_to_f32(cuvil_f32_to_f16((float)({operands[0]})))"
        return elementwise_expr(op.name, operands, op.attrs, op.operands[-1].type.dtype)

    def checked_index(self, op: Op, raw: str, axis: int, size: str, depth: int) -> str:
        """`raw` counted from the end when negative; outside the axis it records the op's code and reads 0."""
        j = f"t{self.counter}"
        self.counter += 1
        self._line(depth, f"const int64_t {j} = {wrapped_index(op, raw, size)};")
        inside = f"((uint64_t){j} < (uint64_t){size})"
        self._line(depth, f"if (!{inside}) cuvil_fail(cuvil_err, {self.error_code(op)}, (int64_t){raw});")
        return f"({inside} ? {j} : 0)"

    # -- the kernel ------------------------------------------------------------------------------------
    def emit(self) -> tuple[str, KernelLaunch]:
        params = [f"const {CUDA_STORAGE[a.type.dtype]} *__restrict__ in{i}" for i, a in enumerate(self.args)]
        params += [f"{CUDA_STORAGE[v.type.dtype]} *__restrict__ out{i}" for i, v in enumerate(self.outputs)]
        kinds = ["in"] * len(self.args) + ["out"] * len(self.outputs)
        if self.gathers:
            params.append("int *__restrict__ cuvil_err")
            kinds.append("err")
        params += [f"int64_t s_{s}" for s in self.symbols]
        kinds += [("sym", s) for s in self.symbols]
        self._empty_axis_guard()
        if self.reduce_op is None:
            launch = self._pointwise()
        elif self._thread_per_output():
            launch = self._reduce_per_thread()
        else:
            launch = self._reduce_per_block()
        launch.params = kinds
        head = f'extern "C" __global__ void __launch_bounds__({BLOCK}) {self.name}({", ".join(params)})'
        return head + "\n{\n" + "\n".join(self.lines) + "\n}\n", launch

    def _empty_axis_guard(self) -> None:
        """A gather from an empty axis has no element to read instead: fail before any load."""
        for o in self.gathers:
            size = o.operands[0].type.shape[o.attrs["axis"]]
            if not (isinstance(size, int) and size > 0):
                self._line(1, f"if ({c_dim(size)} <= 0) {{ if (blockIdx.x == 0 && threadIdx.x == 0) "
                              f"cuvil_fail(cuvil_err, {self.error_code(o)}, CUVIL_NO_INDEX); return; }}")

    def _pointwise(self) -> KernelLaunch:
        shape = self.outputs[0].type.shape
        numel = self.outputs[0].type.numel
        self._line(1, f"const int64_t n = {c_dim(numel)};")
        self._line(1, "for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
                      "i += (int64_t)gridDim.x * blockDim.x) {")
        needs_axes = len(shape) > 1 and any(o.name in INDEX_OPS for o in self.op.regions[0].ops)
        sizes = DomainRefiner(self.outputs, self.arg_index).factor_sizes() if needs_axes else None
        if not needs_axes:
            idx = Idx(shape, ("i",) if len(shape) == 1 else None, "i")
        elif sizes:
            names = [f"i{k}" for k in range(len(sizes))]
            self._split_index("i", names, sizes, 2)
            idx = Idx(shape, None, "i", tuple(zip(names, sizes)))
        else:
            names = [f"i{k}" for k in range(len(shape))]
            self._split_index("i", names, shape, 2)
            idx = Idx(shape, tuple(names), "i")
        self._store_outputs(idx, 2)
        self._line(1, "}")
        return KernelLaunch(self.name, numel, BLOCK, [])

    def _split_index(self, flat: str, names: list, sizes, depth: int) -> None:
        """Coordinates `names` (extents `sizes`, outermost first) of flat index `flat`."""
        stride = None
        for name, size in reversed(list(zip(names, sizes))):
            base = flat if stride is None else f"({flat} / {stride})"
            self._line(depth, f"const int64_t {name} = {base} % {c_dim(size)};" if name != names[0] or stride is None
                       else f"const int64_t {name} = {base};")
            stride = c_dim(size) if stride is None else f"({stride} * {c_dim(size)})"

    def _store_outputs(self, idx: Idx, depth: int) -> None:
        for i, v in enumerate(self.outputs):
            at = idx if v.type.shape == idx.shape else Idx(v.type.shape, None, idx.get_flat(), idx.factors)
            expr = self.value(v, at, depth)
            stored = f"cuvil_f32_to_f16({expr})" if v.type.dtype is DType.f16 else store_value(v.type.dtype, expr)
            self._line(depth, f"out{i}[{idx.get_flat()}] = {stored};")

    # -- reductions ------------------------------------------------------------------------------------
    def _reduce_parts(self) -> tuple:
        """(kept axes, reduced axes, output element count, reduced element count) of the reduction."""
        src = self.reduce_op.operands[0].type
        reduced = set(self.reduce_op.attrs["axes"])
        kept = [k for k in range(src.rank) if k not in reduced]
        red = sorted(reduced)
        n_red = 1
        for k in red:
            n_red = n_red * src.shape[k]
        return kept, red, self.reduce_op.results[0].type.numel, n_red

    def _thread_per_output(self) -> bool:
        _, _, n_out, n_red = self._reduce_parts()
        return isinstance(n_red, int) and n_red <= THREAD_REDUCE_MAX and isinstance(n_out, int) and \
            n_out >= THREAD_REDUCE_MIN_OUTPUTS

    def _axes_of(self, flat: str, axes: list, prefix: str, depth: int) -> dict:
        src = self.reduce_op.operands[0].type
        names = [f"{prefix}{k}" for k in axes]
        if names:
            self._split_index(flat, names, [src.shape[k] for k in axes], depth)
        return dict(zip(axes, names))

    def _reduce_body(self, coords: dict, acc: str, depth: int) -> None:
        """acc combined with the reduced value at `coords` (axis -> C expression)."""
        red = self.reduce_op
        src = red.operands[0].type
        idx = Idx(src.shape, tuple("0" if src.shape[k] == 1 else coords[k] for k in range(src.rank)))
        self.memo.append({})
        x = self.value(red.operands[0], idx, depth)
        self.memo.pop()
        self._line(depth, f"{acc} = {REDUCE_COMBINE[red.name].format(a=acc, x=x)};")

    def _epilogue(self, kept: dict, depth: int) -> None:
        """The group's outputs at the output element, the reduction's result being `acc`."""
        red = self.reduce_op
        src, out_t = red.operands[0].type, red.results[0].type
        out_axes = tuple(kept[k] if k in kept and src.shape[k] != 1 else "0" for k in range(src.rank)
                         if k in kept or red.attrs["keepdims"])
        out_idx = Idx(out_t.shape, out_axes, "o")
        self.memo.append({(id(red.results[0]), out_axes): "acc", (id(red.results[0]), "o"): "acc"})
        self._store_outputs(out_idx, depth)
        self.memo.pop()

    def _reduce_per_thread(self) -> KernelLaunch:
        kept, red, n_out, n_red = self._reduce_parts()
        ct = CType(self.reduce_op.results[0].type.dtype)
        self._line(1, f"const int64_t n_out = {c_dim(n_out)}, n_red = {c_dim(n_red)};")
        self._line(1, "for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; "
                      "o += (int64_t)gridDim.x * blockDim.x) {")
        kept_coords = self._axes_of("o", kept, "k", 2)
        self._line(2, f"{ct.name} acc = {reduce_init(self.reduce_op.name, self.reduce_op.results[0].type.dtype)};")
        self._line(2, "for (int64_t r = 0; r < n_red; r++) {")
        self._reduce_body({**kept_coords, **self._axes_of("r", red, "r", 3)}, "acc", 3)
        self._line(2, "}")
        self._epilogue(kept_coords, 2)
        self._line(1, "}")
        return KernelLaunch(self.name, n_out, BLOCK, [])

    def _reduce_per_block(self) -> KernelLaunch:
        kept, red, n_out, n_red = self._reduce_parts()
        dtype = self.reduce_op.results[0].type.dtype
        ct, init = CType(dtype), reduce_init(self.reduce_op.name, dtype)
        combine = REDUCE_COMBINE[self.reduce_op.name]
        self._line(1, f"__shared__ {ct.name} cuvil_part[{BLOCK // 32}];")
        self._line(1, f"const int64_t n_out = {c_dim(n_out)}, n_red = {c_dim(n_red)};")
        self._line(1, "for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {")
        kept_coords = self._axes_of("o", kept, "k", 2)
        self._line(2, f"{ct.name} acc = {init};")
        self._line(2, "for (int64_t r = threadIdx.x; r < n_red; r += blockDim.x) {")
        self._reduce_body({**kept_coords, **self._axes_of("r", red, "r", 3)}, "acc", 3)
        self._line(2, "}")
        self._line(2, block_reduce("acc", ct.name, init, combine))
        self._line(2, "if (threadIdx.x == 0) {")
        self._epilogue(kept_coords, 3)
        self._line(2, "}")
        self._line(2, "__syncthreads();")
        self._line(1, "}")
        return KernelLaunch(self.name, n_out, 1, [], shared_bytes=0)


def warp_reduce(acc: str, ctype: str, combine: str) -> str:
    """`acc` combined across a warp (lane 0 ends with the result) by shuffles."""
    step = combine.format(a=acc, x="cuvil_o")
    return (f"for (int cuvil_d = CUVIL_WARP / 2; cuvil_d > 0; cuvil_d >>= 1) {{ const {ctype} cuvil_o = "
            f"cuvil_shfl_down({acc}, cuvil_d); {acc} = {step}; }}")


def block_reduce(acc: str, ctype: str, init: str, combine: str) -> str:
    """`acc` combined across the block (thread 0 ends with it): warp shuffles, one shared-memory step, shuffles."""
    warp = warp_reduce(acc, ctype, combine)
    return (f"{warp}\n        if ((threadIdx.x & 31) == 0) cuvil_part[threadIdx.x >> 5] = {acc};\n"
            f"        __syncthreads();\n"
            f"        if (threadIdx.x < 32) {{\n"
            f"            {acc} = threadIdx.x < ((blockDim.x + 31) >> 5) ? cuvil_part[threadIdx.x] : "
            f"({ctype})({init});\n"
            f"            {warp}\n        }}")
