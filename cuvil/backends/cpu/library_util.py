"""Shared pieces of the library emitters (library_conv, library_misc, library_resize): sizes as C, the
outer/axis/inner split of ops along one axis, loop nests, and how each dtype is accumulated."""
from __future__ import annotations

from ...ir.dtypes import DType
from .c_exprs import STORAGE, CType, c_dim
from .loops import parallel_clause

INT_MIN = {DType.i64: "INT64_MIN", DType.i32: "INT32_MIN", DType.i16: "INT16_MIN", DType.i8: "INT8_MIN",
           DType.u8: "0", DType.bool: "0"}


def prod(dims):
    n = 1
    for d in dims:
        n = n * d
    return n


def axis_split(shape, axis: int) -> tuple:
    """(outer, n, inner) as C: the sizes before `axis`, along it, and after it."""
    return c_dim(prod(shape[:axis])), c_dim(shape[axis]), c_dim(prod(shape[axis + 1:]))


def flat(coords, shape) -> str:
    """The row-major offset of C coordinates `coords` in a tensor of `shape` (Horner form)."""
    expr = "0"
    for i, (c, d) in enumerate(zip(coords, shape)):
        expr = c if i == 0 else f"({expr}) * {c_dim(d)} + {c}"
    return expr


def wide(dtype: DType) -> str:
    """The accumulator type: double for floats (references sum in float64), uint64_t for integers (wraps
    like NumPy without C's signed-overflow UB; the final cast keeps the low bits)."""
    return "double" if dtype.is_float else "uint64_t"


def par_if(work: str) -> str:
    return parallel_clause(work)


def open_loops(gen, depth: int, names, sizes, work: str | None = None) -> int:
    """Open `for` loops over `sizes`; the outer two are threaded (collapsed) when `work` is given."""
    for k, (name, size) in enumerate(zip(names, sizes)):
        if k == 0 and work is not None:
            collapse = " collapse(2)" if len(names) > 1 else ""
            gen.line(depth, f"#pragma omp parallel for{collapse} {par_if(work)}")
        gen.line(depth, f"for (int64_t {name} = 0; {name} < {c_dim(size)}; {name}++) {{")
        depth += 1
    return depth


def close_loops(gen, depth: int, count: int) -> int:
    for _ in range(count):
        depth -= 1
        gen.line(depth, "}")
    return depth


def storage(dtype: DType) -> str:
    return STORAGE[dtype]


def compute(dtype: DType) -> str:
    return CType(dtype).name


def tag(dtype: DType) -> str:
    """A helper-name suffix per storage type."""
    return dtype.value


def open_block(gen, depth: int, op, pointers: dict, note: str = "") -> int:
    """`{` with a comment naming the op (and its source location), then one named local per buffer:
    `pointers` maps a C name to a Value. Returns the depth inside the block."""
    where = f" at {op.loc}" if str(op.loc) else ""
    gen.line(depth, f"{{  /* {op.name}{note}{where} */")
    for name, v in pointers.items():
        const = "const " if v not in op.results else ""
        t = STORAGE[v.type.dtype]
        gen.line(depth + 1, f"{const}{t} *restrict {name} = ({const}{t} *){gen.args_of([v])[0]};")
    return depth + 1


def scratch_parts(gen, depth: int, parts: list) -> None:
    """Declare one pointer per part into a single scratch request (an op gets one scratch region): parts are
    (C name, C type, element count as C); each part starts on a 64-byte boundary."""
    if not parts:
        return
    sizes = [f"({count} * (int64_t)sizeof({ctype}) + 63) / 64 * 64" for _, ctype, count in parts]
    gen.line(depth, f"uint8_t *scratch = {gen.scratch(' + '.join(sizes), 'uint8_t')};")
    for (name, ctype, _), size in zip(parts, sizes):
        gen.line(depth, f"{ctype} *restrict {name} = ({ctype} *)scratch;")
        gen.line(depth, f"scratch += {size};")
