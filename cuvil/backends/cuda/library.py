"""Ops the CUDA backend computes with a dedicated kernel or with cuBLASLt, keyed by op name.

- matmul (f32, f16, bf16; batched, operands read through strides) and the fused GEMM of FuseLibraryEpilogue: a Gemm
  step for cuBLASLt, bias and relu/gelu(tanh) in its epilogue; any other activation runs as a kernel after it.
- softmax, log_softmax, layer_norm over trailing f32 rows: one block a row, block reductions (rows.py).
- conv, max_pool, avg_pool (N-d, NCHW): one thread per output element, padding read as absent; a fused conv's clamp
  is applied on the way out. A 2-D conv is a Conv step holding that kernel: cuDNN runs it when it loads (cudnn.py),
  bias and relu fused, any other epilogue as an in-place kernel after it.
- cumsum, cumprod: a thread a line along the axis; shape_of: one thread writes the dims.
- conv_bf16: the conv kernel, x rounded to bf16 on the way in, relu as its clamp.
- the rest, a thread per output element or line (elements.py): conv_transpose, einsum and the integer/f64 matmul
  (library_linalg.py), gather/scatter_elements, argmax/argmin, topk (library_index.py), resize (library_resize.py),
  tree_ensemble and the quantized ops (library_ml.py).
"""
from __future__ import annotations

import hashlib
from types import SimpleNamespace

from ...ir.core import Op
from ...ir.dtypes import DType
from ..common.c_exprs import CType, c_dim, elementwise_expr, load
from .program import Buf, Conv, Gemm
from .kernels import BLOCK, CUDA_STORAGE, KernelLaunch
from .attention import emit_attention
from .elements import grid_loop, load_as, prod, store_as
from .library_index import EMITTERS as INDEX_EMITTERS
from .library_linalg import EMITTERS as LINALG_EMITTERS, direct_matmul
from .library_ml import EMITTERS as ML_EMITTERS
from .library_resize import EMITTERS as RESIZE_EMITTERS
from .rows import emit_layer_norm, emit_softmax

CUBLASLT_DTYPES = {DType.f32: "f32", DType.f16: "f16", DType.bf16: "bf16"}
CUBLASLT_EPILOGUES = {"relu": "relu", "gelu-tanh": "gelu"}


# -- GEMMs -----------------------------------------------------------------------------------------------------
def _matmul(gen, op: Op) -> None:
    a, b = op.operands
    if op.results[0].type.dtype not in CUBLASLT_DTYPES:
        direct_matmul(gen, op, a, b, op.results[0])
        return
    _gemm(gen, (a, False), (b, False), op.results[0], None, None, op)


def _gemm(gen, a_op, b_op, out, bias, act, op: Op) -> None:
    (a, ta), (b, tb) = a_op, b_op
    dtype = out.type.dtype
    if dtype not in CUBLASLT_DTYPES:
        from ...errors import UnsupportedError
        raise UnsupportedError(f"the CUDA backend's matmul takes f32, f16 or bf16, not {dtype}", op.loc)
    m, n = out.type.shape[-2:]
    k = a.type.shape[-2] if ta else a.type.shape[-1]
    batch = prod(out.type.shape[:-2])
    epilogue = CUBLASLT_EPILOGUES.get(act, "none") if act else "none"
    (pa, pb, pc), pbias = gen.bufs([a, b, out]), gen.bufs([bias])[0] if bias is not None else None
    gen.steps.append(Gemm(pa, pb, pc, m, n, k, batch, ta, tb, m * k if a.type.rank > 2 else 0,
                          k * n if b.type.rank > 2 else 0, CUBLASLT_DTYPES[dtype], pbias, epilogue))
    if act and act not in CUBLASLT_EPILOGUES:
        _activation_in_place(gen, out, act)


def _activation_in_place(gen, out, act: str) -> None:
    """An activation cuBLASLt's epilogue lacks (sigmoid, tanh, exact gelu), applied to C after the GEMM."""
    name, _, form = act.partition("-")  # "gelu-none", "gelu-tanh": the form the op had
    _elementwise_in_place(gen, out, name, {"approximate": form} if form else {})


