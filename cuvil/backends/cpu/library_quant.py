"""Library emitters for the quantized ops (cuvil/ops/quantized.py) on gemm_int8.c, conv_int8.c and gemm_int4.c, for
the bf16 convolution (cuvil/ops/lowp.py) on conv_lowp.c, and for uint8 max_pool (library_conv.py's hook).

An int8 weight is packed once, when the library loads (cuvil_prepare), from the IR's plain [N, K] constant (a
weight computed at run time is packed into the op's scratch on every call); the epilogue's scales, zero points and
activation are literals of the call.
"""
from __future__ import annotations

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


def _packed_weight(gen, w, size: str, pack: str, depth: int, scratch_bytes: str) -> tuple:
    """(packed weight, the op's other scratch): the weight prepared at load time when it is a constant, else packed
    into the front of the op's scratch by this call. `pack` is the packing call with `src` and `dst` to fill in."""
    src = f"(const {'uint16_t' if w.type.dtype is DType.bf16 else 'int8_t'} *)src"
    packed = gen.prepared(w, f"({size} + 3) / 4", pack.format(src=src, dst="(void *)dst"))
    if packed is not None:
        return packed, gen.scratch(scratch_bytes, "uint8_t")
    front = f"({size} + 63) / 64 * 64"
    base = gen.scratch(f"{front} + {scratch_bytes}", "uint8_t")
    gen.line(depth, pack.format(src=gen.args_of([w])[0], dst=base) + ";")
    return base, f"({base} + {front})"


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
    packed, scratch = _packed_weight(gen, w, f"cuvil_qgemm_packed_bytes({n}, {k})",
                                   f"cuvil_qgemm_pack({n}, {k}, {{src}}, {{dst}})", depth,
                                   f"cuvil_qlinear_scratch_bytes({m}, {k})")
    fields = _epilogue_fields(gen, op, packed)
    a = op.attrs
    gen.line(depth, "{")
    gen.line(depth + 1, f"cuvil_qgemm_args q = {{.M = {m}, .N = {n}, .K = {k}, .rsc = {n}, .csc = 1, {fields}}};")
    gen.line(depth + 1, f"cuvil_qlinear(&q, {gen.args_of([x])[0]}, {int(x.type.dtype is DType.u8)}, "
                        f"{_float(a['x_scale'])}, {a['x_zero']}, {scratch});")
    gen.line(depth, "}")


def _conv_geometry(gen, op, prefix: str, depth: int) -> tuple:
    """The 15 sizes a packed-weight convolution kernel takes (as C), and its packed weight and scratch buffers."""
    x, w = op.operands[:2]
    a = op.attrs
    (nb, c, h, wd), (o, _, kh, kw) = x.type.shape, w.type.shape
    oh, ow = op.results[0].type.shape[2:]
    geom = ", ".join(c_dim(d) for d in [nb, c, h, wd, o, oh, ow, kh, kw, *a["strides"], *a["dilations"],
                                        *a["pads"][:2]])
    packed, scratch = _packed_weight(gen, w, f"{prefix}_packed_bytes({o}, {c}, {kh}, {kw})",
                                     f"{prefix}_pack({o}, {c}, {kh}, {kw}, {{src}}, {{dst}})", depth,
                                     f"{prefix}_scratch_bytes((const int64_t[15]){{{geom}}})")
    return geom, packed, scratch


def _qconv(gen, op, depth: int) -> None:
    x, out, a = op.operands[0], op.results[0], op.attrs
    geom, packed, scratch = _conv_geometry(gen, op, "cuvil_qconv", depth)
    px, ps, pc = gen.args_of([x, op.operands[2], out])
    n_in = len(op.operands) - int(a["residual"])  # x, w, w_scale and an optional bias; then the residual
    pb = gen.args_of([op.operands[3]])[0] if n_in > 3 else "NULL"
    pr = gen.args_of([op.operands[-1]])[0] if a["residual"] else "NULL"
    gen.line(depth, "{")
    gen.line(depth + 1, f"const int64_t g[15] = {{{geom}}};")
    gen.line(depth + 1, f"cuvil_qconv({px}, {int(x.type.dtype is DType.u8)}, {_float(a['x_scale'])}, "
                        f"{a['x_zero']}, {packed}, {ps}, {pb}, {pr}, {_float(a['res_scale'])}, {a['res_zero']}, "
                        f"{ACTIVATIONS[a['act']]}, {pc}, {_float(a['out_scale'])}, {a['out_zero']}, g, {scratch});")
    gen.line(depth, "}")


def _conv_bf16(gen, op, depth: int) -> None:
    geom, packed, scratch = _conv_geometry(gen, op, "cuvil_conv_bf16", depth)
    px, pc = gen.args_of([op.operands[0], op.results[0]])
    pb = gen.args_of([op.operands[2]])[0] if len(op.operands) > 2 else "NULL"
    gen.line(depth, "{")
    gen.line(depth + 1, f"const int64_t g[15] = {{{geom}}};")
    gen.line(depth + 1, f"cuvil_conv_bf16({px}, {packed}, {pb}, NULL, {ACTIVATIONS[op.attrs['act']]}, {pc}, g, "
                        f"{scratch});")
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


def max_pool_u8(gen, op, depth: int) -> None:
    """A 2-D max_pool of uint8 (a quantized tensor between layers) on cuvil_max_pool_u8 (conv_int8.c)."""
    x, y, a = op.operands[0], op.results[0], op.attrs
    (n, c, h, w), (oh, ow) = x.type.shape, y.type.shape[2:]
    dil = a.get("dilations") or (1, 1)
    geom = ", ".join(c_dim(d) for d in [h, w, oh, ow, *a["kernel"], *a["strides"], *dil, *a["pads"][:2]])
    px, py = gen.args_of([x, y])
    gen.line(depth, f"cuvil_max_pool_u8({px}, {py}, {c_dim(n * c)}, (const int64_t[12]){{{geom}}});")


EMITTERS = {"qlinear_i8": _qlinear, "qconv_i8": _qconv, "linear_i4": _linear_i4, "conv_bf16": _conv_bf16}
