"""Control flow: compile-time and tensor `if`, SSA merging, early return, unrolled and run-time loops."""
import numpy as np
import pytest
import torch

import cuvil

from .helpers import TARGET, check, f32

X = f32(5, 3)


def ops_of(jitted, *args) -> list:
    """The op names of the translated module (before passes), nested regions included."""
    return [op.name for op in jitted.lower(*args).main.walk()]


# -- if ----------------------------------------------------------------------------------------------------------------
def python_if(x, mode="relu", k=2):
    if mode == "relu":
        y = np.maximum(x, 0)
    elif k > 1:
        y = x * k
    else:
        y = x
    return y


def tensor_if_merge(x):
    y, n = x, 0
    if x.sum() > 0:
        y = x * 2
        z = y + 1
        n = 1
    else:
        z = x - 1
    return y, z, n + x


def nested_if(x):
    if x.mean() > 0:
        if x.max() > 1.5:
            out = x * 3
        else:
            out = x * 2
    elif x.min() < -1.5:
        out = -x
    else:
        out = x
    return out


def tuple_merge(x):
    pair = (x, x + 1)
    if x[0, 0] > 0:
        pair = (x - 1, x)
    a, b = pair
    return a * b


@pytest.mark.parametrize("fn,args", [
    (python_if, (X,)), (python_if, (X, "scale")), (python_if, (X, "id", 0)),
    (tensor_if_merge, (X,)), (tensor_if_merge, (-np.abs(X),)), (nested_if, (X,)), (nested_if, (X + 1,)),
    (nested_if, (X - 2,)), (tuple_merge, (X,)), (tuple_merge, (-X,)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_if(fn, args):
    check(fn, *args)


def test_python_if_is_decided_at_compile_time_and_tensor_if_is_a_cond():
    assert "cond" not in ops_of(cuvil.jit(python_if, target=TARGET), X)
    assert ops_of(cuvil.jit(tensor_if_merge, target=TARGET), X).count("cond") == 1


# -- early return ------------------------------------------------------------------------------------------------------
def early_return(x, threshold=0.5):
    if x.mean() > threshold:
        return torch.nn.functional.relu(x)
    else:
        return torch.sigmoid(x)


def return_then_more(x):
    if x.sum() > 0:
        return x, x.sum()
    y = x * 2
    if y.max() > 3:
        return y, y.mean()
    return -y, y.min()


def return_in_one_branch(x):
    z = x + 1
    if z.sum() < 0:
        z = z * 0
        return z
    z = z * 4
    return z


@pytest.mark.parametrize("fn,arg", [
    (early_return, torch.from_numpy(X)), (early_return, torch.from_numpy(X + 1)), (return_then_more, X),
    (return_then_more, -np.abs(X)), (return_then_more, -np.abs(X) + 0.9), (return_in_one_branch, X),
    (return_in_one_branch, X - 2),
], ids=lambda v: getattr(v, "__name__", ""))
def test_early_return(fn, arg):
    check(fn, arg)


# -- loops -------------------------------------------------------------------------------------------------------------
def unrolled(x, n=3):
    acc = x * 0
    for i in range(n):
        acc = acc + x * i
    for j, row in enumerate((x, x + 1)):
        if j == 1:
            continue
        acc = acc - row
    for k in range(10):
        if k > 1:
            break
        acc = acc * 2
    else:
        acc = acc * 100
    return acc


def python_while(x):
    n, out = 8, x
    while n > 1:
        n //= 2
        out = out + n
    return out


def runtime_range(x):
    acc = 0.0
    total = x[0] * 0
    for i in range(40):
        acc = acc + i * 0.5
        total = total + x[i % 5]
    return acc + x, total


def dim_range(x):
    s = x[0] * 0
    for i in range(x.shape[0]):
        s = s + x[i] * i
    return s


def rows(x):
    s = x[0] * 0
    for row in x:
        s = s + row * row
    return s


def tensor_while(x):
    steps = 0
    while x.sum() < 100:
        x = x * 2 + 1
        steps = steps + 1
    return x, steps


@pytest.mark.parametrize("fn,args", [
    (unrolled, (X,)), (unrolled, (X, 20)), (python_while, (X,)), (runtime_range, (X,)), (dim_range, (X,)),
    (tensor_while, (X,)), (tensor_while, (np.abs(X),)), (rows, (X,)), (rows, (f32(40, 3),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_loops(fn, args):
    check(fn, *args)


def test_small_ranges_unroll_and_long_ones_become_while_loops():
    assert "while" not in ops_of(cuvil.jit(unrolled, target=TARGET), X)
    assert ops_of(cuvil.jit(unrolled, target=TARGET), X, 20).count("while") == 1
    assert ops_of(cuvil.jit(runtime_range, target=TARGET), X).count("while") == 1
    assert ops_of(cuvil.jit(runtime_range, target=TARGET, unroll=64), X).count("while") == 0


def test_dynamic_loop_bound_serves_every_size():
    f = cuvil.jit(dim_range, target=TARGET, dynamic_dims={"x": {0: "n"}})
    for n in (1, 4, 9):
        x = f32(n, 3)
        np.testing.assert_allclose(f(x), dim_range(x), rtol=1e-5, atol=1e-6)
    assert f.compile_count == 1
    assert "while" in [op.name for op in f.module.main.walk()]


def test_loop_carried_python_number_widens_to_the_tensor_type():
    out = check(runtime_range, X)
    assert out[0].dtype == np.float32


def power(x, n):
    y = x
    for _ in range(n):
        y = y * x
    return y


def test_loop_bound_passed_at_run_time():
    f = cuvil.jit(power, target=TARGET, runtime_args=("n",))
    for n in (0, 1, 3):
        np.testing.assert_allclose(f(X, n), power(X, n), rtol=1e-5)
    assert f.compile_count == 1
    assert ops_of(cuvil.jit(rows, target=TARGET), f32(40, 3)).count("while") == 1


def rows_collected(x):
    outs = []
    for i, row in enumerate(x):
        outs.append(row * i)
    outs.extend([x[0], x[-1]])
    last = outs.pop()
    return np.stack(outs), last


def collected_in_a_tensor_branch(x):
    outs = [x]
    if x.sum() > 0:
        outs.append(x * 2)
    return outs[-1]


def test_lists_grow_where_control_flow_is_known_at_compile_time():
    check(rows_collected, f32(3, 4))
    with pytest.raises(cuvil.UnsupportedError, match=r"outs.append\(\) inside a branch on a tensor value") as info:
        cuvil.jit(collected_in_a_tensor_branch, target=TARGET)(f32(3))
    assert info.value.loc.line == collected_in_a_tensor_branch.__code__.co_firstlineno + 3


def by_shapes(x, y):
    if x.shape == y.shape and x.shape[0] in (2, 5):
        return x + y
    if x.shape != (4, 3):
        return x * 2
    return x


def test_sequences_of_run_time_sizes_compare_by_value():
    """With dynamic sizes, `x.shape == y.shape` and `n in (2, 5)` compare the sizes a call binds, not symbols."""
    f = cuvil.jit(by_shapes, target=TARGET, dynamic=True)
    for a, b in (((5, 3), (5, 3)), ((3, 3), (3, 3)), ((4, 3), (5, 3)), ((2, 4), (2, 4))):
        x, y = f32(*a), f32(*b)
        np.testing.assert_allclose(f(x, y), by_shapes(x, y), rtol=1e-6)


def walrus_and_del(x):
    if (s := x.sum()) > 0:
        x = x * s
    tmp = x + 1
    del tmp
    return x


def used_after_del(x):
    y = x + 1
    del y
    return y  # noqa: F821 (used after del on purpose)


def test_walrus_binds_and_del_unbinds():
    check(walrus_and_del, f32(3, 4))
    check(walrus_and_del, -abs(f32(3, 4)))
    with pytest.raises(cuvil.CuvilError, match=r"'y' is used after `del y` at line"):
        cuvil.jit(used_after_del, target=TARGET)(f32(3))


def with_lambdas(x, k=3):
    g = lambda z, s=2.0: np.tanh(z) * s + k  # noqa: E731 (what users write)
    fs = [lambda z, i=i: z * i for i in range(3)]
    k = 4
    return g(x), g(x, s=0.5), sum(fn(x) for fn in fs)


def test_lambdas_inline_where_called():
    check(with_lambdas, f32(3, 2))
