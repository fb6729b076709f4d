"""Ops the CPU backend computes with its kernel library or a dedicated generated loop, keyed by op name.

Each emitter gets the code generator, the op and the indentation depth, and appends the call.
"""
from __future__ import annotations

from ...ir.dtypes import DType
from .c_exprs import STORAGE, CType, c_dim


def _matmul(gen, op, depth: int) -> None:
    a, b = op.operands
    out = op.results[0]
    m, k = a.type.shape[-2:]
    n = b.type.shape[-1]
    batch = c_dim(_prod(out.type.shape[:-2]))
    sa = c_dim(m * k) if a.type.rank > 2 else "0"
    sb = c_dim(k * n) if b.type.rank > 2 else "0"
    pa, pb, pc = gen.args_of([a, b, out])
    if out.type.dtype is DType.f32:
        gen.line(depth, f"cuvil_sgemm_batched({batch}, {c_dim(m)}, {c_dim(n)}, {c_dim(k)}, 1.0f, {pa}, {c_dim(k)}, 1, "
                        f"{sa}, {pb}, {c_dim(n)}, 1, {sb}, 0.0f, {pc}, {c_dim(n)}, {c_dim(m * n)}, NULL, 0);")
        return
    t = CType(out.type.dtype)
    name = f"matmul_{out.type.dtype.value}"
    gen.helpers[name] = _naive_matmul(name, out.type.dtype, t)
    gen.line(depth, f"{name}({batch}, {c_dim(m)}, {c_dim(n)}, {c_dim(k)}, {pa}, {sa}, {pb}, {sb}, {pc});")


def _naive_matmul(name: str, dtype: DType, t: CType) -> str:
    s = STORAGE[dtype]
    from .c_exprs import load, store_value
    return f"""static void {name}(int64_t batch, int64_t M, int64_t N, int64_t K, const {s} *A, int64_t sa,
                         const {s} *B, int64_t sb, {s} *C)
{{
    for (int64_t t = 0; t < batch; t++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {{
                {t.name} acc = 0;
                for (int64_t p = 0; p < K; p++)
                    acc += {load(dtype, "A", "t * sa + i * K + p")} * {load(dtype, "B", "t * sb + p * N + j")};
                C[t * M * N + i * N + j] = {store_value(dtype, "acc")};
            }}
}}
"""


def _shape_of(gen, op, depth: int) -> None:
    (out,) = gen.args_of(op.results)
    for i, d in enumerate(op.operands[0].type.shape):
        gen.line(depth, f"{out}[{i}] = {c_dim(d)};")


def _prod(dims):
    n = 1
    for d in dims:
        n = n * d
    return n


EMITTERS = {"matmul": _matmul, "shape_of": _shape_of}
