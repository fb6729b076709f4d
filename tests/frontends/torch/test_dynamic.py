"""Dynamic sizes on the torch route: a batch-1 example with a dynamic batch, and `dynamic=True`."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import cuvil  # noqa: E402

Dim = torch.export.Dim


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()


def test_a_batch_1_example_with_a_dynamic_batch_serves_every_batch():
    model = _mlp()
    compiled = cuvil.compile(model, (torch.randn(1, 4),), dynamic_shapes=({0: Dim("batch")},), cache=False)
    assert "batch" in cuvil.inspect_ir(compiled)
    for n in (1, 2, 7):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("example", [(1, 1, 8, 8), (2, 1, 8, 8)])
def test_dynamic_true_keeps_what_the_model_fixes_and_varies_the_rest(example):
    """A channel of 1 that the conv fixes stays static; batch, height and width vary, batch 1 included."""
    model = _cnn()
    compiled = cuvil.compile(model, (torch.randn(*example),), dynamic=True, cache=False)
    assert "input_0" in cuvil.inspect_ir(compiled)  # named after forward's argument (Sequential's `input`)
    for shape in ((1, 1, 8, 8), (3, 1, 5, 9), (2, 1, 12, 4)):
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(cuvil.ShapeError):
        compiled(torch.randn(1, 2, 8, 8))


def test_dynamic_true_names_sizes_after_the_argument():
    def f(x, y):
        return x * 2 + y

    compiled = cuvil.compile(f, (torch.randn(1, 3), torch.randn(1, 3)), dynamic=True, cache=False)
    assert "x_0" in cuvil.inspect_ir(compiled) and "x_1" in cuvil.inspect_ir(compiled)
    x, y = torch.randn(5, 6), torch.randn(5, 6)
    torch.testing.assert_close(compiled(x, y), x * 2 + y)


def test_a_size_that_cannot_vary_explains_the_batch_1_case():
    class Fixed(torch.nn.Module):
        def forward(self, x):
            return x.view(4) * 2  # the model itself needs a batch of 1

    with pytest.raises(cuvil.UnsupportedError, match="widened to 2"):
        cuvil.compile(Fixed(), (torch.randn(1, 4),), dynamic_shapes=({0: Dim("batch")},), cache=False)