def _elementwise_in_place(gen, out, name: str, attrs: dict) -> None:
    """Elementwise op `name` applied to `out` in place: an epilogue a library call (cuBLASLt, cuDNN) cannot fuse."""
    t = CType(out.type.dtype)
    expr = elementwise_expr(name, [load(out.type.dtype, "c", "i")], attrs, out.type.dtype)
    tag = f"_{hashlib.sha256(repr(sorted(attrs.items())).encode()).hexdigest()[:8]}" if attrs else ""  # clip's bounds
    kname = f"cuvil_{name}{tag}_{out.type.dtype.value}_inplace"
    s = CUDA_STORAGE[out.type.dtype]
    gen.helpers[kname] = (f'extern "C" __global__ void __launch_bounds__({BLOCK}) {kname}(int64_t n, {s} *c)\n{{\n'
                          f"    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
                          f"i += (int64_t)gridDim.x * blockDim.x) {{ const {t.name} v = {expr}; c[i] = v; }}\n}}\n")
    numel = out.type.numel
    launch = KernelLaunch(kname, numel, BLOCK, [("dim", numel), "out"])
    gen.launch(launch, [], [out], launch.params)


def _fused_gemm(gen, op: Op) -> None:
    body = op.regions[0].ops[:-1]
    source = dict(zip((id(a) for a in op.regions[0].args), op.operands))
    transposed = {id(o.results[0]): source[id(o.operands[0])] for o in body if o.name == "transpose"}
    bias, act = None, None
    for inner in body:
        if inner.name == "broadcast_to":
            bias = source[id(inner.operands[0])]
        elif inner.name in ("relu", "gelu", "sigmoid", "tanh"):
            act = inner.name if inner.name != "gelu" else f"gelu-{inner.attrs['approximate']}"
    mm = next(o for o in body if o.name == "matmul")
    a, b = ((transposed[id(v)], True) if id(v) in transposed else (source[id(v)], False) for v in mm.operands)
    _gemm(gen, a, b, op.results[0], bias, act, op)


# -- convolution and pooling -----------------------------------------------------------------------------------
def _window_loops(x, kernel, strides, pads, dilations, out_sp: list, lines: list) -> list:
    """Open a loop per window axis; returns the C conditions that the input position is inside x."""
    inside = []
    s = len(kernel)
    for d in range(s):
        lines.append(f"for (int64_t w{d} = 0; w{d} < {c_dim(kernel[d])}; w{d}++) {{")
        lines.append(f"const int64_t p{d} = {out_sp[d]} * {strides[d]} + w{d} * {dilations[d]} - {pads[d]};")
        inside.append(f"p{d} >= 0 && p{d} < {c_dim(x.shape[2 + d])}")
    return inside


def _spatial_flat(x, prefix: str = "p") -> str:
    flat = "0"
    for d in range(x.rank - 2):
        flat = f"({flat}) * {c_dim(x.shape[2 + d])} + {prefix}{d}"
    return flat


def _pointwise_kernel(gen, op: Op, kname: str, params: list, body: list, ins: list, kinds: list) -> None:
    y = op.results[0].type
    head = f'extern "C" __global__ void __launch_bounds__({BLOCK}) {kname}({", ".join(params)})\n'
    loc = f" at {op.loc}" if str(op.loc) else ""
    launch = gen.add_kernel(head + grid_loop(y.shape, body), KernelLaunch(kname, y.numel, BLOCK, kinds), kname,
                            f"/* {op.name}{loc} */\n")
    gen.launch(launch, ins, op.results, kinds)


