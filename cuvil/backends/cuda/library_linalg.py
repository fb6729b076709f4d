"""Contractions cuBLASLt does not take, a thread per output element: conv_transpose (N-d, groups, strides, dilations,
pads, output padding), einsum (any equation: the CPU's label expansion, loops over the summed labels) and the matmul
of integers (wrapping, as NumPy) and f64. Floats accumulate in their compute type (f32 for f32, f16, bf16; f64 for f64)
like the conv kernel, integers in wrapping uint64 like the CPU."""
from __future__ import annotations

from ...ir.dtypes import DType
from ..common.c_exprs import CType, c_dim
from ..cpu.library_einsum import _offset, _sizes, expand
from .elements import element_kernel, load_as, store_as
from .kernels import CUDA_STORAGE


def _acc_type(dt: DType) -> str:
    return CType(dt).name if dt.is_float else "uint64_t"


def _result(dt: DType, acc: str) -> str:
    return store_as(dt, acc) if dt.is_float else f"({CUDA_STORAGE[dt]}){acc}"


def _conv_transpose(gen, op) -> None:
    """y[n, c, p] = bias[c] + sum over the group's input channels and the taps w with p + pad - w * dil = q * stride
    (q inside x) of x[n, ci, q] * wt[ci, c % cout_g, w]."""
    x, w = op.operands[0].type, op.operands[1].type
    y = op.results[0]
    a, s, dt = op.attrs, x.rank - 2, y.type.dtype
    cin_g, cout_g = x.shape[1] // a["groups"], w.shape[1]
    body = [f"const int64_t g = o1 / {c_dim(cout_g)}, oc = o1 % {c_dim(cout_g)};", f"{_acc_type(dt)} acc = 0;",
            f"for (int64_t ci = g * {c_dim(cin_g)}; ci < (g + 1) * {c_dim(cin_g)}; ci++) {{"]
    for d in range(s):
        body.append(f"for (int64_t w{d} = 0; w{d} < {c_dim(w.shape[2 + d])}; w{d}++) {{")
        body.append(f"const int64_t t{d} = o{2 + d} + {a['pads'][d]} - w{d} * {a['dilations'][d]}, "
                    f"q{d} = t{d} / {a['strides'][d]};")
        body.append(f"if (t{d} < 0 || t{d} % {a['strides'][d]} != 0 || q{d} >= {c_dim(x.shape[2 + d])}) continue;")
    xi, wi = f"o0 * {c_dim(x.shape[1])} + ci", f"ci * {c_dim(cout_g)} + oc"
    for d in range(s):
        xi, wi = f"({xi}) * {c_dim(x.shape[2 + d])} + q{d}", f"({wi}) * {c_dim(w.shape[2 + d])} + w{d}"
    body.append(f"acc += {load_as(dt, 'x', xi)} * {load_as(dt, 'wt', wi)};")
    body += ["}"] * (s + 1)
    if len(op.operands) > 2:
        body.append(f"acc += {load_as(dt, 'bias', 'o1')};")
    body.append(f"y[o] = {store_as(dt, 'acc')};")
    ins = dict(zip(("x", "wt", "bias"), op.operands))
    element_kernel(gen, op, "conv_transpose", y.type.shape, body, ins, {"y": y})


def direct_matmul(gen, op, a, b, y) -> None:
    """C = A @ B (rank >= 2, batch axes broadcast) for the dtypes cuBLASLt lacks."""
    dt, out = y.type.dtype, y.type.shape
    batch, m, n, k = len(out) - 2, out[-2], out[-1], a.type.shape[-1]

    def start(v, rows, cols) -> str:
        """The offset of the operand's matrix for the output's batch coordinates (size-1 axes broadcast)."""
        lead = v.type.shape[:-2]
        at = "0"
        for j, d in enumerate(lead):
            coord = f"o{batch - len(lead) + j}" if d != 1 else "0"
            at = f"({at}) * {c_dim(d)} + {coord}"
        return f"({at}) * {c_dim(rows * cols)}"
    body = [f"const int64_t sa = {start(a, m, k)}, sb = {start(b, k, n)};", f"{_acc_type(dt)} acc = 0;",
            f"for (int64_t r = 0; r < {c_dim(k)}; r++)",
            f"    acc += ({_acc_type(dt)}){load_as(dt, 'a', f'sa + o{batch} * {c_dim(k)} + r')} * "
            f"({_acc_type(dt)}){load_as(dt, 'b', f'sb + r * {c_dim(n)} + o{batch + 1}')};",
            f"y[o] = {_result(dt, 'acc')};"]
    element_kernel(gen, op, f"matmul_{dt.value}", out, body, {"a": a, "b": b}, {"y": y})


def _einsum(gen, op) -> None:
    xs, y = op.operands, op.results[0]
    dt = y.type.dtype
    types = [v.type for v in xs]
    ins, out = expand(op.attrs["equation"], types)
    sizes = _sizes(ins, types, out, y.type.shape)
    summed = [lab for lab in dict.fromkeys(lab for labels in ins for lab in labels) if lab not in out]
    acc = _acc_type(dt)
    body = [f"const int64_t l_{lab} = o{k};" for k, lab in enumerate(out)] + [f"{acc} acc = 0;"]
    body += [f"for (int64_t l_{lab} = 0; l_{lab} < {c_dim(sizes[lab])}; l_{lab}++)" for lab in summed]
    factors = [f"({acc}){load_as(dt, f'x{k}', _offset(labels, v.type.shape))}" for k, (labels, v) in
               enumerate(zip(ins, xs))]
    body.append(f"    acc += {' * '.join(factors)};")
    body.append(f"y[o] = {_result(dt, 'acc')};")
    element_kernel(gen, op, "einsum", y.type.shape, body, {f"x{k}": v for k, v in enumerate(xs)}, {"y": y})


EMITTERS = {"conv_transpose": _conv_transpose, "einsum": _einsum}
__all__ = ["EMITTERS", "direct_matmul"]
