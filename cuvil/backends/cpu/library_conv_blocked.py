"""Library emitters for the blocked layout's ops. `conv_nchwc`: a call to the kernel library's register-blocked
direct convolution, or, for algorithm "winograd", to its F(4x4, 3x3) kernel on weights that `cuvil_prepare`
transforms once at load. `dwconv_nchwc` and `spatial_sum_nchwc`: its depthwise conv and its sum over H and W.

The kernel (kernels/conv_nchwc.c) is compiled once per machine with the GEMM: its strips, unrolled over
registers, cost gcc tens of seconds per model when they were emitted into each model's C. The packed weight's
block must be the library's (one vector of f32 on the host), which the layout pass chose from the same features.
"""
from __future__ import annotations

from ...errors import UnsupportedError
from . import targets
from .kernels import ACTIVATIONS, conv_block
from .library_util import c_dim, open_block


def _require_library_block(block: int, name: str) -> None:
    """The packed weight's block must be the library's (the layout pass chose it for the target)."""
    if block != conv_block() and not targets.widens_blocks():
        uses = f"uses {conv_block()}" if conv_block() else "has levels of several widths (no blocked layout)"
        raise UnsupportedError(f"'{name}' packs {block} channels per block; the target's kernel library {uses}: "
                               "the IR was laid out for another target. Compile it for this one (target= of "
                               "cuvil.jit, cuvil.compile or .optimize, or export a jit function with example_inputs=)")


def _conv_nchwc(gen, op, depth: int) -> None:
    x, w = op.operands[:2]
    y = op.results[0]
    names = {"x": x, "w": w, "bias": op.operands[2], "y": y}
    if len(op.operands) == 4:
        names["res"] = op.operands[3]
    a = op.attrs
    ob, cb = w.type.shape[:2]
    u = gen.prepared(w, f"cuvil_winograd_weight_size({ob}, {cb})", f"cuvil_winograd_weight(src, {ob}, {cb}, dst)",
                     saved=True) if a["algorithm"] == "winograd" else None
    if u is not None:  # the code reads only the transform (so a .cuv stores it in place of the weight)
        del names["w"]
    d = open_block(gen, depth, op, names)
    _require_library_block(w.type.shape[5], "conv_nchwc")
    sizes = (*x.type.shape[:5], w.type.shape[0], *y.type.shape[2:4], *w.type.shape[2:4], *a["strides"],
             *a["pads"][:2], *a["dilations"], a["channels"])
    gen.line(d, f"const int64_t g[17] = {{{', '.join(c_dim(s) for s in sizes)}}};")
    res, act = "res" if "res" in names else "NULL", ACTIVATIONS[a["activation"]]
    if u is not None:
        gen.line(d, f"cuvil_conv_winograd(x, {u}, bias, {res}, y, g, {act});")
    else:  # a weight computed at run time is not transformed on every call
        gen.line(d, f"cuvil_conv_nchwc(x, w, bias, {res}, y, g, {act});")
    gen.line(depth, "}")


def _dwconv_nchwc(gen, op, depth: int) -> None:
    x, w, y, a = op.operands[0], op.operands[1], op.results[0], op.attrs
    d = open_block(gen, depth, op, {"x": x, "w": w, "bias": op.operands[2], "y": y})
    _require_library_block(w.type.shape[3], "dwconv_nchwc")
    sizes = (*x.type.shape[:4], *y.type.shape[2:4], *w.type.shape[1:3], *a["strides"], *a["pads"][:2],
             *a["dilations"])
    gen.line(d, f"const int64_t g[14] = {{{', '.join(c_dim(s) for s in sizes)}}};")
    gen.line(d, f"cuvil_dwconv_nchwc(x, w, bias, y, g, {ACTIVATIONS[a['activation']]});")
    gen.line(depth, "}")


def _spatial_sum_nchwc(gen, op, depth: int) -> None:
    x, y = op.operands[0], op.results[0]
    d = open_block(gen, depth, op, {"x": x, "y": y})
    _require_library_block(x.type.shape[4], "spatial_sum_nchwc")
    n, blocks, h, w = (c_dim(s) for s in x.type.shape[:4])
    gen.line(d, f"cuvil_spatial_sum_nchwc(x, y, ({n}) * ({blocks}), ({h}) * ({w}));")
    gen.line(depth, "}")


EMITTERS = {"conv_nchwc": _conv_nchwc, "dwconv_nchwc": _dwconv_nchwc, "spatial_sum_nchwc": _spatial_sum_nchwc}
