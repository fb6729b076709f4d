"""ONNX-ML's (ai.onnx.ml) linear models and preprocessing, spelled with IR ops: LinearClassifier/Regressor,
Scaler, Normalizer, Imputer, Binarizer, OneHotEncoder, LabelEncoder (numeric), ArrayFeatureExtractor,
FeatureVectorizer and ZipMap. Where ONNX Runtime fails at run time (OneHotEncoder with zeros=0 on an unknown
category) Cuvil writes zeros; ZipMap's sequence of maps is given as its probabilities tensor (see docs/onnx.md).
The tree ensembles are in convert_trees.py, the SVMs in convert_svm.py."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from . import convert_svm, convert_trees  # noqa: F401  (their converters register on import)
from .convert_trees import ML, attr_floats, class_labels, int_labels, ml_input, post_transform
from .registry import converter


def _matrix(ctx, x, name: str):
    """x @ (the flat attribute `name` as [targets, features]).T."""
    f = x.type.shape[-1]
    coef = attr_floats(ctx, name).astype(x.type.dtype.numpy)
    if not isinstance(f, int) or f == 0 or coef.size % f:
        raise ctx.error(f"{name} has {coef.size} values, not a multiple of x's {f} features")
    return ctx.b.matmul(x, ctx.const(np.ascontiguousarray(coef.reshape(-1, f).T)))


def _plus(ctx, y, values: np.ndarray):
    if not values.size:
        return y
    return ctx.b.add(y, ctx.expand(ctx.const(values.astype(y.type.dtype.numpy)), y.type.shape))


def _rows(ctx):
    """Input 0 as a float [rows, features] matrix (a vector is one row)."""
    x = ml_input(ctx)
    return ctx.reshape(x, (1, x.type.shape[0])) if x.type.rank == 1 else x


@converter("LinearRegressor", domain=ML)
def linear_regressor(ctx):
    x = _rows(ctx)
    y = _plus(ctx, _matrix(ctx, x, "coefficients"), attr_floats(ctx, "intercepts"))
    return [post_transform(ctx, ctx.cast(y, DType.f32), ctx.attr("post_transform", "NONE"))]


@converter("LinearClassifier", domain=ML)
def linear_classifier(ctx):
    labels = int_labels(ctx, "classlabels_ints")
    x = _rows(ctx)
    scores = ctx.cast(_plus(ctx, _matrix(ctx, x, "coefficients"), attr_floats(ctx, "intercepts")), DType.f32)
    if scores.type.shape[1] == 1 and len(labels) == 2:  # one score s for two classes: [-s, s]
        scores = ctx.b.concat(ctx.b.neg(scores), scores, axis=1)
    scores = post_transform(ctx, scores, ctx.attr("post_transform", "NONE"))
    if scores.type.shape[1] != len(labels):
        raise ctx.unsupported(f"has {scores.type.shape[1]} scores for {len(labels)} class labels")
    return [class_labels(ctx, scores, labels), scores]


@converter("Scaler", domain=ML)
def scaler(ctx):
    x = ctx.cast(ctx.x(0), DType.f32)
    y = _plus(ctx, x, -attr_floats(ctx, "offset"))
    scale = attr_floats(ctx, "scale")
    return [ctx.b.mul(y, ctx.expand(ctx.const(scale.astype(np.float32)), y.type.shape)) if scale.size else y]


@converter("Normalizer", domain=ML)
def normalizer(ctx):
    x = _rows(ctx)
    b, norm = ctx.b, ctx.attr("norm", "MAX")
    if norm == "MAX":
        d = b.reduce_max(x, axes=(1,), keepdims=True)
    elif norm == "L1":
        d = b.reduce_sum(b.abs(x), axes=(1,), keepdims=True)
    elif norm == "L2":
        d = b.sqrt(b.reduce_sum(b.mul(x, x), axes=(1,), keepdims=True))
    else:
        raise ctx.unsupported(f"norm {norm!r} is not one of MAX, L1, L2")
    return [ctx.cast(b.div(x, ctx.expand(d, x.type.shape)), DType.f32)]


@converter("Imputer", domain=ML)
def imputer(ctx):
    x = ctx.x(0)
    floats = x.type.dtype.is_float
    values = np.asarray(ctx.attr("imputed_value_floats" if floats else "imputed_value_int64s", []))
    if not values.size:
        raise ctx.error("has no imputed values")
    replaced = ctx.attr("replaced_value_float", 0.0) if floats else ctx.attr("replaced_value_int64", 0)
    table = ctx.expand(ctx.const(values.astype(x.type.dtype.numpy)), x.type.shape)
    hit = ctx.b.isnan(x) if floats and np.isnan(replaced) else ctx.b.eq(x, ctx.scalar_like(replaced, x))
    return [ctx.b.where(hit, table, x)]


@converter("Binarizer", domain=ML)
def binarizer(ctx):
    x = ctx.x(0)
    above = ctx.b.gt(x, ctx.scalar_like(ctx.attr("threshold", 0.0), x))
    return [ctx.cast(above, x.type.dtype)]


@converter("OneHotEncoder", domain=ML)
def one_hot_encoder(ctx):
    cats = ctx.attr("cats_int64s")
    if not cats:
        raise ctx.unsupported("encodes string categories; Cuvil computes numeric tensors only")
    x = ctx.cast(ctx.x(0), DType.i64)
    shape = (*x.type.shape, len(cats))
    column = ctx.expand(ctx.reshape(x, (*x.type.shape, 1)), shape)
    hits = ctx.b.eq(column, ctx.expand(ctx.const(np.asarray(cats, np.int64)), shape))
    return [ctx.cast(hits, DType.f32)]


def _label_table(ctx):
    """(keys, values, default) of a numeric LabelEncoder: the tensor attributes (opset 4) or the typed lists."""
    keys, values, default = ctx.attr("keys_tensor"), ctx.attr("values_tensor"), ctx.attr("default_tensor")
    for kind in ("int64s", "floats"):
        keys = np.asarray(ctx.attr(f"keys_{kind}")) if keys is None and ctx.has_attr(f"keys_{kind}") else keys
        if values is None and ctx.has_attr(f"values_{kind}"):
            values = np.asarray(ctx.attr(f"values_{kind}"))
            default = np.asarray(ctx.attr("default_" + kind[:-1], -1 if kind == "int64s" else -0.0),
                                 values.dtype) if default is None else default
    if keys is None or values is None or keys.dtype.kind in "OUS" or values.dtype.kind in "OUS":
        raise ctx.unsupported("maps strings; Cuvil's LabelEncoder maps numbers to numbers")
    if keys.size != values.size:
        raise ctx.error(f"has {keys.size} keys but {values.size} values")
    return keys.reshape(-1), values.reshape(-1), np.asarray(default, values.dtype).reshape(-1)[:1]


@converter("LabelEncoder", domain=ML)
def label_encoder(ctx):
    keys, values, default = _label_table(ctx)
    x = ctx.x(0)
    out = ctx.expand(ctx.const(default.reshape(())), x.type.shape)
    for k, v in zip(keys[::-1], values[::-1]):  # the first of equal keys wins
        hit = ctx.b.eq(x, ctx.scalar_like(k, x))
        out = ctx.b.where(hit, ctx.expand(ctx.const(np.asarray(v, values.dtype)), x.type.shape), out)
    return [out]


@converter("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(ctx):
    x, idx = ctx.x(0), ctx.cast(ctx.x(1), DType.i64)
    flat = ctx.reshape(idx, (idx.type.numel,)) if idx.type.is_static else idx
    y = ctx.b.gather(x, flat, axis=x.type.rank - 1)
    return [ctx.reshape(y, (1, y.type.shape[0])) if x.type.rank == 1 else y]


@converter("FeatureVectorizer", domain=ML)
def feature_vectorizer(ctx):
    parts = []
    for i in range(len(ctx.inputs)):
        v = ctx.cast(ctx.x(i), DType.f32)
        parts.append(ctx.reshape(v, (v.type.shape[0], v.type.numel // v.type.shape[0])) if v.type.rank != 2 else v)
    return [parts[0] if len(parts) == 1 else ctx.b.concat(*parts, axis=1)]


@converter("ZipMap", domain=ML)
def zip_map(ctx):
    """The probabilities themselves: row i's map {label j: value} is row i, column j (label order as given)."""
    return [ctx.x(0)]
