"""ONNX-ML's SVMs: kernel values against the support vectors (LINEAR, POLY, RBF, SIGMOID), weighted by the dual
coefficients, plus rho. SVMRegressor: a linear model when it has no support vectors, +-1 for a one-class SVM.
SVMClassifier: one decision per pair of classes and a vote (libsvm's one-versus-one), its scores and labels as ONNX
Runtime writes them; Platt probabilities (prob_a, prob_b) and the liblinear form are not supported yet."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from .convert_trees import ML, attr_floats, class_labels, ml_input, post_transform
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


def _matrix_input(ctx):
    x = ctx.cast(ml_input(ctx), DType.f32)
    if x.type.rank != 2 or not isinstance(x.type.shape[1], int):
        raise ctx.unsupported(f"needs x as [rows, features] with a known feature count, got {x.type}")
    return x, x.type.shape[1]


@converter("SVMRegressor", domain=ML)
def svm_regressor(ctx):
    x, f = _matrix_input(ctx)
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


def _pair_coefficients(coefs: np.ndarray, counts: list) -> np.ndarray:
    """[vectors, pairs]: the weights of decision (i, j), i < j: coefs[j - 1] on class i's vectors and coefs[i] on
    class j's (libsvm's layout)."""
    starts = np.cumsum([0] + counts)
    pairs = [(i, j) for i in range(len(counts)) for j in range(i + 1, len(counts))]
    out = np.zeros((coefs.shape[1], len(pairs)), np.float32)
    for p, (i, j) in enumerate(pairs):
        out[starts[i]:starts[i + 1], p] = coefs[j - 1, starts[i]:starts[i + 1]]
        out[starts[j]:starts[j + 1], p] = coefs[i, starts[j]:starts[j + 1]]
    return out


@converter("SVMClassifier", domain=ML)
def svm_classifier(ctx):
    labels = ctx.attr("classlabels_ints")
    counts = list(ctx.attr("vectors_per_class", []))
    if not labels or not sum(counts) or len(attr_floats(ctx, "prob_a")):
        raise ctx.unsupported("string labels, the liblinear form (no support vectors) and probabilities (prob_a) "
                              "are not supported")
    x, f = _matrix_input(ctx)
    vectors = attr_floats(ctx, "support_vectors").reshape(sum(counts), f)
    coefs = attr_floats(ctx, "coefficients").reshape(-1, sum(counts))
    weights = _pair_coefficients(coefs, counts)
    b = ctx.b
    decisions = b.matmul(kernel(ctx, x, vectors), ctx.const(weights))
    rho = ctx.const(attr_floats(ctx, "rho").astype(np.float32))
    decisions = b.add(decisions, ctx.expand(rho, decisions.type.shape))
    positive = b.gt(decisions, ctx.scalar_like(0.0, decisions))
    rows = x.type.shape[0]
    if len(labels) == 2:  # one decision s: scores [-s, s], class 0 when s > 0
        label = b.where(b.reshape(positive, shape=(rows,)), *(ctx.expand(ctx.const(np.int64(v)), (rows,))
                                                           for v in labels))
        return [label, b.concat(b.neg(decisions), decisions, axis=1)]
    pairs = [(i, j) for i in range(len(counts)) for j in range(i + 1, len(counts))]
    wins, losses = np.zeros((len(pairs), len(counts)), np.float32), np.zeros((len(pairs), len(counts)), np.float32)
    for p, (i, j) in enumerate(pairs):
        wins[p, i], losses[p, j] = 1, 1
    won = ctx.cast(positive, DType.f32)
    lost = b.sub(ctx.scalar_like(1.0, won), won)
    votes = b.add(b.matmul(won, ctx.const(wins)), b.matmul(lost, ctx.const(losses)))
    return [class_labels(ctx, votes, labels), post_transform(ctx, decisions, ctx.attr("post_transform", "NONE"))]
