"""Ops the CPU backend computes with its kernel library or a dedicated generated loop, keyed by op name.

Each emitter gets the code generator, the op and the indentation depth, and appends the call.
"""
from __future__ import annotations

from ...errors import UnsupportedError
from ...ir.dtypes import DType
from ...passes.fuse import GEMM_ACTIVATIONS
from . import library_attention, library_rows
from .c_exprs import STORAGE, CType, c_dim
from .kernels import activation_code




def emit_fused(gen, op, depth: int) -> None:
    """A `fused` op of kind "library": the kernel of the op its body is built around, with the epilogue."""
    if op.attrs["name"] == "attention":  # FuseAttention's group
        library_attention.emit_attention(gen, op, depth)
        return
    anchor = next(o for o in op.regions[0].ops if o.name in FUSED_EMITTERS)
    FUSED_EMITTERS[anchor.name](gen, op, depth)


def _fused_gemm(gen, op, depth: int) -> None:
    """A GEMM with its operands' transposes (read through strides) and its bias and activation epilogue."""
    body = op.regions[0].ops[:-1]
    source = dict(zip((id(a) for a in op.regions[0].args), op.operands))
    transposed = {id(o.results[0]): source[id(o.operands[0])] for o in body if o.name == "transpose"}
    source.update({id(o.results[0]): source[id(o.operands[0])] for o in body if o.name == "cast"})  # 16-bit weight
    bias, act = None, 0
    for inner in body:
        if inner.name == "broadcast_to":
            bias = source[id(inner.operands[0])]
        elif inner.name in GEMM_ACTIVATIONS:
            act = activation_code(inner)
    mm = next(o for o in body if o.name == "matmul")
    a, b = ((transposed[id(v)], True) if id(v) in transposed else (source[id(v)], False) for v in mm.operands)
    _gemm(gen, a, b, op.results[0], bias, act, depth)


def _matmul(gen, op, depth: int) -> None:
    a, b = op.operands
    out = op.results[0]
    if out.type.dtype is DType.f32:
        _gemm(gen, (a, False), (b, False), out, None, 0, depth)
        return
    m, k = a.type.shape[-2:]
    n = b.type.shape[-1]
    batch = c_dim(_prod(out.type.shape[:-2]))
    sa = c_dim(m * k) if a.type.rank > 2 else "0"
    sb = c_dim(k * n) if b.type.rank > 2 else "0"
    pa, pb, pc = gen.args_of([a, b, out])
    t = CType(out.type.dtype)
    name = f"matmul_{out.type.dtype.value}"
    gen.helpers[name] = _naive_matmul(name, out.type.dtype, t)
    gen.line(depth, f"{name}({batch}, {c_dim(m)}, {c_dim(n)}, {c_dim(k)}, {pa}, {sa}, {pb}, {sb}, {pc});")


def _gemm(gen, a_op, b_op, out, bias, act: int, depth: int) -> None:
    """f32 GEMM on the kernel library. Each operand is (buffer, transposed): a transposed buffer holds the
    operand with its last two axes swapped and is read through strides, never copied. A weight shared by
    every batch item (rank 2) lets the batch fold into M; a constant weight is packed once, when the library
    loads, instead of on every call."""
    (a, ta), (b, tb) = a_op, b_op
    m, n = out.type.shape[-2:]
    k = a.type.shape[-2] if ta else a.type.shape[-1]
    rsa, csa = ("1", c_dim(m)) if ta else (c_dim(k), "1")
    if b.type.dtype in LOWP_WEIGHTS:
        _lowp_gemm(gen, a, ta, b, out, bias, act, depth, (rsa, csa, k))
        return
    rsb, csb = ("1", c_dim(k)) if tb else (c_dim(n), "1")
    pa, pb, pc = gen.args_of([a, b, out])
    pbias = gen.args_of([bias])[0] if bias is not None else "NULL"
    if b.type.rank == 2 and (not ta or a.type.rank == 2):
        rows = c_dim(_prod(out.type.shape[:-1]))
        if tb and not ta and isinstance(n, int) and n < NARROW_COLUMNS and _prod(out.type.shape[:-1]) != 1:
            gen.helpers["cuvil_sgemm_narrow"] = SGEMM_NARROW
            gen.line(depth, f"cuvil_sgemm_narrow({rows}, {n}, {c_dim(k)}, {pa}, {pb}, {pbias}, {pc}, {act});")
            return
        # one row reads a narrow weight in place: packing pads it to whole 64-column panels (10 columns: 6.4x the
        # bytes, the last layer of an MLP at batch 1)
        narrow_row = _prod(out.type.shape[:-1]) == 1 and isinstance(n, int) and n < 64
        packed = gen.packed_weight(b, k, n, rsb, csb) if isinstance(k, int) and isinstance(n, int) and not narrow_row \
            else None
        if packed is not None:
            gen.line(depth, f"cuvil_sgemm_packed({rows}, {n}, {k}, 1.0f, {pa}, {rsa}, {csa}, {packed}, 0.0f, {pc}, "
                            f"{n}, {pbias}, {act});")
            return
        gen.line(depth, f"cuvil_sgemm({rows}, {c_dim(n)}, {c_dim(k)}, 1.0f, {pa}, {rsa}, {csa}, {pb}, {rsb}, {csb}, "
                        f"0.0f, {pc}, {c_dim(n)}, {pbias}, {act});")
        return
    batch = c_dim(_prod(out.type.shape[:-2]))
    sa = c_dim(m * k) if a.type.rank > 2 else "0"
    sb = c_dim(k * n) if b.type.rank > 2 else "0"
    gen.line(depth, f"cuvil_sgemm_batched({batch}, {c_dim(m)}, {c_dim(n)}, {c_dim(k)}, 1.0f, {pa}, {rsa}, {csa}, "
                    f"{sa}, {pb}, {rsb}, {csb}, {sb}, 0.0f, {pc}, {c_dim(n)}, {c_dim(m * n)}, {pbias}, {act});")


