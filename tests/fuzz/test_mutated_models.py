"""Mutated ONNX files (bytes and protobuf fields) of the seed models, each loaded and called in a worker process:
no crash, hang or non-Cuvil exception, and no silent mismatch with ONNX Runtime where both run."""
from __future__ import annotations

import pytest

from .seeds import SEEDS
from .settings import MUTANTS, SEED, fuzz


@pytest.mark.parametrize("seed_model", sorted(SEEDS))
def test_mutants_fail_cleanly_or_match_onnxruntime(seed_model, record_property):
    jobs = [{"kind": "mutant", "args": {"seed_model": seed_model, "seed": SEED, "index": i}} for i in range(MUTANTS)]
    results = fuzz(f"mutants of {seed_model}", jobs, record_property)
    assert any(r.outcome == "match" for r in results), "no mutant loads and runs: the fuzzer tests nothing"
    assert any(r.outcome in ("cuvil-error", "both-refuse") for r in results)
