"""The C call path of compiled CPU functions: a small CPython extension (fastcall.c) that checks the arguments
against the signature, allocates the outputs and calls the entry, in about a microsecond instead of ctypes' five.

The extension is built once per machine, Python and NumPy with the backend's toolchain and cached like the
kernel library. Without a C compiler, Python's headers or NumPy's, `extension()` is None and calls go through
ctypes (`CUVIL_FASTCALL=0` forces that). The size checks are compiled to a stack program run by the extension:

    >>> from cuvil.ir import sym
    >>> from cuvil.ir.types import TensorType
    >>> n = sym("n")
    >>> print(describe(check_program([TensorType("f32", (n, 4))], [TensorType("f32", (2 * n,))], ["n"], [(0, 0)], [])))
    dim 0 0
    bind 0
    const 4
    dim 0 1
    eq
    const 0
    const 2
    sym 0
    mul
    add
    out 0
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import logging
import os
import sysconfig
import threading
from pathlib import Path
import numpy as np

from ...errors import CuvilError
from ...ir.symbolic import SymExpr
from . import toolchain

log = logging.getLogger("cuvil.backends.cpu")

OPCODES = ("const", "sym", "dim", "add", "mul", "floordiv", "mod", "eq", "bind", "out", "ge")  # cuvil_checks.h's enum
OP = {name: code for code, name in enumerate(OPCODES)}
STACK = 32  # cuvil_checks.h's stack depth
# The check program's interpreter, a header of the standalone runtime (found by path: no import of cuvil.runtime).
CHECKS_DIR = Path(__file__).resolve().parents[2] / "runtime" / "c"
POOL_BYTES = 64 << 20  # outputs up to this size are pooled (reused once the caller dropped them)


_EXTENSION_LOCK = threading.Lock()


def extension():
    """The loaded `cuvil_fastcall` module, or None where it cannot be built (calls then go through ctypes); one
    module whichever thread asks first (backend.prefetch's, a model's build)."""
    with _EXTENSION_LOCK:
        return _load_extension()


@functools.lru_cache(maxsize=1)
def _load_extension():
    if os.environ.get("CUVIL_FASTCALL", "1") == "0" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None  # free-threaded Python: the output pool's reference counts and the arena flag need the GIL
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        log.info("no Python.h in %s: compiled functions are called through ctypes", include)
        return None
    try:
        source = (Path(__file__).with_name("fastcall.c")).read_text()
        build = toolchain.build_library(source, name="fastcall", opt_level=2,
                                        include_dirs=[include, np.get_include(), CHECKS_DIR],
                                        depends=[CHECKS_DIR / "cuvil_checks.h"],
                                        extra_flags=(f"-DCUVIL_NUMPY_VERSION=\"{np.__version__}\"",))
        spec = importlib.util.spec_from_file_location("cuvil_fastcall", build.path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except (CuvilError, OSError, ImportError) as e:
        log.info("the C call path is unavailable (%s): compiled functions are called through ctypes", e)
        return None


extension.cache_clear = _load_extension.cache_clear  # type: ignore[attr-defined]


def caller(lib: ctypes.CDLL, const_ptrs, arg_types: list, out_types: list, symbols: list, binders: list,
           constraints: list, failure, prefix: str = "cuvil_"):
    """A `Caller` for one compiled library (its entry named `prefix` main): `caller(*arrays)` returns the outputs,
    or None when an input does not match the signature exactly (the Python path then converts or raises); it raises
    `failure(rc)` when the entry returns a nonzero code. None without the extension."""
    ext = extension()
    if ext is None:
        return None
    try:
        code = check_program(arg_types, out_types, symbols, binders, constraints)
    except _TooDeep:
        return None
    dtypes = [t.dtype.numpy for t in (*arg_types, *out_types)]
    ranks = [t.rank for t in (*arg_types, *out_types)]
    address = functools.partial(ctypes.cast, typ=ctypes.c_void_p)
    entry, arena = (address(getattr(lib, prefix + name)).value for name in ("main", "arena_bytes"))
    return ext.Caller(entry, arena,
                      ctypes.addressof(const_ptrs), len(arg_types), dtypes, ranks, len(symbols),
                      np.asarray(code, np.int64).tobytes(), failure, POOL_BYTES)


class _TooDeep(Exception):
    """A size expression that needs more stack than cuvil_checks.h has."""


def check_program(arg_types: list, out_types: list, symbols: list, binders: list, constraints: list) -> list:
    """The instructions that check every input size, bind the symbols at their `binders` sites, check the
    function's `constraints` (`Relation`s: `eq` or `ge` of their two sides) and push each output size (run by
    cuvil_checks.h)."""
    index = {name: k for k, name in enumerate(symbols)}
    code: list = []
    for k, (i, ax) in enumerate(binders):
        code += [OP["dim"], i, ax, OP["bind"], k]
    sites = set(binders)
    for i, t in enumerate(arg_types):
        for ax, d in enumerate(t.shape):
            if (i, ax) not in sites:
                code += [*_expr(d, index), OP["dim"], i, ax, OP["eq"]]
    for relation in constraints:
        code += [*_expr(relation.lhs, index), *_expr(relation.rhs, index), OP["eq" if relation.kind == "==" else "ge"]]
    at = 0
    for t in out_types:
        for d in t.shape:
            code += [*_expr(d, index), OP["out"], at]
            at += 1
    if _depth(code) > STACK:
        raise _TooDeep
    return code


def _expr(d, index: dict) -> list:
    """Postfix code for a size: a sum of coefficient * atom products."""
    if not isinstance(d, SymExpr):
        return [OP["const"], int(d)]
    code = [OP["const"], 0]
    for monomial, coeff in d.terms:
        code += [OP["const"], coeff]
        for atom in monomial:
            code += _atom(atom, index) + [OP["mul"]]
        code.append(OP["add"])
    return code


def _atom(atom, index: dict) -> list:
    if isinstance(atom, str):
        return [OP["sym"], index[atom]]
    kind, inner, k = atom
    return [*_expr(inner, index), OP["const"], k, OP["floordiv" if kind == "//" else "mod"]]


ARITY = {"const": (1, 1), "sym": (1, 1), "dim": (2, 1), "add": (0, -1), "mul": (0, -1), "floordiv": (0, -1),
         "mod": (0, -1), "eq": (0, -2), "bind": (1, -1), "out": (1, -1),
         "ge": (0, -2)}  # opcode: (operands, stack change)


def _depth(code: list) -> int:
    depth = deepest = pc = 0
    while pc < len(code):
        operands, change = ARITY[OPCODES[code[pc]]]
        depth += change
        deepest = max(deepest, depth)
        pc += 1 + operands
    return deepest


def describe(program: list) -> str:
    """The program as text, one instruction a line (for debugging a failed check)."""
    lines, pc = [], 0
    while pc < len(program):
        name = OPCODES[program[pc]]
        n = ARITY[name][0]
        lines.append(" ".join([name, *map(str, program[pc + 1:pc + 1 + n])]))
        pc += 1 + n
    return "\n".join(lines)