LOWP_WEIGHTS = {DType.bf16: 0, DType.f16: 1}  # a 16-bit constant weight -> cuvil_lowp_gemm_packed's is_f16


def _lowp_gemm(gen, a, ta: bool, b, out, bias, act: int, depth: int, a_layout) -> None:
    """A GEMM against a bf16 / fp16 constant K x N weight (cuvil/passes/precision.py), packed once at load."""
    rsa, csa, k = a_layout
    n = out.type.shape[-1]
    if b.type.rank != 2 or (ta and a.type.rank > 2):
        raise UnsupportedError(f"a {b.type.dtype} weight {b.type} for a GEMM of {a.type}: only a 2-D weight, read "
                               "by a 2-D or untransposed left operand")
    f16 = LOWP_WEIGHTS[b.type.dtype]
    packed = gen.prepared(b, f"(cuvil_lowp_packed_size({k}, {n}, {f16}) + 1) / 2",
                          f"cuvil_lowp_pack_b({k}, {n}, {f16}, (const uint16_t *)src, {n}, 1, (uint16_t *)dst)")
    if packed is None:
        raise UnsupportedError(f"a {b.type.dtype} GEMM weight must be a module constant")
    pa, pc = gen.args_of([a, out])
    pbias = gen.args_of([bias])[0] if bias is not None else "NULL"
    rows = c_dim(_prod(out.type.shape[:-1]))
    gen.line(depth, f"cuvil_lowp_gemm_packed({rows}, {n}, {k}, {pa}, {rsa}, {csa}, (const uint16_t *){packed}, "
                    f"{f16}, {pc}, {n}, {pbias}, {act});")


# Below this many columns a GEMM against a weight stored transposed (an ONNX/PyTorch Linear: W[N, K]) is N dot
# products per row along K: the packed path pads N to a 64-column panel (10 columns: 6.4x the multiply-adds).
NARROW_COLUMNS = 16
SGEMM_NARROW = """/* C[M,N] = act(A[M,K] @ W[N,K]^T + bias): a dot product along K per output, threads split rows. */
static void cuvil_sgemm_narrow(int64_t M, int64_t N, int64_t K, const float *restrict A, const float *restrict W,
                               const float *restrict bias, float *restrict C, int act)
{
    #pragma omp parallel for if (M * N * K >= (1 << 17)) num_threads(cuvil_get_num_threads()) schedule(static)
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const float *restrict a = A + i * K, *restrict w = W + j * K;
            float s = 0.0f;
            #pragma omp simd reduction(+:s)
            for (int64_t p = 0; p < K; p++) s += a[p] * w[p];
            C[i * N + j] = s + (bias ? bias[j] : 0.0f);
        }
    if (act) cuvil_activation(act, M * N, C, C);
}
"""


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
FUSED_EMITTERS = {"matmul": _fused_gemm}  # the anchor op of a fused library op's body -> its emitter
EMITTERS.update(library_rows.EMITTERS)

from . import library_misc  # noqa: E402  (emitters in their own files; imported last, after EMITTERS exists)
EMITTERS.update(library_misc.EMITTERS)

from . import library_conv  # noqa: E402
EMITTERS.update(library_conv.EMITTERS)
FUSED_EMITTERS["conv"] = library_conv.emit_fused_conv

from . import library_resize  # noqa: E402
EMITTERS.update(library_resize.EMITTERS)

from . import library_einsum  # noqa: E402
EMITTERS.update(library_einsum.EMITTERS)

from . import library_conv_blocked  # noqa: E402
EMITTERS.update(library_conv_blocked.EMITTERS)

from . import library_trees  # noqa: E402
EMITTERS.update(library_trees.EMITTERS)

from . import library_quant  # noqa: E402
EMITTERS.update(library_quant.EMITTERS)

from . import library_dynamic  # noqa: E402
EMITTERS.update(library_dynamic.EMITTERS)

from . import library_linalg  # noqa: E402
EMITTERS.update(library_linalg.EMITTERS)

from . import library_fft  # noqa: E402
EMITTERS.update(library_fft.EMITTERS)
