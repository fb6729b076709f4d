"""Random valid graphs with symbolic batch, H and W, compiled once and called at several sizes (largest first, so a
smaller call follows a larger one), compared with ONNX Runtime in a worker process."""
from __future__ import annotations

import pytest

from .cases import FAILURES
from .settings import SEED, fuzz, scaled

CHUNKS, PER_CHUNK = 4, 12


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_graphs_match_onnxruntime(chunk, record_property):
    n = scaled(PER_CHUNK)
    jobs = [{"kind": "graph", "args": {"seed": SEED, "index": chunk * n + i}} for i in range(n)]
    results = fuzz(f"random graphs, chunk {chunk}", jobs, record_property)
    assert sum(r.outcome == "match" for r in results) >= len(results) // 2, [r.detail for r in results]


def test_sizes_below_a_window_are_refused(record_property):
    """Every call below some window: ONNX Runtime refuses it, so must Cuvil (with a Cuvil error)."""
    jobs = [{"kind": "graph", "args": {"seed": SEED, "index": i, "below": True}} for i in range(scaled(24))]
    fuzz("random graphs below a window", jobs, record_property,
         failures=(*FAILURES, "cuvil-only", "ort-crash"))
