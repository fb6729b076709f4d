"""Library emitters for the linear-algebra ops (cuvil/ops/linalg.py): det, slogdet, lu_factor, inv, solve, cholesky.

One matrix at a time, in a float64 copy (scratch), with the same algorithms as the references: LU with partial
pivoting in LAPACK getf2's order, substitution with its factors, and Cholesky-Banachiewicz. The matrices of a batch
run one after another: the sizes these ops see are small, and one copy of the scratch serves them all.
"""
from __future__ import annotations

from .c_exprs import c_string, load, store_value
from .library_util import c_dim, open_block, prod, scratch_parts

LINALG_C = """/* LU with partial pivoting of the m x n row-major matrix a, in place (LAPACK getf2's order): piv[j] is
 * the row swapped with row j (j < min(m, n)), *sign the permutation's sign. Returns 0, or 1 + the first column whose
 * pivot is exactly zero (that column is left uneliminated, as getf2 does). */
static int64_t cuvil_lu(double *a, int64_t m, int64_t n, int64_t *piv, double *sign)
{
    int64_t info = 0;
    *sign = 1.0;
    for (int64_t j = 0; j < CUVIL_MIN(m, n); j++) {
        int64_t p = j;
        for (int64_t i = j + 1; i < m; i++)
            if (fabs(a[i * n + j]) > fabs(a[p * n + j])) p = i;
        piv[j] = p;
        if (a[p * n + j] == 0.0) {
            if (!info) info = j + 1;
            continue;
        }
        if (p != j) {
            *sign = -*sign;
            for (int64_t c = 0; c < n; c++) {
                double t = a[j * n + c]; a[j * n + c] = a[p * n + c]; a[p * n + c] = t;
            }
        }
        for (int64_t i = j + 1; i < m; i++) {
            double f = a[i * n + j] /= a[j * n + j];
            for (int64_t c = j + 1; c < n; c++) a[i * n + c] -= f * a[j * n + c];
        }
    }
    return info;
}

/* B (n x k) := A^-1 B with the factors of cuvil_lu: the row swaps, then unit-lower and upper substitution. */
static void cuvil_lu_solve(const double *lu, const int64_t *piv, int64_t n, double *b, int64_t k)
{
    for (int64_t j = 0; j < n; j++)
        if (piv[j] != j)
            for (int64_t c = 0; c < k; c++) {
                double t = b[j * k + c]; b[j * k + c] = b[piv[j] * k + c]; b[piv[j] * k + c] = t;
            }
    for (int64_t i = 0; i < n; i++)
        for (int64_t p = 0; p < i; p++)
            for (int64_t c = 0; c < k; c++) b[i * k + c] -= lu[i * n + p] * b[p * k + c];
    for (int64_t i = n - 1; i >= 0; i--) {
        for (int64_t p = i + 1; p < n; p++)
            for (int64_t c = 0; c < k; c++) b[i * k + c] -= lu[i * n + p] * b[p * k + c];
        for (int64_t c = 0; c < k; c++) b[i * k + c] /= lu[i * n + i];
    }
}

/* The lower Cholesky factor of the n x n matrix a (its lower half is read) into l, upper half zero. Returns 0, or
 * 1 + the order of the first leading minor that is not positive definite. */
static int64_t cuvil_cholesky(const double *a, int64_t n, double *l)
{
    for (int64_t t = 0; t < n * n; t++) l[t] = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double s = a[j * n + j];
        for (int64_t p = 0; p < j; p++) s -= l[j * n + p] * l[j * n + p];
        if (!(s > 0.0)) return j + 1;
        l[j * n + j] = sqrt(s);
        for (int64_t i = j + 1; i < n; i++) {
            double v = a[i * n + j];
            for (int64_t p = 0; p < j; p++) v -= l[i * n + p] * l[j * n + p];
            l[i * n + j] = v / l[j * n + j];
        }
    }
    return 0;
}
"""


