"""RNN, GRU and LSTM as PyTorch exports them (dynamic batch and sequence length), against PyTorch."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import cuvil


@pytest.mark.parametrize("kind,bidirectional", [("LSTM", False), ("GRU", True), ("RNN", False), ("LSTM", True)])
def test_torch_recurrent_layers(kind, bidirectional):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer = getattr(torch.nn, kind)(4, 5, num_layers=2, batch_first=True, bidirectional=bidirectional).eval()
    f = io.BytesIO()
    axes = {0: "batch", 1: "seq"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(layer, (torch.randn(2, 3, 4),), f, dynamo=False, input_names=["x"], opset_version=14,
                          output_names=["y", *(["h", "c"] if kind == "LSTM" else ["h"])], dynamic_axes={"x": axes})
    m = cuvil.load_onnx(f.getvalue())
    for batch, seq in [(1, 2), (3, 6)]:
        x = torch.randn(batch, seq, 4)
        with torch.no_grad():
            out = layer(x)
        want = [out[0], *(out[1] if kind == "LSTM" else (out[1],))]
        for got, w in zip(m(x.numpy()), want, strict=True):
            np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-5)
