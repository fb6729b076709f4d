"""torch.ao's dynamically quantised models (cuvil/frontends/torch/quantized.py)."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import cuvil  # noqa: E402


def _quantized(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.qint8, torch.float16])
def test_dynamically_quantised_linear_layers_match_torch(dtype):
    model, q = _quantized(dtype)
    compiled = cuvil.compile(q, (torch.randn(3, 8),), dynamic=True, cache=False)
    for n in (1, 3, 10):
        x = torch.randn(n, 8) * 3
        torch.testing.assert_close(compiled(x), q(x), rtol=1e-4, atol=1e-4)
    assert type(q[0]).__module__.startswith("torch.ao")  # the user's model is left as it was


def test_other_quantised_modules_are_refused_by_name():
    _, q = _quantized(torch.qint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q.extra = torch.ao.nn.quantized.Quantize(0.1, 0, torch.quint8)
    with pytest.raises(cuvil.UnsupportedError, match="extra .*Quantize"):
        cuvil.compile(q, (torch.randn(3, 8),), cache=False)
