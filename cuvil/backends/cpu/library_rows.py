"""Row kernels for f32 softmax, log_softmax and layer_norm over trailing axes: one pass to reduce, one to
write, rows spread over threads. Other dtypes and axes are decomposed into loop kernels instead. Sums along a row
run in blocks of REDUCE_BLOCK floats added into a double, as the loop kernels' (a long row stays accurate)."""
from __future__ import annotations

from ...ir.core import Op
from ...ir.dtypes import DType
from .c_exprs import c_dim
from .loops import REDUCE_BLOCK, parallel_clause

ROWWISE = frozenset({"softmax", "log_softmax", "layer_norm"})

_SOFTMAX = """static void {name}(int64_t rows, int64_t cols, const float *restrict x, float *restrict y)
{{
    #pragma omp parallel for {par}
    for (int64_t r = 0; r < rows; r++) {{
        const float *restrict xr = x + r * cols;
        float *restrict yr = y + r * cols;
        float m = -INFINITY;
        #pragma omp simd reduction(max:m)
        for (int64_t j = 0; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0.0;
        for (int64_t j0 = 0; j0 < cols; j0 += {block}) {{
            const int64_t j1 = j0 + {block} < cols ? j0 + {block} : cols;
            float b = 0.0f;
            #pragma omp simd reduction(+:b)
            for (int64_t j = j0; j < j1; j++) {{ float e = cuvil_expf(xr[j] - m); {store_exp} b += e; }}
            s += b;
        }}
        {finish}
    }}
}}
"""
_SOFTMAX_FINISH = """const float inv = (float)(1.0 / s);
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] *= inv;"""
_LOG_SOFTMAX_FINISH = """const float shift = m + cuvil_logf((float)s);
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] = xr[j] - shift;"""

_LAYER_NORM = """static void layer_norm_f32(int64_t rows, int64_t cols, const float *restrict x,
                           const float *restrict scale, const float *restrict bias, float eps, float *restrict y)
{{
    #pragma omp parallel for {par}
    for (int64_t r = 0; r < rows; r++) {{
        const float *restrict xr = x + r * cols;
        float *restrict yr = y + r * cols;
        double sum = 0.0, sq = 0.0;
        for (int64_t j0 = 0; j0 < cols; j0 += {block}) {{
            const int64_t j1 = j0 + {block} < cols ? j0 + {block} : cols;
            float b = 0.0f;
            #pragma omp simd reduction(+:b)
            for (int64_t j = j0; j < j1; j++) b += xr[j];
            sum += b;
        }}
        const float mean = (float)(sum / (double)cols);
        for (int64_t j0 = 0; j0 < cols; j0 += {block}) {{
            const int64_t j1 = j0 + {block} < cols ? j0 + {block} : cols;
            float b = 0.0f;
            #pragma omp simd reduction(+:b)
            for (int64_t j = j0; j < j1; j++) {{ float d = xr[j] - mean; b += d * d; }}
            sq += b;
        }}
        const float rstd = 1.0f / sqrtf((float)(sq / (double)cols) + eps);
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++)
            yr[j] = (xr[j] - mean) * rstd * scale[j] + (bias ? bias[j] : 0.0f);
    }}
}}
"""


def keeps(op: Op) -> bool:
    """Whether a row kernel computes `op` (f32, reducing the trailing axes)."""
    t = op.results[0].type
    if op.name not in ROWWISE or t.dtype is not DType.f32 or t.rank == 0:
        return False
    return op.name == "layer_norm" or op.attrs["axis"] == t.rank - 1


def _rows_cols(t, axis: int):
    rows, cols = 1, 1
    for i, d in enumerate(t.shape):
        rows, cols = (rows * d, cols) if i < axis else (rows, cols * d)
    return c_dim(rows), c_dim(cols)


def _softmax(gen, op: Op, depth: int) -> None:
    log = op.name == "log_softmax"
    name = f"{op.name}_f32"
    gen.helpers[name] = _SOFTMAX.format(
        name=name, par=parallel_clause("rows * cols"), block=REDUCE_BLOCK, store_exp="" if log else "yr[j] = e;",
        finish=_LOG_SOFTMAX_FINISH if log else _SOFTMAX_FINISH)
    rows, cols = _rows_cols(op.operands[0].type, op.attrs["axis"])
    x, y = gen.args_of([op.operands[0], op.results[0]])
    gen.line(depth, f"{name}({rows}, {cols}, {x}, {y});")


def _layer_norm(gen, op: Op, depth: int) -> None:
    gen.helpers["layer_norm_f32"] = _LAYER_NORM.format(par=parallel_clause("rows * cols"), block=REDUCE_BLOCK)
    rows, cols = _rows_cols(op.operands[0].type, op.attrs["axis"])
    x, scale = gen.args_of(op.operands[:2])
    bias = gen.args_of(op.operands[2:3])[0] if len(op.operands) > 2 else "NULL"
    (y,) = gen.args_of(op.results)
    gen.line(depth, f"layer_norm_f32({rows}, {cols}, {x}, {scale}, {bias}, {op.attrs['epsilon']!r}f, {y});")


EMITTERS = {"softmax": _softmax, "log_softmax": _softmax, "layer_norm": _layer_norm}
