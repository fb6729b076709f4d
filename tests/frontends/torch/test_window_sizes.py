"""The torch.export route with dynamic sizes: an input narrower than a window (torch's own range allowed it at
export, the call breaks it) is a ShapeError naming the module's source line and the sizes, not NumPy's
ValueError or a write past a buffer."""
import inspect

import pytest
import torch
from torch.export import Dim

import cuvil

from .helpers import assert_close, compile_torch, run_both


class DilatedDepthwise(torch.nn.Module):
    """The reliability issue's model: a stride-2 depthwise conv, then a 5x5 one dilated by 4 along the width."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6)
        self.b = torch.nn.Conv2d(6, 6, 5, padding=2, dilation=(1, 4), groups=6)

    def forward(self, x):
        return self.b(self.a(x))


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_a_call_narrower_than_the_window_names_the_line(target):
    torch.manual_seed(0)
    model = DilatedDepthwise().eval()
    x = torch.randn(1, 6, 32, 40)
    compiled = compile_torch(model, (x,), dynamic_shapes={"x": {2: Dim("H", min=3), 3: Dim("W", min=27)}},
                             target=target)
    for shape in ((1, 6, 32, 40), (1, 6, 9, 31)):
        assert_close(*run_both(model, compiled, (torch.randn(*shape),)))
    with pytest.raises(cuvil.ShapeError, match=r"'conv': the dilated 5x5 window spans 17 columns but the padded "
                                               r"input has 11 \(W=13\)") as e:
        compiled(torch.randn(1, 6, 15, 13))
    line = inspect.getsourcelines(DilatedDepthwise.forward)[1] + 1
    assert e.value.loc.file.endswith("test_window_sizes.py") and e.value.loc.line == line
