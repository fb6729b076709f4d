"""Decoder models with their default `use_cache=True`: the DynamicCache they return is flattened to tensors."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import cuvil  # noqa: E402


def test_gpt2_compiles_with_its_cache_output_and_matches_eager():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    assert cfg.use_cache
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 100, (1, 8))
    compiled = cuvil.compile(model, (ids,), cache=False)
    out = compiled(ids)
    with torch.no_grad():
        ref = model(ids)
    torch.testing.assert_close(out.logits, ref.logits, rtol=1e-4, atol=1e-5)
    assert type(out.past_key_values) is type(ref.past_key_values)
    for got, want in zip(out.past_key_values.layers, ref.past_key_values.layers):
        torch.testing.assert_close(got.keys, want.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got.values, want.values, rtol=1e-4, atol=1e-5)


def test_torch_decomposition_failures_are_cuvil_errors():
    """A decode step that takes the cache back in trips torch's own run_decompositions (lifted constants); the
    failure is an UnsupportedError that names the stage, not torch's internal SpecViolationError."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        past = model(torch.randint(0, 50, (1, 4))).past_key_values
    try:
        step = cuvil.compile(model, {"input_ids": torch.randint(0, 50, (1, 1)), "past_key_values": past}, cache=False)
    except cuvil.UnsupportedError as e:
        assert "run_decompositions" in str(e) or "torch.export" in str(e)
    else:  # a torch that decomposes it: then the step must be right
        nxt = torch.randint(0, 50, (1, 1))
        with torch.no_grad():
            ref = model(input_ids=nxt, past_key_values=copy.deepcopy(past))
        torch.testing.assert_close(step(input_ids=nxt, past_key_values=past).logits, ref.logits, rtol=1e-4, atol=1e-5)
