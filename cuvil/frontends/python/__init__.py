"""The Python-source frontend: `@cuvil.jit` reads a function's own source and translates it to IR.

Like a typed compiler (not a tracer), it sees every branch: types come from the first call's arguments
(NumPy arrays, torch CPU tensors, Python scalars), then the source is translated statement by statement.

    >>> import numpy as np, cuvil
    >>> @cuvil.jit
    ... def gated(x, threshold=0.5):
    ...     if x.mean() > threshold:          # a tensor condition: a `cond` in the IR
    ...         return np.maximum(x, 0.0)
    ...     return 1.0 / (1.0 + np.exp(-x))
    >>> gated(np.array([1.0, 2.0], np.float32)).tolist()
    [1.0, 2.0]

Semantics worth knowing:
- Python scalar arguments are compile-time constants: `if threshold > 0:` is decided when compiling, and
  each value gets its own compilation. Name them in `runtime_args=("threshold",)` to pass them at run time.
- `if` on a tensor becomes `cond`; a name assigned on one path only fails where it is used. `for i in
  range(n)` unrolls up to `unroll` (16) iterations, longer or run-time ranges and `while` on a tensor become
  a `while` loop; `break`, `continue` and `return` may sit under a tensor `if` inside loops. `and`/`or`/`not`
  on tensors give booleans.
- Python scalars are weakly typed (NumPy 2 / torch): `x * 2.0` keeps f32. Result dtypes are taken from the
  framework itself, so `int / int`, `np.mean` of ints and mixed dtypes promote exactly as the original.
- `x += y` rebinds x; `x[i] = v` rebinds x to an updated copy (a functional update), equal to what NumPy or
  torch leave in x. Calls to plain Python functions, methods and nn.Module objects are inlined from source.
- Globals and closure variables (arrays become constants) are read when a signature is compiled.
- Lambdas inline where they are called; `:=` and `del` bind and unbind; list methods (`append`, `pop`, ...) run
  at compile time in straight-line code and unrolled loops, and `append` in a loop that runs at run time fills a
  stacked buffer; `raise ValueError(...)` on Python values raises the user's own exception, chained from a
  CuvilError naming the line. docs/jit.md lists every construct, with what stays refused and why.
- With `dynamic=True`, a call whose sizes the symbolic compilation cannot serve (a slice bound past a size, a
  split with no symbolic form) is compiled for its own sizes, as Python would run it.

Options: `target` ("cpu"), `enable_fusion`, `dynamic` (all sizes but 0 and 1 symbolic), `dynamic_dims`
(`{"x": {0: "batch"}}`), `fallback` ("python": run the original with a warning when compilation fails),
`passes` (extra passes for `compile_module`), `runtime_args`, `unroll`, `level`, `num_threads` (this function's thread
count; default: the process's, `CUVIL_NUM_THREADS` or the physical cores).
"""
from __future__ import annotations

from typing import Callable, Optional

from .jitfunction import JitFunction


def jit(fn: Optional[Callable] = None, **options):
    """Compile `fn` from its source on first call; usable bare or as `@jit(**options)`."""
    if fn is None:
        return lambda f: jit(f, **options)
    if isinstance(fn, JitFunction):
        return JitFunction(fn.python_function, **{**fn.options, **options})
    return JitFunction(fn, **options)


__all__ = ["JitFunction", "jit"]
