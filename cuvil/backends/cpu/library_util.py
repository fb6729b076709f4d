"""Shared pieces of the library emitters (library_conv, library_misc, library_resize): sizes as C, the
outer/axis/inner split of ops along one axis, loop nests, and how each dtype is accumulated."""
from __future__ import annotations

import re

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
    sizes = [f"(({count}) * (int64_t)sizeof({ctype}) + 63) / 64 * 64" for _, ctype, count in parts]
    gen.line(depth, f"uint8_t *scratch = {gen.scratch(' + '.join(sizes), 'uint8_t')};")
    for (name, ctype, _), size in zip(parts, sizes):
        gen.line(depth, f"{ctype} *restrict {name} = ({ctype} *)scratch;")
        gen.line(depth, f"scratch += {size};")


_HELPER_HEAD = re.compile(r"static void (\w+)\(([^)]*)\)\n\{\n", re.S)
_POOLED_PRAGMA = re.compile(r"^    #pragma omp parallel for if\(\((.*)\) >= \d+\) "
                            r"num_threads\(cuvil_get_num_threads\(\)\) schedule\(static\)$")
_POOLED_LOOP = re.compile(r"^    for \(int64_t (\w+) = 0; \1 < (.*); \1\+\+\) \{$")


def pooled_helper(text: str) -> str:
    """A library helper whose one threaded loop (`#pragma omp parallel for` + parallel_clause over `for (int64_t v = 0;
    v < n; v++)` at the function's top level) runs on Cuvil's pool instead: the loop moves into `NAME_range(args, lo_,
    hi_)`, which recomputes the helper's prologue (side-effect-free locals) and runs iterations [lo_, hi_). Helpers
    of any other shape come back unchanged (OpenMP)."""
    head = _HELPER_HEAD.match(text)
    lines = text[head.end():].split("\n") if head else []
    marks = [k for k, line in enumerate(lines) if "omp parallel" in line]
    if len(marks) != 1 or not _POOLED_PRAGMA.match(lines[marks[0]]) or marks[0] + 1 >= len(lines):
        return text
    at = marks[0]
    total, loop = _POOLED_PRAGMA.match(lines[at]).group(1), _POOLED_LOOP.match(lines[at + 1])
    end = next((k for k in range(at + 2, len(lines)) if lines[k] == "    }"), None)
    if loop is None or end is None:
        return text
    name, var, bound = head.group(1), loop.group(1), loop.group(2)
    params = [p.strip() for p in head.group(2).replace("\n", " ").split(",")]
    names = [re.search(r"(\w+)$", p).group(1) for p in params]
    fields = "".join(f" {p.replace('restrict ', '')};" for p in params)
    unpack = "".join(f"    {p} = a_->{n};\n" for p, n in zip(params, names))
    prologue, body, rest = lines[:at], lines[at + 2:end + 1], lines[end + 1:]
    unused = "    (void)" + ", (void)".join(names) + ";\n"
    return (f"typedef struct {{{fields} }} {name}_args;\n"
            f"static int {name}_range(void *p_, int64_t lo_, int64_t hi_)\n{{\n"
            f"    const {name}_args *a_ = p_;\n{unpack}{unused}" + "\n".join(prologue) + "\n"
            f"    for (int64_t {var} = lo_; {var} < hi_; {var}++) {{\n" + "\n".join(body) + "\n    return 0;\n}\n"
            f"static void {name}({head.group(2)})\n{{\n" + "\n".join(prologue) + "\n"
            f"    {name}_args a_ = {{{', '.join(names)}}};\n"
            f"    const int64_t items_ = {bound};\n"
            f"    cuvil_parallel_for(items_, items_ > 0 ? ({total}) / items_ : 0, {name}_range, &a_);\n"
            + "\n".join(rest))
