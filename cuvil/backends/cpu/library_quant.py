"""Library emitters for the quantized ops (cuvil/ops/quantized.py) on gemm_int8.c and gemm_int4.c.

An int8 weight is packed once, when the library loads (cuvil_prepare), from the IR's plain [N, K] constant; the
epilogue's scales, zero points and activation are literals of the call.
"""
from __future__ import annotations

from ...errors import UnsupportedError
from ...ir.dtypes import DType
from .c_exprs import c_dim
from .kernels import ACTIVATIONS


def _float(v: float) -> str:
    return f"{float(v)!r}f"


def _prod(dims):
    n = 1
    for d in dims:
        n = n * d
    return n


def _packed_int8(gen, op, w, n: int, k: int) -> str:
    packed = gen.prepared(w, f"(cuvil_qgemm_packed_bytes({n}, {k}) + 3) / 4",
                          f"cuvil_qgemm_pack({n}, {k}, (const int8_t *)src, (void *)dst)")
    if packed is None:
        raise UnsupportedError(f"the CPU backend needs the weight of '{op.name}' to be a module constant "
                               f"(cuvil.quantize makes it one)", op.loc)
    return packed


def _epilogue_fields(gen, op, packed: str) -> str:
    ps, pc = gen.args_of([op.operands[2], op.results[0]])
    pb = gen.args_of([op.operands[3]])[0] if len(op.operands) > 3 else "NULL"
    a = op.attrs
    return (f".packed = {packed}, .w_scale = {ps}, .bias = {pb}, .act = {ACTIVATIONS[a['act']]}, .C = {pc}, "
            f".out_scale = {_float(a['out_scale'])}, .out_zero = {a['out_zero']}")


def _qlinear(gen, op, depth: int) -> None:
    x, w = op.operands[:2]
    n, k = w.type.shape
    m = c_dim(_prod(x.type.shape[:-1]))
    fields = _epilogue_fields(gen, op, _packed_int8(gen, op, w, n, k))
    scratch = gen.scratch(f"cuvil_qlinear_scratch_bytes({m}, {k})", "uint8_t")
    a = op.attrs
    gen.line(depth, "{")
    gen.line(depth + 1, f"cuvil_qgemm_args q = {{.M = {m}, .N = {n}, .K = {k}, .rsc = {n}, .csc = 1, {fields}}};")
    gen.line(depth + 1, f"cuvil_qlinear(&q, {gen.args_of([x])[0]}, {int(x.type.dtype is DType.u8)}, "
                        f"{_float(a['x_scale'])}, {a['x_zero']}, {scratch});")
    gen.line(depth, "}")


def _qconv(gen, op, depth: int) -> None:
    x, w = op.operands[:2]
    out = op.results[0]
    a = op.attrs
    (nb, c, h, wd), (o, _, kh, kw) = x.type.shape, w.type.shape
    oh, ow = out.type.shape[2:]
    packed = _packed_int8(gen, op, w, o, c * kh * kw)
    geom = [nb, c, h, wd, o, oh, ow, kh, kw, *a["strides"], *a["dilations"], *a["pads"][:2]]
    image, rows = c_dim(c * h * wd), c_dim(oh * ow * ((c * kh * kw + 3) // 4 * 4))
    scratch = gen.scratch(f"({image} + 63) / 64 * 64 + {rows} + 64", "uint8_t")
    px, ps, pc = gen.args_of([x, op.operands[2], out])
    pb = gen.args_of([op.operands[3]])[0] if len(op.operands) > 3 else "NULL"
    gen.line(depth, "{")
    gen.line(depth + 1, f"const int64_t g[15] = {{{', '.join(c_dim(d) for d in geom)}}};")
    gen.line(depth + 1, f"cuvil_qconv2d({px}, {int(x.type.dtype is DType.u8)}, {_float(a['x_scale'])}, "
                        f"{a['x_zero']}, {packed}, {ps}, {pb}, {ACTIVATIONS[a['act']]}, {pc}, "
                        f"{_float(a['out_scale'])}, {a['out_zero']}, g, {scratch});")
    gen.line(depth, "}")


def _linear_i4(gen, op, depth: int) -> None:
    x, q = op.operands[:2]
    n, k, g = q.type.shape[0], x.type.shape[-1], op.attrs["group"]
    m = c_dim(_prod(x.type.shape[:-1]))
    scratch = gen.scratch(f"cuvil_gemm_int4_scratch_bytes({m}, {k}, {g})", "uint8_t")
    px, pq, ps, pz, py = gen.args_of([*op.operands[:4], op.results[0]])
    pb = gen.args_of([op.operands[4]])[0] if len(op.operands) > 4 else "NULL"
    gen.line(depth, f"cuvil_gemm_int4({m}, {n}, {k}, {g}, {px}, {pq}, {ps}, {pz}, {pb}, "
                    f"{ACTIVATIONS[op.attrs['act']]}, {py}, {scratch});")


EMITTERS = {"qlinear_i8": _qlinear, "qconv_i8": _qconv, "linear_i4": _linear_i4}