def _conv(gen, op: Op, epilogue=None) -> None:
    """The direct conv kernel; `epilogue` (op name, attrs): the elementwise op applied on the way out."""
    x, w = op.operands[0].type, op.operands[1].type
    y = op.results[0].type
    a, s = op.attrs, x.rank - 2
    t, st = CType(y.dtype), CUDA_STORAGE[y.dtype]
    has_bias = len(op.operands) > 2
    cin_g, cout_g = w.shape[1], y.shape[1] // a.get("groups", 1)
    body = [f"const int64_t g = o1 / {c_dim(cout_g)};", f"{t.name} acc = 0;",
            f"for (int64_t ci = 0; ci < {c_dim(cin_g)}; ci++) {{"]
    inside = _window_loops(x, w.shape[2:], a["strides"], a["pads"], a["dilations"],
                           [f"o{2 + d}" for d in range(s)], body)
    xi = f"((o0 * {c_dim(x.shape[1])} + g * {c_dim(cin_g)} + ci) * {c_dim(prod(x.shape[2:]))} + {_spatial_flat(x)})"
    wi = f"((o1 * {c_dim(cin_g)} + ci) * {c_dim(prod(w.shape[2:]))} + {_spatial_flat(w, 'w')})"
    xv = load_as(x.dtype, "x", xi)
    if w.dtype is DType.bf16 and x.dtype is not DType.bf16:  # conv_bf16: x rounded to bf16 as the reference does
        xv = f"cuvil_bf16_to_f32(cuvil_f32_to_bf16({xv}))"
    body.append(f"if ({' && '.join(inside)}) acc += {xv} * {load_as(w.dtype, 'wt', wi)};")
    body += ["}"] * (s + 1)
    if has_bias:
        body.append(f"acc += {load_as(y.dtype, 'bias', 'o1')};")
    if epilogue is not None:
        body.append(f"acc = {elementwise_expr(epilogue[0], ['acc'], epilogue[1], y.dtype)};")
    body.append(f"y[o] = {store_as(y.dtype, 'acc')};")
    params = [f"const {st} *__restrict__ x", f"const {CUDA_STORAGE[w.dtype]} *__restrict__ wt"] + (
        [f"const {st} *__restrict__ bias"] if has_bias else []) + [f"{st} *__restrict__ y"]
    syms = sorted(set().union(*(v.type.free_symbols for v in [*op.operands, *op.results])))
    params += [f"int64_t s_{n}" for n in syms]
    kinds = ["in"] * len(op.operands) + ["out"] + [("sym", n) for n in syms]
    _pointwise_kernel(gen, op, f"k{len(gen.kernels)}_conv", params, body, op.operands, kinds)
    if _cudnn_takes(op):
        _conv_step(gen, op, epilogue)


def _cudnn_takes(op) -> bool:
    """2-D convs with the same padding on both sides and one float type; with a bias, f32 only (cuDNN's fused bias
    and activation are f32 here: f16/bf16 with a bias keep the direct kernel)."""
    x, w, y = op.operands[0].type, op.operands[1].type, op.results[0].type
    pads = op.attrs["pads"]
    return (x.rank == 4 and tuple(pads[:2]) == tuple(pads[2:]) and x.dtype is w.dtype is y.dtype
            and y.dtype in CUBLASLT_DTYPES and (len(op.operands) == 2 or y.dtype is DType.f32))


def _is_relu(name: str, attrs: dict) -> bool:
    """relu, or the clip to [0, inf) the pipeline makes of it."""
    return name == "relu" or (name == "clip" and attrs.get("min") == 0 and attrs.get("max") == float("inf"))


def _conv_step(gen, op, epilogue) -> None:
    """Replace the direct kernel's launch just made with a Conv step that holds it (cuDNN runs when it loads)."""
    direct = gen.steps.pop()
    x, w = op.operands[:2]
    bias = op.operands[2] if len(op.operands) > 2 else None
    y = op.results[0]
    act = "relu" if bias is not None and epilogue is not None and _is_relu(*epilogue) else "none"
    mark = len(gen.steps)
    if epilogue is not None and act == "none":
        _elementwise_in_place(gen, y, *epilogue)
    after = gen.steps[mark:]
    del gen.steps[mark:]
    a = op.attrs
    gen.steps.append(Conv(*gen.bufs([x, w]), gen.bufs([bias])[0] if bias is not None else None, gen.bufs([y])[0],
                          tuple(x.type.shape), tuple(w.type.shape), tuple(y.type.shape), tuple(a["pads"][:2]),
                          tuple(a["strides"]), tuple(a["dilations"]), int(a.get("groups", 1)),
                          CUBLASLT_DTYPES[y.type.dtype], act, direct, after))


