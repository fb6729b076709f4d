"""`cuvil.jit(dynamic=True)` on windowed torch functions: inputs smaller than the window raise a ShapeError that
names the source line and the sizes, as PyTorch raises, instead of NumPy's ValueError or an empty result."""
import inspect

import pytest
import torch.nn.functional as F

import cuvil

from .helpers import assert_same, t32

WEIGHT = t32(6, 1, 5, 5)


def dilated_depthwise(x):
    return F.conv2d(x, WEIGHT, padding=2, dilation=(1, 4), groups=6)


def pool(x):
    return F.max_pool2d(x, 3)


def average(x):
    return F.avg_pool2d(x, 2, stride=2)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
@pytest.mark.parametrize("fn, small, words", [
    (dilated_depthwise, (1, 6, 8, 7), "'conv': the dilated 5x5 window spans 17 columns but the padded input has 11"),
    (pool, (1, 6, 2, 9), "'max_pool': the 3x3 window spans 3 rows but the padded input has 2"),
    (average, (2, 3, 5, 1), "'avg_pool': the 2x2 window spans 2 columns but the padded input has 1"),
])
def test_inputs_smaller_than_the_window_name_the_line(fn, small, words, target):
    f = cuvil.jit(fn, target=target, dynamic=True)
    for shape in ((1, 6, 20, 30), (2, 6, 9, 21)):
        x = t32(*shape[:1], small[1], *shape[2:])
        assert_same(f(x), fn(x), rtol=1e-4, atol=1e-5)
    x = t32(*small)
    with pytest.raises(RuntimeError):  # PyTorch refuses it
        fn(x)
    line = inspect.getsourcelines(fn)[1] + 1
    with pytest.raises(cuvil.ShapeError, match=words) as e:
        f(x)
    assert e.value.loc.file.endswith("test_window_sizes.py") and e.value.loc.line == line
    assert f"line {line}, in {fn.__name__}" in str(e.value)
