"""What a compiled function returns: dicts and named tuples, and values whose dtype differs between branches."""
import collections

import numpy as np
import pytest
import torch

import cuvil

from .helpers import TARGET, check_sizes, f32, t32

Stats = collections.namedtuple("Stats", ["mean", "spread"])


def as_dict(x):
    out = {"sum": x.sum(axis=0), "scaled": x * 2}
    out["max"] = x.max()
    return out


def as_namedtuple(x):
    return Stats(x.mean(axis=1), spread=x.max(axis=1) - x.min(axis=1))


def nested(x):
    return {"stats": as_namedtuple(x), "rows": [x[0], x[-1]], "n": x.shape[0]}


def dict_in_branches(x):
    if x.sum() > 0:
        return dict(a=x, b=x.sum())
    return dict(a=-x, b=x.max())


def test_dicts_and_named_tuples_come_back_as_built():
    for fn in (as_dict, as_namedtuple, nested, dict_in_branches):
        check_sizes(fn, lambda n: (f32(n, 3),), (2, 5))
    got = cuvil.jit(as_namedtuple, target=TARGET)(f32(4, 3))
    assert type(got) is Stats


def mixed_dtypes(x):
    if x.sum() > 0:
        return x.astype(np.float64) * 2
    return x


def mixed_names(x, k):
    y = k  # an int tensor on one path, a float tensor on the other
    if x.mean() > 0:
        y = x
    return y * 2


def torch_mixed(x):
    if x.sum() > 0:
        return x.to(torch.int32)
    return x * 0.5


def test_branches_with_different_dtypes_promote_as_where_does():
    for n in (2, 5):
        for x in (np.abs(f32(n, 3)), -np.abs(f32(n, 3))):
            got = cuvil.jit(mixed_dtypes, target=TARGET)(x)
            assert got.dtype == np.float64
            np.testing.assert_allclose(got, mixed_dtypes(x))
            k = np.arange(3 * n, dtype=np.int32).reshape(n, 3)
            got = cuvil.jit(mixed_names, target=TARGET)(x, k)
            assert got.dtype == np.result_type(np.float32, np.int32)
            np.testing.assert_allclose(got, mixed_names(x, k))
            t = torch.from_numpy(x)
            got = cuvil.jit(torch_mixed, target=TARGET)(t)
            assert got.dtype == torch.float32  # torch.promote_types(int32, float32)
            torch.testing.assert_close(got, torch_mixed(t).to(torch.float32))


def mixed_shapes(x):
    if x.sum() > 0:
        return x
    return x[0]


def test_returns_that_cannot_merge_point_at_the_returns():
    with pytest.raises(cuvil.ShapeError, match="returned at lines") as info:
        cuvil.jit(mixed_shapes, target=TARGET)(f32(3, 2))
    assert info.value.loc.line == mixed_shapes.__code__.co_firstlineno + 2


def torch_dict(x):
    return {"sum": x.sum(dim=0), "max": torch.max(x, dim=1)}


def test_torch_dict_results():
    check_sizes(torch_dict, lambda n: (t32(n, 3),), (2, 5))