def _pool(gen, op: Op) -> None:
    x, y = op.operands[0].type, op.results[0].type
    a, s = op.attrs, x.rank - 2
    t, st = CType(y.dtype), CUDA_STORAGE[y.dtype]
    is_max = op.name == "max_pool"
    dil = a.get("dilations") or (1,) * s
    if is_max:
        lowest = "-INFINITY" if y.dtype.is_float else {DType.i8: "INT8_MIN", DType.u8: "0"}[y.dtype]
        body = [f"{t.name} acc = {lowest};"]
    else:
        body = [f"{t.name} acc = 0;", "int64_t count = 0;"]
    inside = _window_loops(x, a["kernel"], a["strides"], a["pads"], dil, [f"o{2 + d}" for d in range(s)], body)
    xi = f"((o0 * {c_dim(x.shape[1])} + o1) * {c_dim(prod(x.shape[2:]))} + {_spatial_flat(x)})"
    v = load_as(y.dtype, "x", xi)
    if is_max:
        body.append(f"if ({' && '.join(inside)}) {{ const {t.name} v = {v}; acc = CUVIL_MAX(acc, v); }}")
    else:
        counted = " && ".join(f"p{d} < {c_dim(x.shape[2 + d])} + {a['pads'][s + d]}" for d in range(s)) \
            if a["count_include_pad"] else " && ".join(inside)
        body.append(f"if ({' && '.join(inside)}) acc += {v};")
        body.append(f"if ({counted}) count++;")
    body += ["}"] * s
    if not is_max:
        body.append(f"acc = acc / ({t.name})count;")
    body.append(f"y[o] = {store_as(y.dtype, 'acc')};")
    syms = sorted(set().union(x.free_symbols, y.free_symbols))
    params = [f"const {st} *__restrict__ x", f"{st} *__restrict__ y"] + [f"int64_t s_{n}" for n in syms]
    kinds = ["in", "out"] + [("sym", n) for n in syms]
    _pointwise_kernel(gen, op, f"k{len(gen.kernels)}_{op.name}", params, body, op.operands, kinds)


def _conv_bf16(gen, op: Op) -> None:
    """x f32 rounded to bf16, w bf16, f32 accumulation (the direct conv kernel), relu as its clamp."""
    _conv(gen, op, ("relu", {}) if op.attrs["act"] == "relu" else None)


def _fused_conv(gen, op: Op) -> None:
    """conv -> clip, relu, sigmoid, tanh, gelu, silu or hardswish (FuseLibraryEpilogue's forms): the epilogue on the
    way out of the conv kernel."""
    body = op.regions[0].ops
    conv, act = body[0], body[1]
    source = dict(zip((id(a) for a in op.regions[0].args), op.operands))
    outer = SimpleNamespace(name="conv", operands=[source[id(v)] for v in conv.operands], attrs=conv.attrs,
                            results=op.results, loc=conv.loc)  # the conv as if unfused, writing the group's result
    _conv(gen, outer, (act.name, act.attrs))


