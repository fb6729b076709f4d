"""TfIdfVectorizer over integer tokens: n-gram counts (with skips) per row, weighted, into output columns.

For each n-gram length n and distance d (1, or 1 to max_skip_count + 1 when n > 1), the windows
x[i], x[i + d], ..., x[i + (n - 1) d] of each row are compared with every pool n-gram of that length at once
(a broadcast equality over [rows, windows, n-grams, n]) and the full matches summed; a one-hot matrix made when
the model loads sends each n-gram's count to its column (ngram_indexes), weighted for IDF and TFIDF.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from .registry import converter


def _pool(ctx) -> dict:
    """{n: [count_n, n] array of the pool's n-grams of length n, and their positions in the pool order}."""
    pool = np.asarray(ctx.attr("pool_int64s", []), np.int64)
    if ctx.has_attr("pool_strings"):
        raise ctx.unsupported("string n-gram pools (pool_strings) are not supported")
    starts = list(ctx.attr("ngram_counts")) + [pool.size]
    groups, first = {}, 0
    for n, (lo, hi) in enumerate(zip(starts, starts[1:]), start=1):
        if hi < lo or (hi - lo) % n:
            raise ctx.error(f"ngram_counts {starts[:-1]} do not split the pool of {pool.size} ids into whole n-grams")
        groups[n] = (pool[lo:hi].reshape(-1, n), np.arange(first, first + (hi - lo) // n))
        first += (hi - lo) // n
    return groups


def _counts(ctx, x, grams: np.ndarray, distances) -> object:
    """[rows, len(grams)] f32: how often each n-gram occurs in each row, over the given distances."""
    b, (rows, length), n = ctx.b, x.type.shape, grams.shape[1]
    total = None
    for d in distances:
        windows = length - (n - 1) * d
        if windows <= 0:
            continue
        parts = [ctx.reshape(b.slice(x, starts=(m * d,), ends=(m * d + windows,), axes=(1,)), (rows, windows, 1, 1))
                 for m in range(n)]
        grid = (rows, windows, len(grams), n)
        stacked = ctx.expand(b.concat(*parts, axis=3) if n > 1 else parts[0], grid)
        pool = ctx.expand(ctx.reshape(ctx.const(grams.astype(x.type.dtype.numpy)), (1, 1) + grams.shape), grid)
        hits = b.reduce_sum(ctx.cast(b.eq(stacked, pool), DType.i32), axes=(3,), keepdims=False)
        full = ctx.cast(b.eq(hits, ctx.scalar_like(n, hits)), DType.f32)
        found = b.reduce_sum(full, axes=(1,), keepdims=False)
        total = found if total is None else b.add(total, found)
    return total


@converter("TfIdfVectorizer")
def tfidf_vectorizer(ctx):
    x = ctx.x(0)
    if not x.type.dtype.is_int or x.type.rank not in (1, 2) or not all(isinstance(d, int) for d in x.type.shape):
        raise ctx.unsupported(f"needs static [C] or [N, C] integer tokens, got {x.type}")
    rows = x if x.type.rank == 2 else ctx.reshape(x, (1, x.type.shape[0]))
    columns = np.asarray(ctx.attr("ngram_indexes"), np.int64)
    mode, weights = ctx.attr("mode"), np.asarray(ctx.attr("weights", [1.0] * columns.size), np.float32)
    if mode not in ("TF", "IDF", "TFIDF") or weights.size != columns.size or columns.min(initial=0) < 0:
        raise ctx.error(f"needs mode TF, IDF or TFIDF and one weight and index >= 0 per n-gram, got {mode!r}, "
                        f"{weights.size} weights and {columns.size} indexes")
    lo, hi, skips = ctx.attr("min_gram_length"), ctx.attr("max_gram_length"), ctx.attr("max_skip_count")
    width = int(columns.max(initial=-1)) + 1
    out = ctx.b.full(0.0, (rows.type.shape[0], width), DType.f32)
    for n, (grams, order) in _pool(ctx).items():
        if not lo <= n <= hi or not len(grams):
            continue
        if order.max() >= columns.size:
            raise ctx.error(f"has {columns.size} ngram_indexes for a pool of more n-grams")
        counts = _counts(ctx, rows, grams, [1] if n == 1 else range(1, skips + 2))
        if counts is None:
            continue
        if mode == "IDF":
            counts = ctx.cast(ctx.b.gt(counts, ctx.scalar_like(0.0, counts)), DType.f32)
        spread = np.zeros((len(grams), width), np.float32)
        spread[np.arange(len(grams)), columns[order]] = 1.0 if mode == "TF" else weights[order]
        out = ctx.b.add(out, ctx.b.matmul(counts, ctx.const(spread)))
    return [out if x.type.rank == 2 else ctx.reshape(out, (width,))]
