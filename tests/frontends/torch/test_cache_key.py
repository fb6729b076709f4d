"""The artifact-cache key of torch modules (cuvil/frontends/torch/cache_key.py): recurrent layers are keyed, and a
module that cannot be keyed says so at INFO."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from cuvil.frontends.torch.cache_key import module_key  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_recurrent_layers_have_a_key_that_is_the_same_in_every_process(layer):
    """nn.LSTM and nn.GRU keep weak references to their parameters; the key describes what they point to."""
    code = (f"import torch; from cuvil.frontends.torch.cache_key import module_key; torch.manual_seed(0); "
            f"m = torch.nn.{layer}(4, 8, batch_first=True); print(module_key(m, (torch.ones(2, 3, 4),), {{}}))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout.strip() for seed in range(2)}
    assert len(seen) == 1 and "None" not in seen
    torch.manual_seed(0)
    a = getattr(torch.nn, layer)(4, 8, batch_first=True)
    b = getattr(torch.nn, layer)(4, 8, batch_first=True)  # other weights: another key
    x = torch.ones(2, 3, 4)
    assert module_key(a, (x,), {}) == module_key(a, (x,), {}) != module_key(b, (x,), {})


def test_a_module_without_a_key_is_logged_with_the_reason(caplog):
    model = torch.nn.Linear(4, 3)
    model.hook = lambda t: t
    with caplog.at_level(logging.INFO, logger="cuvil.cache"):
        assert module_key(model, (torch.ones(1, 4),), {}) is None
    assert any("not using the artifact cache for Linear" in r.getMessage() and "function" in r.getMessage()
               for r in caplog.records)


def test_a_compiled_lstm_is_found_in_the_cache(tmp_path, monkeypatch):
    import cuvil

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "1")
    torch.manual_seed(0)
    model = torch.nn.LSTM(4, 8, batch_first=True).eval()
    x = torch.randn(2, 3, 4)
    assert cuvil.compile(model, (x,)).executable.cache == "miss"
    warm = cuvil.compile(model, (x,))
    assert warm.executable.cache == "hit"
    out, (h, c) = warm(x)
    ref, (h_ref, c_ref) = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, h_ref, rtol=1e-5, atol=1e-5)


ACTIVATION = torch.relu
SCALE = 2.0
SHARED = torch.nn.Linear(4, 4)


class UsesGlobals(torch.nn.Module):
    def forward(self, x):
        return SHARED(ACTIVATION(x) * SCALE)


@pytest.mark.parametrize("name, value", [("ACTIVATION", torch.tanh), ("SCALE", 3.0), ("SHARED", torch.nn.Linear(4, 4))])
def test_the_globals_that_forward_names_are_part_of_the_key(name, value, monkeypatch):
    """One class and source, another global function, constant or module: another exported program, another key
    (before, a second compile in the same process hit the first one's artifact and answered with its function)."""
    x = torch.ones(2, 4)
    before = module_key(UsesGlobals(), (x,), {})
    monkeypatch.setitem(globals(), name, value)
    assert before is not None and module_key(UsesGlobals(), (x,), {}) not in (None, before)


def test_a_changed_global_compiles_anew(tmp_path, monkeypatch):
    import cuvil

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "1")
    x = torch.randn(2, 4)
    first = cuvil.compile(UsesGlobals(), (x,))
    monkeypatch.setitem(globals(), "ACTIVATION", torch.sigmoid)
    second = cuvil.compile(UsesGlobals(), (x,))
    assert second.executable.cache == "miss"
    torch.testing.assert_close(first(x), SHARED(torch.relu(x) * SCALE))
    torch.testing.assert_close(second(x), SHARED(torch.sigmoid(x) * SCALE))


class _Config:
    """A config object every layer holds (as transformers' are), counting how often the key describes it."""

    described = 0

    def __init__(self, width: int):
        self.width = width

    def __repr__(self):
        type(self).described += 1
        return f"Config(width={self.width})"


class _Layer(torch.nn.Linear):
    def __init__(self, config):
        super().__init__(config.width, config.width)
        self.config = config


def test_a_config_every_layer_holds_is_described_once_per_key():
    """GPT-2's config is held by 39 modules: describing it once per key saves a tenth of its warm start; the key
    still follows the config's text."""
    shared = _Config(4)
    model = torch.nn.Sequential(_Layer(_Config(4)), *[_Layer(shared) for _ in range(9)])
    x = torch.ones(1, 4)
    _Config.described = 0
    key = module_key(model, (x,), {})
    assert _Config.described == 2  # the first layer's own config and the shared one
    shared.width = 5
    assert module_key(model, (x,), {}) != key
