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


# Findings of longer runs (CUVIL_FUZZ_CASES=2000 CUVIL_FUZZ_SEED=11), replayed every time: a softmax over an empty
# axis (an internal error), the mean of an empty axis (ONNX leaves it undefined), and weights near float32's limit
# whose f32 overflow ORT and compiled Cuvil share but the interpreter's f64 arithmetic does not.
PAST_FINDINGS = [("attention", 11, 1512, "undefined"), ("attention", 11, 992, "overflow"),
                 ("mlp", 11, 839, "overflow"), ("mlp", 11, 1271, "overflow")]


@pytest.mark.parametrize("seed_model,seed,index,outcome", PAST_FINDINGS)
def test_past_findings(seed_model, seed, index, outcome, record_property):
    job = {"kind": "mutant", "args": {"seed_model": seed_model, "seed": seed, "index": index}}
    assert fuzz(f"{seed_model} {seed}/{index}", [job], record_property)[0].outcome == outcome
