"""Unsupported Python fails with a cuvil error that quotes the line with a caret and says what works instead;
fallback='python' runs the original with a warning."""
import inspect
import warnings

import numpy as np
import pytest

import cuvil
from cuvil.errors import CuvilError, ShapeError, UnsupportedError

from .helpers import TARGET, f32

X = f32(3, 4)


def line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


def raises(fn, *args, err=CuvilError, **options):
    with pytest.raises(err) as info:
        cuvil.jit(fn, target=TARGET, **options)(*args)
    return info.value


def fft(x):
    y = x + 1
    return np.fft.fft(y)


def test_unsupported_call_quotes_the_line_with_a_caret():
    e = raises(fft, X, err=UnsupportedError)
    line = line_of(fft, "np.fft.fft")
    assert e.loc.line == line and e.loc.file == __file__
    text = str(e)
    assert "np.fft.fft is not supported; supported numpy functions:" in text and "concatenate" in text
    assert f'line {line}, in fft\n    return np.fft.fft(y)\n           ^^^^^^^^^^^^^\n' in text + "\n"


def one_path(x):
    if x.sum() > 0:
        y = x * 2
    z = x + 1
    return z + y


def test_variable_bound_on_one_path_fails_where_it_is_used():
    e = raises(one_path, X)
    assert e.loc.line == line_of(one_path, "return z + y")
    assert "'y' is assigned on one path only" in str(e) and "is false" in str(e)
    assert f"`if` at line {line_of(one_path, 'if x.sum()')}" in str(e)


def kinds(x):
    y = None
    if x.sum() > 0:
        y = x
    return y


def return_kinds(x):
    if x.sum() > 0:
        return x
    return None


def test_values_of_different_kinds_on_two_paths():
    assert "on different paths" in str(raises(kinds, X))
    assert "on different paths" in str(raises(return_kinds, X))


def try_except(x):
    try:
        return x
    except ValueError:
        return x


def printing(x):
    print(x)
    return x


def bad_shapes(x, y):
    return x + y


def bool_mask(x):
    return x[x[:, 0] > 0, 0]


def ambiguous(x):
    if x > 0:
        return x
    return -x


def bad_method(x):
    return x.tobytes()


def bad_kwarg(x):
    return np.sum(x, initial=3)


@pytest.mark.parametrize("fn,args,err,needle,at", [
    (try_except, (X,), UnsupportedError, "try/except is not supported", "try:"),
    (printing, (X,), UnsupportedError, "print() is not supported", "print(x)"),
    (bad_shapes, (X, f32(2, 4)), ShapeError, "do not broadcast", "x + y"),
    (bool_mask, (X,), UnsupportedError, "a boolean mask mixed with other indices", "x[x[:, 0] > 0, 0]"),
    (ambiguous, (X,), UnsupportedError, "reduce it with .any() or .all()", "if x > 0"),
    (bad_method, (X,), UnsupportedError, "'.tobytes' is not supported; supported:", "x.tobytes()"),
    (bad_kwarg, (X,), UnsupportedError, "np.sum(): got an unexpected keyword argument 'initial'", "np.sum"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_unsupported_constructs_name_the_line(fn, args, err, needle, at):
    e = raises(fn, *args, err=err)
    assert needle in str(e)
    assert e.loc.line == line_of(fn, at) and "^" in str(e)


def test_unsupported_arguments_and_dtypes():
    with pytest.raises(UnsupportedError, match="argument 'x' of type object is not supported"):
        cuvil.jit(bad_shapes)(object(), X)
    with pytest.raises(UnsupportedError, match=r"element type c64 \(complex64\) is not supported"):
        cuvil.jit(bad_shapes)(X.astype(np.complex64), X)


def test_options_are_checked_when_decorating():
    with pytest.raises(TypeError, match="unknown option"):
        cuvil.jit(bad_shapes, fusion=True)
    with pytest.raises(ValueError, match="no parameter"):
        cuvil.jit(bad_shapes, dynamic_dims={"z": {0: "n"}})
    with pytest.raises(ValueError, match="target"):
        cuvil.jit(bad_shapes, target="gpu")


def test_fallback_runs_python_with_one_warning():
    f = cuvil.jit(fft, target=TARGET, fallback="python")
    with pytest.warns(UserWarning, match="running fft as plain Python.*np.fft.fft is not supported"):
        out = f(X)
    np.testing.assert_allclose(out, np.fft.fft(X + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(X)  # the same signature goes straight to Python
    assert f.compile_count == 0 and f.signatures == []


def scaled(x):
    y = x * 2.0
    if y.sum() > 0:
        y = y + 1.0
    return y


def test_every_op_carries_its_source_location():
    module = cuvil.jit(scaled).lower(X)
    first, last = line_of(scaled, "def scaled"), line_of(scaled, "return y")
    for op in module.main.walk():
        assert op.loc.file == __file__ and first <= op.loc.line <= last, (op.name, op.loc)
    mul = next(op for op in module.main.walk() if op.name == "mul")
    assert (mul.loc.line, mul.loc.col) == (line_of(scaled, "x * 2.0"), 9)


def checks_rank(x):
    if x.ndim != 2:
        raise ValueError(f"need a matrix, got {x.ndim}-D")
    return x * 2


def test_a_raise_on_python_values_raises_the_users_exception_with_the_line():
    with pytest.raises(ValueError, match="need a matrix, got 1-D") as info:
        cuvil.jit(checks_rank, target=TARGET)(f32(3))
    cause = info.value.__cause__
    assert isinstance(cause, CuvilError) and cause.loc.line == line_of(checks_rank, "raise ValueError")
