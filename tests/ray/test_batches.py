"""cuvil.ray's batch shaping without a cluster: columns by input name, casts, padding of short and ragged rows,
buckets for symbolic sizes, fixed batch sizes split and padded, and the errors for batches that cannot fit."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuvil.errors import ShapeError
from cuvil.runtime import Param

pytest.importorskip("ray")  # cuvil.ray imports it (BatchPlan itself needs NumPy only)
from cuvil.ray import BatchPlan  # noqa: E402


def _plan(shape, out_shape=None, dtype="f32", **kw) -> BatchPlan:
    return BatchPlan([Param("x", dtype, shape)], [Param("y", "f32", out_shape or shape)], **kw)


def test_columns_that_fit_pass_through_without_a_copy():
    x = np.ones((5, 4), np.float32)
    (inputs, rows), = _plan(("batch", 4)).calls(_plan(("batch", 4)).arrays({"x": x, "other": 1}))
    assert inputs[0] is x and rows == 5


def test_same_kind_casts_and_refused_casts():
    plan = _plan(("batch", 2))
    (a,) = plan.arrays({"x": np.ones((3, 2), np.float64)})
    assert a.dtype == np.float32
    with pytest.raises(ShapeError, match="column 'x' is float64; the model's input is i64"):
        _plan(("batch", 2), dtype="i64").arrays({"x": np.ones((3, 2))})


def test_short_rows_are_padded_to_fixed_sizes_and_long_rows_refused():
    plan = _plan(("batch", 6), pad_value={"x": -1})
    (a,) = plan.arrays({"x": np.ones((2, 4), np.float32)})
    np.testing.assert_array_equal(a, [[1, 1, 1, 1, -1, -1]] * 2)
    with pytest.raises(ShapeError, match="size 7 in axis 1, more than the model's fixed size 6"):
        plan.arrays({"x": np.ones((2, 7), np.float32)})


def test_ragged_rows_pad_to_fixed_sizes_and_symbolic_sizes_to_a_bucket():
    rows = [np.arange(3), np.arange(5), np.arange(1)]
    (fixed,) = _plan(("batch", 8), dtype="i64").arrays({"x": np.array(rows, dtype=object)})
    assert fixed.shape == (3, 8) and fixed[1].tolist() == [0, 1, 2, 3, 4, 0, 0, 0]
    (bucketed,) = _plan(("batch", "seq"), dtype="i64", bucket=4).arrays({"x": rows})
    assert bucketed.shape == (3, 8) and bucketed[0].tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
    with pytest.raises(ShapeError, match="rows of ranks"):
        _plan(("batch", 8)).arrays({"x": [np.ones(2), np.ones((2, 2))]})


def test_a_fixed_batch_is_split_and_the_last_call_padded():
    plan = _plan((4, 3))
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    calls = list(plan.calls(plan.arrays({"x": x})))
    assert [rows for _, rows in calls] == [4, 4, 2] and all(c[0].shape == (4, 3) for c, _ in calls)
    np.testing.assert_array_equal(calls[2][0][0][2:], 0)
    out = plan.columns([([c[0] * 2], rows) for c, rows in calls])
    np.testing.assert_array_equal(out["y"], x * 2)


def test_empty_batches_and_bad_batches():
    plan = _plan(("batch", 3), out_shape=("batch", 5))
    assert list(plan.calls(plan.arrays({"x": np.ones((0, 3), np.float32)}))) == []
    assert plan.columns([])["y"].shape == (0, 5)
    with pytest.raises(ShapeError, match="no column\\(s\\) 'x' for the model's inputs"):
        plan.arrays({"image": np.ones((2, 3))})
    two = BatchPlan([Param("a", "f32", ("n",)), Param("b", "f32", ("n",))], [])
    with pytest.raises(ShapeError, match="different row counts"):
        list(two.calls(two.arrays({"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)})))


def test_import_cuvil_does_not_import_ray():
    code = "import sys, cuvil, cuvil.runtime; assert 'ray' not in sys.modules, 'import cuvil imported ray'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
