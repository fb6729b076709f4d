import pytest

from cuvil.ir.symbolic import SymExpr, evaluate, free_symbols, parse_dim, sym

n, m = sym("n"), sym("m")


@pytest.mark.parametrize("expr, text", [
    (2 * n + 1, "2*n+1"), (n + n, "2*n"), (n - n, "0"), ((2 * n) // 2, "n"), ((n + 1) // 2, "(n+1)//2"),
    (n * m - 3, "m*n-3"), (4 - n, "-n+4"), ((4 * n + 2) // 2, "2*n+1"), ((2 * n) % 2, "0"), (n % 3, "n%3"),
    (n * 1, "n"), ((n + 1) * (n - 1), "n*n-1"),
])
def test_canonical_form_prints(expr, text):
    assert str(expr) == text


def test_static_collapses_to_int():
    assert type(n - n + 3) is int and n - n + 3 == 3


@pytest.mark.parametrize("text", ["n", "2*n+1", "(n+1)//2", "m*n-3", "-n+4", "n%3", "batch*seq", "((n+1)//2+1)//2",
                                  "2*(n//2)", "-(n//2)+3", "m*(n%3)", "n//2//3"])
def test_parse_round_trips(text):
    assert str(parse_dim(text)) == text
    assert parse_dim(str(parse_dim(text))) == parse_dim(text)


def test_equal_expressions_built_two_ways():
    assert (n + 1) * 2 == 2 * n + 2 and hash((n + 1) * 2) == hash(2 * n + 2)
    assert n + m == m + n


def test_evaluate_and_free_symbols():
    e = (n * m + 1) // 2
    assert evaluate(e, {"n": 3, "m": 5}) == 8
    assert free_symbols(e) == {"n", "m"} and free_symbols(4) == frozenset()
    with pytest.raises(KeyError):
        evaluate(e, {"n": 1})


@pytest.mark.parametrize("bad", ["", "2*", "(n", "n n", "n/2", "3x"])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        parse_dim(bad)


def test_division_by_symbol_is_an_error():
    with pytest.raises(TypeError):
        4 // n
    with pytest.raises(ValueError):
        n // 0
    with pytest.raises(ValueError):
        SymExpr.symbol("2bad")