# -- cumsum, cumprod -----------------------------------------------------------------------------------------
def _scan(gen, op: Op) -> None:
    """One thread per line along the axis, summing (multiplying) in double for floats or uint64 for integers
    (which wrap as NumPy's)."""
    x = op.operands[0].type
    axis = op.attrs["axis"] % x.rank
    st, wide = CUDA_STORAGE[x.dtype], "double" if x.dtype.is_float else "uint64_t"
    outer, n, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    total = store_as(x.dtype, "(float)acc" if x.dtype.is_float and x.dtype.itemsize < 8 else "acc") \
        if x.dtype.is_float else f"({st})acc"
    kname = f"cuvil_{op.name}_{x.dtype.value}"
    start, fold = ("0", "acc += v") if op.name == "cumsum" else ("1", "acc *= v")
    gen.helpers[kname] = (
        f'extern "C" __global__ void __launch_bounds__({BLOCK}) {kname}(int64_t outer, int64_t n, int64_t inner, '
        f"int exclusive, int reverse, const {st} *__restrict__ x, {st} *__restrict__ y)\n{{\n"
        "    for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < outer * inner; "
        "line += (int64_t)gridDim.x * blockDim.x) {\n"
        f"        const int64_t o = line / inner, c = line % inner;\n        {wide} acc = {start};\n"
        "        for (int64_t step = 0; step < n; step++) {\n"
        "            const int64_t at = (o * n + (reverse ? n - 1 - step : step)) * inner + c;\n"
        f"            const {wide} v = ({wide}){load_as(x.dtype, 'x', 'at')};\n"
        f"            if (!exclusive) {fold};\n            y[at] = {total};\n            if (exclusive) {fold};\n"
        "        }\n    }\n}\n")
    kinds = [("dim", outer), ("dim", n), ("dim", inner), ("i32", int(op.attrs["exclusive"])),
             ("i32", int(op.attrs["reverse"])), "in", "out"]
    gen.launch(KernelLaunch(kname, outer * inner, BLOCK, kinds), op.operands, op.results, kinds)


# -- shape_of ------------------------------------------------------------------------------------------------
def _shape_of(gen, op: Op) -> None:
    x, y = op.operands[0].type, op.results[0].type
    st = CUDA_STORAGE[y.dtype]
    syms = sorted(x.free_symbols)
    kname = f"k{len(gen.kernels)}_shape_of"
    stores = " ".join(f"y[{i}] = ({st}){c_dim(d)};" for i, d in enumerate(x.shape))
    params = [f"{st} *__restrict__ y"] + [f"int64_t s_{n}" for n in syms]
    text = (f'extern "C" __global__ void __launch_bounds__({BLOCK}) {kname}({", ".join(params)})\n{{\n'
            f"    if (blockIdx.x == 0 && threadIdx.x == 0) {{ {stores} }}\n}}\n")
    kinds = ["out"] + [("sym", n) for n in syms]
    launch = gen.add_kernel(text, KernelLaunch(kname, 1, BLOCK, kinds), kname, "/* shape_of */\n")
    gen.launch(launch, [], op.results, kinds)


def keeps(op: Op) -> bool:
    """Composite ops this backend computes itself (the decompose pass leaves them): f32 rows over trailing axes."""
    t = op.results[0].type
    if op.name not in ("softmax", "log_softmax", "layer_norm") or t.dtype is not DType.f32 or t.rank == 0:
        return False
    return op.name == "layer_norm" or op.attrs["axis"] == t.rank - 1


def emit_fused_library(gen, op: Op) -> None:
    if op.attrs["name"] == "attention":  # FuseAttention's group
        emit_attention(gen, op)
        return
    anchor = next(o.name for o in op.regions[0].ops if o.name in FUSED_EMITTERS)
    FUSED_EMITTERS[anchor](gen, op)


EMITTERS = {"matmul": _matmul, "softmax": emit_softmax, "log_softmax": emit_softmax, "layer_norm": emit_layer_norm,
            "conv": _conv, "max_pool": _pool, "avg_pool": _pool, "shape_of": _shape_of, "cumsum": _scan,
             "cumprod": _scan, "conv_bf16": _conv_bf16,
            **INDEX_EMITTERS, **LINALG_EMITTERS, **ML_EMITTERS, **RESIZE_EMITTERS}
FUSED_EMITTERS = {"matmul": _fused_gemm, "conv": _fused_conv}
__all__ = ["Buf", "EMITTERS", "FUSED_EMITTERS", "emit_fused_library", "keeps"]
