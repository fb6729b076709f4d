"""Row kernels for f32 softmax, log_softmax and layer_norm over trailing axes: one block a row (grid-stride over
rows), each row's max and sums by block reductions (warp shuffles and one shared-memory step), the result broadcast
to the block through shared memory. Other dtypes and axes are decomposed into loop kernels instead."""
from __future__ import annotations

from ...ir.core import Op
from .kernels import BLOCK, KernelLaunch, block_reduce

_MAX = "CUVIL_MAX({a}, {x})"
_SUM = "{a} + {x}"


def _row_value(acc: str, name: str, combine: str = _SUM, init: str = "0") -> str:
    """`acc` reduced over the block, then read by every thread as `name`."""
    return (f"        {block_reduce(acc, 'float', init, combine)}\n"
            f"        if (threadIdx.x == 0) cuvil_row = {acc};\n        __syncthreads();\n"
            f"        const float {name} = cuvil_row;\n        __syncthreads();\n")


_HEAD = ('extern "C" __global__ void __launch_bounds__({block}) {name}(int64_t rows, int64_t cols, {params})\n{{\n'
         f"    __shared__ float cuvil_part[{BLOCK // 32}];\n    __shared__ float cuvil_row;\n"
         "    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {{\n"
         "        const float *__restrict__ xr = x + r * cols;\n        float *__restrict__ yr = y + r * cols;\n")


def _softmax_source(name: str, log: bool) -> str:
    head = _HEAD.format(block=BLOCK, name=name, params="const float *__restrict__ x, float *__restrict__ y")
    max_pass = ("        float mx = -INFINITY;\n"
                "        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mx = CUVIL_MAX(mx, xr[j]);\n")
    max_pass += _row_value("mx", "m", _MAX, "-INFINITY")
    store = "" if log else " yr[j] = e;"
    sum_pass = ("        float sm = 0.0f;\n        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) "
                f"{{ const float e = expf(xr[j] - m);{store} sm += e; }}\n") + _row_value("sm", "s")
    finish = ("        const float shift = m + logf(s);\n"
              "        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] - shift;\n") if log else \
        ("        const float inv = 1.0f / s;\n"
         "        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] *= inv;\n")
    return head + max_pass + sum_pass + finish + "    }\n}\n"


def _layer_norm_source(name: str) -> str:
    params = ("const float *__restrict__ x, const float *__restrict__ scale, const float *__restrict__ bias, "
              "float eps, float *__restrict__ y")
    head = _HEAD.format(block=BLOCK, name=name, params=params)
    mean = ("        float sm = 0.0f;\n"
            "        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sm += xr[j];\n") + _row_value("sm", "s")
    var = ("        const float mean = s / (float)cols;\n        float sq = 0.0f;\n"
           "        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) { const float d = xr[j] - mean; "
           "sq += d * d; }\n") + _row_value("sq", "v")
    finish = ("        const float rstd = 1.0f / sqrtf(v / (float)cols + eps);\n"
              "        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)\n"
              "            yr[j] = (xr[j] - mean) * rstd * scale[j] + (bias ? bias[j] : 0.0f);\n")
    return head + mean + var + finish + "    }\n}\n"


def _rows_cols(t, axis: int):
    rows, cols = 1, 1
    for i, d in enumerate(t.shape):
        rows, cols = (rows * d, cols) if i < axis else (rows, cols * d)
    return rows, cols


def emit_softmax(gen, op: Op) -> None:
    name = f"cuvil_{op.name}_f32"
    gen.helpers[name] = _softmax_source(name, op.name == "log_softmax")
    rows, cols = _rows_cols(op.operands[0].type, op.attrs["axis"])
    kinds = [("dim", rows), ("dim", cols), "in", "out"]
    gen.launch(KernelLaunch(name, rows, 1, kinds), op.operands, op.results, kinds)


def emit_layer_norm(gen, op: Op) -> None:
    name = "cuvil_layer_norm_f32"
    gen.helpers[name] = _layer_norm_source(name)
    rows, cols = _rows_cols(op.operands[0].type, op.attrs["axis"])
    bias = ["in"] if len(op.operands) > 2 else ["null"]
    kinds = [("dim", rows), ("dim", cols), "in", "in", *bias, ("f32", float(op.attrs["epsilon"])), "out"]
    gen.launch(KernelLaunch(name, rows, 1, kinds), op.operands, op.results, kinds)

