"""Library emitter for FuseAttention's group (passes/attention.py): one call of `cuvil_attention` (kernels/attention.c),
whose scores stay in a thread's buffer between the two GEMMs and the softmax."""
from __future__ import annotations

from ...passes.attention import attention_parts
from .library_util import c_dim, prod

MASK_KINDS = {None: "0", "add": "CUVIL_ATTENTION_ADD", "keep": "CUVIL_ATTENTION_KEEP"}


def emit_attention(gen, op, depth: int) -> None:
    p = attention_parts(op)
    batch, rows, d = prod(p.q.type.shape[:-2]), p.q.type.shape[-2], p.q.type.shape[-1]
    keys, dv = p.k.type.shape[-1 if p.k_transposed else -2], p.v.type.shape[-1]
    q, k, v, o = gen.args_of([p.q, p.k, p.v, op.results[0]])
    mask = gen.args_of([p.mask])[0] if p.mask is not None else "NULL"
    dims = ", ".join(c_dim(x) for x in (batch, rows, keys, d, dv))
    gen.line(depth, f"cuvil_attention(&(cuvil_attention_t){{{dims}, {q}, {k}, {v}, {mask}, {MASK_KINDS[p.mask_kind]}, "
                    f"{int(p.k_transposed)}, {int(p.guarded)}, {float.hex(p.scale)}f, {o}}});")
