"""ONNX-ML's SVMRegressor: kernel values against the support vectors (LINEAR, POLY, RBF, SIGMOID), weighted by
the dual coefficients, plus rho; a linear model when it has no support vectors; +-1 for a one-class SVM."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from .convert_trees import ML, attr_floats, ml_input, post_transform
from .registry import converter


def kernel(ctx, x, vectors: np.ndarray):
    """[rows, vectors]: the kernel of each row of x with each support vector."""
    b = ctx.b
    gamma, coef0, degree = (list(ctx.attr("kernel_params", [])) + [0.0, 0.0, 0.0])[:3]
    kind = ctx.attr("kernel_type", "LINEAR")
    sv = ctx.const(vectors.astype(np.float32))
    rows, n = x.type.shape[0], vectors.shape[0]
    if kind == "RBF":
        shape = (rows, n, vectors.shape[1])
        diff = b.sub(ctx.expand(ctx.reshape(x, (rows, 1, vectors.shape[1])), shape), ctx.expand(sv, shape))
        dist = b.reduce_sum(b.mul(diff, diff), axes=(2,), keepdims=False)
        return b.exp(b.mul(dist, ctx.scalar_like(-gamma, dist)))
    dot = b.matmul(x, ctx.const(np.ascontiguousarray(vectors.T.astype(np.float32))))
    if kind == "LINEAR":
        return dot
    affine = b.add(b.mul(dot, ctx.scalar_like(gamma, dot)), ctx.scalar_like(coef0, dot))
    if kind == "POLY":
        out = affine
        for _ in range(int(degree) - 1):
            out = b.mul(out, affine)
        return out
    if kind == "SIGMOID":
        return b.tanh(affine)
    raise ctx.unsupported(f"kernel_type {kind!r} is not one of LINEAR, POLY, RBF, SIGMOID")


@converter("SVMRegressor", domain=ML)
def svm_regressor(ctx):
    x = ctx.cast(ml_input(ctx), DType.f32)
    if x.type.rank != 2 or not isinstance(x.type.shape[1], int):
        raise ctx.unsupported(f"needs x as [rows, features] with a known feature count, got {x.type}")
    f = x.type.shape[1]
    coef = attr_floats(ctx, "coefficients").astype(np.float32)
    rho = attr_floats(ctx, "rho", [0.0])
    n_sv = ctx.attr("n_supports", 0)
    if n_sv:
        vectors = attr_floats(ctx, "support_vectors")
        if vectors.size != n_sv * f or coef.size != n_sv:
            raise ctx.error(f"has {vectors.size} support vector values and {coef.size} coefficients for {n_sv} "
                            f"vectors of {f} features")
        k = kernel(ctx, x, vectors.reshape(n_sv, f))
    else:
        if coef.size != f:
            raise ctx.error(f"has {coef.size} coefficients for {f} features")
        k = x
    y = ctx.b.matmul(k, ctx.const(coef.reshape(-1, 1)))
    y = ctx.b.add(y, ctx.scalar_like(float(rho[0]) if rho.size else 0.0, y))
    if ctx.attr("one_class", 0):
        one = ctx.scalar_like(1.0, y)
        y = ctx.b.where(ctx.b.gt(y, ctx.scalar_like(0.0, y)), one, ctx.b.neg(one))
    return [post_transform(ctx, y, ctx.attr("post_transform", "NONE"))]
