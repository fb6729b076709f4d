"""Library emitters for ops whose result size depends on the data (cuvil/ops/dynamic.py): each helper returns the
size it found, which the entry stores in that size's `s_<symbol>` for the loops after it. Results are written at
their run-time size, row-major and packed, inside buffers the memory plan sized for the upper bound."""
from __future__ import annotations

from ...ir.dtypes import DType
from .c_exprs import load
from .library_util import c_dim, storage, tag


def _nonzero_helper(name: str, dt: DType) -> str:
    """Two passes over x: count the nonzeros (the result's row length), then write each one's coordinates."""
    nz = f"{load(dt, 'x', 'i')} != 0"
    return f"""static int64_t {name}(const {storage(dt)} *x, int64_t *out, int64_t numel, const int64_t *dims, int rank)
{{
    int64_t n = 0;
    for (int64_t i = 0; i < numel; i++) n += ({nz});
    for (int64_t i = 0, j = 0; i < numel; i++) {{
        if (!({nz})) continue;
        int64_t rest = i;
        for (int a = rank - 1; a >= 0; a--) {{
            out[a * n + j] = rest % dims[a];
            rest /= dims[a];
        }}
        j++;
    }}
    return n;
}}
"""


def _nonzero(gen, op, depth: int) -> None:
    x, out = op.operands[0], op.results[0]
    name = f"nonzero_{tag(x.type.dtype)}"
    gen.helpers[name] = _nonzero_helper(name, x.type.dtype)
    px, py = gen.args_of([x, out])
    dims = ", ".join(c_dim(d) for d in x.type.shape)
    gen.line(depth, f"s_{op.attrs['size']} = {name}({px}, {py}, {c_dim(x.type.numel)}, (const int64_t[]){{{dims}}}, "
                    f"{x.type.rank});")


EMITTERS = {"nonzero": _nonzero}