def _setup(gen, depth: int, op, pointers: dict, parts: list) -> tuple:
    """Open the op's block with its buffers and scratch, then the loop over matrices, each copied into `a`; returns
    (depth inside that loop, n as C)."""
    gen.helpers["cuvil_linalg"] = LINALG_C
    x = op.operands[0]
    m, n = (c_dim(s) for s in x.type.shape[-2:])
    d = open_block(gen, depth, op, pointers)
    scratch_parts(gen, d, [("a", "double", f"{m} * {n}"), ("piv", "int64_t", m)] + parts)
    gen.line(d, f"for (int64_t t = 0; t < {c_dim(prod(x.type.shape[:-2]))}; t++) {{")
    element = load(x.type.dtype, "x", f"t * {m} * {n} + e")
    gen.line(d + 1, f"for (int64_t e = 0; e < {m} * {n}; e++) a[e] = (double){element};")
    return d + 1, n


def _close(gen, depth: int) -> None:
    gen.line(depth - 1, "}")
    gen.line(depth - 2, "}")


def _det(gen, op, depth: int) -> None:
    dt = op.results[0].type.dtype
    d, n = _setup(gen, depth, op, {"x": op.operands[0], "y": op.results[0]}, [])
    gen.line(d, "double sign, det;")
    gen.line(d, f"det = cuvil_lu(a, {n}, {n}, piv, &sign) ? 0.0 : sign;")
    gen.line(d, f"for (int64_t i = 0; i < {n}; i++) det *= a[i * {n} + i];")
    gen.line(d, f"y[t] = {store_value(dt, 'det')};")
    _close(gen, d)


def _slogdet(gen, op, depth: int) -> None:
    dt = op.results[0].type.dtype
    d, n = _setup(gen, depth, op, {"x": op.operands[0], "s": op.results[0], "y": op.results[1]}, [])
    gen.line(d, "double sign, log_abs = 0.0;")
    gen.line(d, f"if (cuvil_lu(a, {n}, {n}, piv, &sign)) {{ sign = 0.0; log_abs = -INFINITY; }}")
    gen.line(d, f"else for (int64_t i = 0; i < {n}; i++) {{")
    gen.line(d + 1, f"double u = a[i * {n} + i];")
    gen.line(d + 1, "sign = u < 0 ? -sign : sign;")
    gen.line(d + 1, "log_abs += log(fabs(u));")
    gen.line(d, "}")
    gen.line(d, f"s[t] = {store_value(dt, 'sign')};")
    gen.line(d, f"y[t] = {store_value(dt, 'log_abs')};")
    _close(gen, d)


def _lu_factor(gen, op, depth: int) -> None:
    dt = op.results[0].type.dtype
    lu, piv, info = op.results
    m, n = (c_dim(s) for s in lu.type.shape[-2:])
    k = c_dim(piv.type.shape[-1])
    d, _ = _setup(gen, depth, op, {"x": op.operands[0], "y": lu, "p": piv, "info": info}, [])
    gen.line(d, "double sign;")
    gen.line(d, f"info[t] = (int32_t)cuvil_lu(a, {m}, {n}, piv, &sign);")
    gen.line(d, f"for (int64_t e = 0; e < {m} * {n}; e++) y[t * {m} * {n} + e] = {store_value(dt, 'a[e]')};")
    gen.line(d, f"for (int64_t i = 0; i < {k}; i++) p[t * {k} + i] = (int32_t)(piv[i] + 1);")
    _close(gen, d)


