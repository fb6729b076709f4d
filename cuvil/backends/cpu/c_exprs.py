"""The CPU backend's C expressions: the shared elementwise table (backends/common) and the index check of cuvil_rt.h."""
from __future__ import annotations

from ..common.c_exprs import ELEMENTWISE, STORAGE, CType, c_dim, c_string, elementwise_expr, \
    is_user_elementwise, load, store_value

__all__ = ["ELEMENTWISE", "STORAGE", "CType", "c_dim", "c_string", "elementwise_expr", "index_check",
           "is_user_elementwise", "load", "store_value"]


def index_check(op, indices_ptr: str, indices_type, size) -> str:
    """The C statement that stops the call at the first of `op`'s indices (a tensor in memory) outside [-size, size)
    of its `axis` (cuvil_rt.h's cuvil_check_indices: one vectorised pass)."""
    return (f"CUVIL_TRY(cuvil_check_indices_{indices_type.dtype.value}({indices_ptr}, {c_dim(indices_type.numel)}, "
            f"{c_dim(size)}, {int(op.attrs.get('negative', True))}, {c_string(op.name)}, {c_string(str(op.loc))}, "
            f"{op.attrs['axis']}));")
