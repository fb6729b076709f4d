"""The newer suite workloads, at tiny sizes: each builds, runs in eager PyTorch and compiles to the same result."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import cuvil  # noqa: E402
from bench import workloads_extra as X  # noqa: E402

TINY = {"MobileNetV3-small": lambda: X.cnn_workload(X.MobileNetV3Small, 64),
        "EfficientNet-B0": lambda: X.cnn_workload(X.EfficientNetB0, 48),
        "UNet": lambda: X.cnn_workload(X.SmallUNet, 32, batch=2, width=8),
        "ViT": lambda: X.vit_workload(64, 2, 4, 2, image=32, patch=8),
        "Whisper encoder": lambda: X.whisper_encoder_workload(64, 2, 4, 16, 200),
        "Llama decode step": lambda: X.llama_decode_workload(2, 128, 4, 2, 256, 16)}


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_workload_compiles_to_the_eager_result(name):
    built = TINY[name]()
    with torch.no_grad():
        ref = built.module(*built.inputs).numpy()
    got = cuvil.compile(built.module, built.inputs)(*built.inputs)
    got = got.detach().numpy() if hasattr(got, "detach") else np.asarray(got)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_full_size_models_have_their_published_parameter_counts():
    """The architectures, not only their shapes: parameter counts of the reference models (millions, rounded)."""
    counts = {"MobileNetV3-small": (X.MobileNetV3Small(), 2.5), "EfficientNet-B0": (X.EfficientNetB0(), 5.3)}
    for name, (model, millions) in counts.items():
        assert round(sum(p.numel() for p in model.parameters()) / 1e6, 1) == millions, name