def _solve_into(gen, d: int, n: str, k: str, dt, fill_rhs: str) -> None:
    """Factor `a`, fill the n x k right-hand side `b` (C statement `fill_rhs`), solve, store into y and info."""
    gen.line(d, "double sign;")
    gen.line(d, f"int64_t bad = cuvil_lu(a, {n}, {n}, piv, &sign);")
    gen.line(d, f"for (int64_t e = 0; e < {n} * {k}; e++) {fill_rhs}")
    gen.line(d, f"if (!bad) cuvil_lu_solve(a, piv, {n}, b, {k});")
    gen.line(d, f"for (int64_t e = 0; e < {n} * {k}; e++) y[t * {n} * {k} + e] = bad ? {store_value(dt, 'NAN')} : "
                f"{store_value(dt, 'b[e]')};")
    gen.line(d, "info[t] = (int32_t)bad;")


def _inv(gen, op, depth: int) -> None:
    dt = op.results[0].type.dtype
    n = c_dim(op.operands[0].type.shape[-1])
    d, n = _setup(gen, depth, op, {"x": op.operands[0], "y": op.results[0], "info": op.results[1]},
                  [("b", "double", f"{n} * {n}")])
    _solve_into(gen, d, n, n, dt, f"b[e] = e / {n} == e % {n} ? 1.0 : 0.0;")
    _close(gen, d)


def _solve(gen, op, depth: int) -> None:
    rhs, (out, info) = op.operands[1], op.results
    n, k = (c_dim(s) for s in rhs.type.shape[-2:])
    d, n = _setup(gen, depth, op, {"x": op.operands[0], "r": rhs, "y": out, "info": info},
                  [("b", "double", f"{n} * {k}")])
    _solve_into(gen, d, n, k, out.type.dtype, f"b[e] = (double){load(rhs.type.dtype, 'r', f't * {n} * {k} + e')};")
    _close(gen, d)


def _cholesky(gen, op, depth: int) -> None:
    dt = op.results[0].type.dtype
    n = c_dim(op.operands[0].type.shape[-1])
    d, n = _setup(gen, depth, op, {"x": op.operands[0], "y": op.results[0], "info": op.results[1]},
                  [("l", "double", f"{n} * {n}")])
    gen.line(d, f"int64_t bad = cuvil_cholesky(a, {n}, l);")
    at = f"(e % {n}) * {n} + e / {n}" if op.attrs["upper"] else "e"
    gen.line(d, f"for (int64_t e = 0; e < {n} * {n}; e++) y[t * {n} * {n} + e] = bad ? {store_value(dt, 'NAN')} : "
                f"{store_value(dt, f'l[{at}]')};")
    gen.line(d, "info[t] = (int32_t)bad;")
    _close(gen, d)


def _lu_permutation(gen, op, depth: int) -> None:
    """Pivots come from the caller (torch.lu_solve's argument): each is checked before it moves a row."""
    piv, perm = op.operands[0], op.results[0]
    k, rows = piv.type.shape[-1], op.attrs["rows"]
    d = open_block(gen, depth, op, {"p": piv, "y": perm})
    gen.line(d, f"for (int64_t t = 0; t < {c_dim(prod(piv.type.shape[:-1]))}; t++) {{")
    gen.line(d + 1, f"int64_t *restrict row = y + t * {rows};")
    gen.line(d + 1, f"for (int64_t i = 0; i < {rows}; i++) row[i] = i;")
    gen.line(d + 1, f"for (int64_t j = 0; j < {k}; j++) {{")
    gen.line(d + 2, f"int64_t q = (int64_t)p[t * {k} + j] - 1, kept;")
    gen.line(d + 2, f"if ((uint64_t)q >= {rows}u) return cuvil_index_error({c_string(op.name)}, "
                    f"{c_string(str(op.loc))}, q, -1, {rows});")
    gen.line(d + 2, "kept = row[j]; row[j] = row[q]; row[q] = kept;")
    gen.line(d + 1, "}")
    gen.line(d, "}")
    gen.line(depth, "}")


EMITTERS = {"lu_permutation": _lu_permutation, "det": _det, "slogdet": _slogdet, "lu_factor": _lu_factor, "inv": _inv,
            "solve": _solve, "cholesky": _cholesky}
