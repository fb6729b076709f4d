"""Library emitters for the linear-algebra ops (cuvil/ops/linalg.py): det, slogdet, lu_factor, inv, solve, cholesky,
geqrf, householder_product, svd, eigh, matrix_exp.

One matrix at a time, in a float64 copy (scratch): LU with partial pivoting in LAPACK getf2's order, substitution
with its factors, Cholesky-Banachiewicz, Householder QR with LAPACK's reflectors, one-sided Jacobi SVD, cyclic
Jacobi for symmetric eigenproblems, and scaling and squaring with the [13/13] Pade approximant. The batch is cut into
up to SLOTS contiguous chunks, each with its own copy of the scratch, which run on separate threads when the batch
has enough work.
"""
from __future__ import annotations

from .c_exprs import c_string, load, store_value
from .library_util import c_dim, open_block, par_if, prod, scratch_parts

SLOTS = 8  # chunks of the batch that may run side by side: the scratch is SLOTS times one matrix's

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


ORTH_C = """/* Householder QR of the m x n row-major a in place (LAPACK geqr2 with dlarfg's reflectors): R on and above
 * the diagonal, v_j below it (v_j's leading 1 implied), tau[j] with H_j = I - tau_j v_j v_j^T; a column already zero
 * below the diagonal gets tau = 0. */
static void cuvil_geqr2(double *a, int64_t m, int64_t n, double *tau)
{
    for (int64_t j = 0; j < CUVIL_MIN(m, n); j++) {
        double alpha = a[j * n + j], xnorm = 0.0;
        for (int64_t i = j + 1; i < m; i++) xnorm += a[i * n + j] * a[i * n + j];
        tau[j] = 0.0;
        if (xnorm == 0.0) continue;
        double beta = -copysign(hypot(alpha, sqrt(xnorm)), alpha);
        tau[j] = (beta - alpha) / beta;
        for (int64_t i = j + 1; i < m; i++) a[i * n + j] /= alpha - beta;
        a[j * n + j] = beta;
        for (int64_t c = j + 1; c < n; c++) {
            double w = a[j * n + c];
            for (int64_t i = j + 1; i < m; i++) w += a[i * n + j] * a[i * n + c];
            w *= tau[j];
            a[j * n + c] -= w;
            for (int64_t i = j + 1; i < m; i++) a[i * n + c] -= w * a[i * n + j];
        }
    }
}

/* q (m x n) := the first n columns of H_0 ... H_{k-1}, v_i read below the diagonal of the m x n matrix a. */
static void cuvil_orgqr(const double *a, int64_t m, int64_t n, const double *tau, int64_t k, double *q)
{
    for (int64_t e = 0; e < m * n; e++) q[e] = e / n == e % n ? 1.0 : 0.0;
    for (int64_t i = k - 1; i >= 0; i--)
        for (int64_t c = 0; c < n; c++) {
            double w = q[i * n + c];
            for (int64_t r = i + 1; r < m; r++) w += a[r * n + i] * q[r * n + c];
            w *= tau[i];
            q[i * n + c] -= w;
            for (int64_t r = i + 1; r < m; r++) q[r * n + c] -= w * a[r * n + i];
        }
}

/* The plane rotation (x, y) := (c x - s y, s x + c y) of two length-n vectors. */
static void cuvil_rotate(double *x, double *y, int64_t n, int64_t stride, double c, double s)
{
    for (int64_t i = 0; i < n; i++) {
        double u = x[i * stride], v = y[i * stride];
        x[i * stride] = c * u - s * v;
        y[i * stride] = s * u + c * v;
    }
}

/* -1 where the vector's entry of largest magnitude (the first of equals) is negative, else 1: the sign convention. */
static double cuvil_peak_sign(const double *col, int64_t len)
{
    int64_t best = 0;
    for (int64_t i = 1; i < len; i++)
        if (fabs(col[i]) > fabs(col[best])) best = i;
    return len && col[best] < 0 ? -1.0 : 1.0;
}

/* Swap columns p and q (each len doubles) of a column-major block. */
static void cuvil_swap_columns(double *x, int64_t len, int64_t p, int64_t q)
{
    for (int64_t i = 0; i < len; i++) {
        double t = x[p * len + i]; x[p * len + i] = x[q * len + i]; x[q * len + i] = t;
    }
}

/* One-sided (Hestenes) Jacobi SVD of k column vectors w (each len >= k long, column-major): afterwards the columns
 * are orthogonal, s[j] their norms (descending), v (k x k, column-major) the rotations, and the columns of w are
 * normalised; a zero column is replaced by a unit vector orthogonal to those before it. */
static void cuvil_jacobi_svd(double *w, int64_t len, int64_t k, double *v, double *s)
{
    for (int64_t e = 0; e < k * k; e++) v[e] = e / k == e % k ? 1.0 : 0.0;
    for (int sweep = 0; sweep < 80; sweep++) {
        int rotated = 0;
        for (int64_t p = 0; p < k; p++)
            for (int64_t q = p + 1; q < k; q++) {
                double *wp = w + p * len, *wq = w + q * len, alpha = 0.0, beta = 0.0, gamma = 0.0;
                for (int64_t i = 0; i < len; i++) {
                    alpha += wp[i] * wp[i]; beta += wq[i] * wq[i]; gamma += wp[i] * wq[i];
                }
                if (!(fabs(gamma) > 1e-15 * sqrt(alpha * beta))) continue;
                rotated = 1;
                double zeta = (beta - alpha) / (2.0 * gamma);
                double t = copysign(1.0, zeta) / (fabs(zeta) + hypot(1.0, zeta)), c = 1.0 / hypot(1.0, t);
                cuvil_rotate(wp, wq, len, 1, c, c * t);
                cuvil_rotate(v + p * k, v + q * k, k, 1, c, c * t);
            }
        if (!rotated) break;
    }
    for (int64_t j = 0; j < k; j++) {
        s[j] = 0.0;
        for (int64_t i = 0; i < len; i++) s[j] += w[j * len + i] * w[j * len + i];
        s[j] = sqrt(s[j]);
    }
    for (int64_t j = 0; j < k; j++) {  /* selection sort, descending */
        int64_t best = j;
        for (int64_t i = j + 1; i < k; i++) if (s[i] > s[best]) best = i;
        if (best == j) continue;
        double t = s[j]; s[j] = s[best]; s[best] = t;
        cuvil_swap_columns(w, len, j, best);
        cuvil_swap_columns(v, k, j, best);
    }
    for (int64_t j = 0; j < k; j++) {
        double *col = w + j * len;
        if (s[j] > 0.0) {
            for (int64_t i = 0; i < len; i++) col[i] /= s[j];
            continue;
        }
        for (int64_t e = 0; e < len; e++) {  /* complete: the first unit vector with a part orthogonal to 0..j-1 */
            double norm = 0.0;
            for (int64_t i = 0; i < len; i++) col[i] = i == e ? 1.0 : 0.0;
            for (int pass = 0; pass < 2; pass++)
                for (int64_t l = 0; l < j; l++) {
                    double d = 0.0;
                    for (int64_t i = 0; i < len; i++) d += w[l * len + i] * col[i];
                    for (int64_t i = 0; i < len; i++) col[i] -= d * w[l * len + i];
                }
            for (int64_t i = 0; i < len; i++) norm += col[i] * col[i];
            if (norm > 0.25) {
                for (int64_t i = 0; i < len; i++) col[i] /= sqrt(norm);
                break;
            }
        }
    }
}

/* Cyclic Jacobi eigen-decomposition of the symmetric n x n row-major a (overwritten): w ascending, the eigenvectors
 * in the columns of v (column-major here: v[j * n + i] is entry i of vector j), each with its peak positive. */
static void cuvil_jacobi_eigh(double *a, int64_t n, double *v, double *w)
{
    double total = 0.0;
    for (int64_t e = 0; e < n * n; e++) { v[e] = e / n == e % n ? 1.0 : 0.0; total += a[e] * a[e]; }
    for (int sweep = 0; sweep < 80; sweep++) {
        double off = 0.0;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
        if (!(off > 1e-30 * total)) break;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                if (a[p * n + q] == 0.0) continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * a[p * n + q]);
                double t = copysign(1.0, theta) / (fabs(theta) + hypot(1.0, theta)), c = 1.0 / hypot(1.0, t);
                cuvil_rotate(a + p, a + q, n, n, c, c * t);          /* columns: A J */
                cuvil_rotate(a + p * n, a + q * n, n, 1, c, c * t);  /* rows: J^T A J */
                a[p * n + q] = a[q * n + p] = 0.0;
                cuvil_rotate(v + p * n, v + q * n, n, 1, c, c * t);
            }
    }
    for (int64_t j = 0; j < n; j++) w[j] = a[j * n + j];
    for (int64_t j = 0; j < n; j++) {  /* selection sort, ascending */
        int64_t best = j;
        for (int64_t i = j + 1; i < n; i++) if (w[i] < w[best]) best = i;
        if (best != j) {
            double t = w[j]; w[j] = w[best]; w[best] = t;
            cuvil_swap_columns(v, n, j, best);
        }
        double sign = cuvil_peak_sign(v + j * n, n);
        for (int64_t i = 0; i < n; i++) v[j * n + i] *= sign;
    }
}

/* z := x y for n x n row-major matrices (z distinct from both). */
static void cuvil_matmul_nn(const double *x, const double *y, int64_t n, double *z)
{
    for (int64_t i = 0; i < n; i++) {
        for (int64_t c = 0; c < n; c++) z[i * n + c] = 0.0;
        for (int64_t p = 0; p < n; p++)
            for (int64_t c = 0; c < n; c++) z[i * n + c] += x[i * n + p] * y[p * n + c];
    }
}

/* z := (z or 0) + c0 I + c1 x + c2 y + c3 w, elementwise on n x n matrices. */
static void cuvil_combine(double *z, int add, int64_t n, double c0, double c1, const double *x, double c2,
                          const double *y, double c3, const double *w)
{
    for (int64_t e = 0; e < n * n; e++)
        z[e] = (add ? z[e] : 0.0) + (e / n == e % n ? c0 : 0.0) + c1 * x[e] + c2 * y[e] + c3 * w[e];
}

/* exp(a) of the n x n matrix a into *out (one of the buffers): scaling and squaring with the [13/13] Pade
 * approximant (Higham 2005), as ops/linalg.py's reference; b is scratch of 6 n x n matrices, piv n. */
static double *cuvil_matrix_exp(double *a, int64_t n, double *b, int64_t *piv)
{
    static const double c[14] = {64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
                                 129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
                                 40840800., 960960., 16380., 182., 1.};
    double *a2 = b, *a4 = b + n * n, *a6 = b + 2 * n * n, *t1 = b + 3 * n * n, *t2 = b + 4 * n * n;
    double *t3 = b + 5 * n * n, norm = 0.0, sign;
    for (int64_t col = 0; col < n; col++) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += fabs(a[i * n + col]);
        norm = sum > norm || sum != sum ? sum : norm;
    }
    if (!isfinite(norm)) {  /* an entry inf or NaN: NaN throughout */
        for (int64_t e = 0; e < n * n; e++) a[e] = NAN;
        return a;
    }
    int squarings = norm > 5.371920351148152 ? (int)ceil(log2(norm / 5.371920351148152)) : 0;
    for (int64_t e = 0; e < n * n; e++) a[e] = ldexp(a[e], -squarings);
    cuvil_matmul_nn(a, a, n, a2);
    cuvil_matmul_nn(a2, a2, n, a4);
    cuvil_matmul_nn(a4, a2, n, a6);
    cuvil_combine(t1, 0, n, 0.0, c[13], a6, c[11], a4, c[9], a2);
    cuvil_matmul_nn(a6, t1, n, t2);
    cuvil_combine(t2, 1, n, c[1], c[7], a6, c[5], a4, c[3], a2);
    cuvil_matmul_nn(a, t2, n, t1);  /* u */
    cuvil_combine(t3, 0, n, 0.0, c[12], a6, c[10], a4, c[8], a2);
    cuvil_matmul_nn(a6, t3, n, t2);
    cuvil_combine(t2, 1, n, c[0], c[6], a6, c[4], a4, c[2], a2);  /* v */
    for (int64_t e = 0; e < n * n; e++) { a2[e] = t2[e] - t1[e]; a4[e] = t2[e] + t1[e]; }  /* v - u, v + u */
    if (cuvil_lu(a2, n, n, piv, &sign)) for (int64_t e = 0; e < n * n; e++) a4[e] = NAN;
    else cuvil_lu_solve(a2, piv, n, a4, n);
    double *r = a4, *spare = t3;
    for (int s = 0; s < squarings; s++) {
        cuvil_matmul_nn(r, r, n, spare);
        double *t = r; r = spare; spare = t;
    }
    return r;
}
"""


LDL_C = """/* Swap x[i * sx] and y[i * sy] for i < count. */
static void cuvil_swap_strided(double *x, int64_t sx, double *y, int64_t sy, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        double t = x[i * sx]; x[i * sx] = y[i * sy]; y[i * sy] = t;
    }
}

/* Bunch-Kaufman L D L^T of the symmetric n x n row-major a from its lower triangle, in place (LAPACK sytf2 'L'):
 * piv as LAPACK's (1-based; a 2 x 2 block has -(row + 1) twice). Returns 0, or 1 + the first zero column. */
static int64_t cuvil_ldl(double *a, int64_t n, int32_t *piv)
{
    const double alpha = (1.0 + sqrt(17.0)) / 8.0;
    int64_t info = 0;
#define A_(i, j) a[(i) * n + (j)]
    for (int64_t k = 0; k < n;) {
        int64_t kstep = 1, kp = k, imax = k;
        double absakk = fabs(A_(k, k)), colmax = 0.0;
        for (int64_t i = k + 1; i < n; i++)
            if (fabs(A_(i, k)) > colmax) { colmax = fabs(A_(i, k)); imax = i; }
        if ((absakk > colmax ? absakk : colmax) == 0.0 || absakk != absakk) {
            if (!info) info = k + 1;
        } else {
            if (!(absakk >= alpha * colmax)) {
                double rowmax = 0.0;
                for (int64_t j = k; j < imax; j++) rowmax = fabs(A_(imax, j)) > rowmax ? fabs(A_(imax, j)) : rowmax;
                for (int64_t i = imax + 1; i < n; i++) rowmax = fabs(A_(i, imax)) > rowmax ? fabs(A_(i, imax)) : rowmax;
                if (!(absakk >= alpha * colmax * (colmax / rowmax))) {
                    kp = imax;
                    if (!(fabs(A_(imax, imax)) >= alpha * rowmax)) kstep = 2;
                }
            }
            int64_t kk = k + kstep - 1;
            if (kp != kk) {
                cuvil_swap_strided(&A_(kp + 1, kk), n, &A_(kp + 1, kp), n, n - kp - 1);
                cuvil_swap_strided(&A_(kk + 1, kk), n, &A_(kp, kk + 1), 1, kp - kk - 1);
                cuvil_swap_strided(&A_(kk, kk), 0, &A_(kp, kp), 0, 1);
                if (kstep == 2) cuvil_swap_strided(&A_(k + 1, k), 0, &A_(kp, k), 0, 1);
            }
            if (kstep == 1) {
                double d11 = 1.0 / A_(k, k);
                for (int64_t j = k + 1; j < n; j++)
                    for (int64_t i = j; i < n; i++) A_(i, j) -= d11 * A_(i, k) * A_(j, k);
                for (int64_t i = k + 1; i < n; i++) A_(i, k) *= d11;
            } else if (k < n - 2) {
                double d21 = A_(k + 1, k), d11 = A_(k + 1, k + 1) / d21, d22 = A_(k, k) / d21;
                d21 = 1.0 / (d11 * d22 - 1.0) / d21;
                for (int64_t j = k + 2; j < n; j++) {
                    double wk = d21 * (d11 * A_(j, k) - A_(j, k + 1)), wkp1 = d21 * (d22 * A_(j, k + 1) - A_(j, k));
                    for (int64_t i = j; i < n; i++) A_(i, j) -= A_(i, k) * wk + A_(i, k + 1) * wkp1;
                    A_(j, k) = wk;
                    A_(j, k + 1) = wkp1;
                }
            }
        }
        piv[k] = (int32_t)(kstep == 1 ? kp + 1 : -(kp + 1));
        if (kstep == 2) piv[k + 1] = piv[k];
        k += kstep;
    }
#undef A_
    return info;
}
"""


def _setup(gen, depth: int, op, pointers: dict, parts: list) -> tuple:
    """Open the op's block with its buffers and per-chunk scratch, then the (threaded) loop over chunks of the batch
    and the loop over a chunk's matrices, each copied into `a`; returns (depth inside that loop, n as C)."""
    gen.helpers["cuvil_linalg"] = LINALG_C
    x = op.operands[0]
    m, n = (c_dim(s) for s in x.type.shape[-2:])
    d = open_block(gen, depth, op, pointers)
    parts = [("a", "double", f"{m} * {n}"), ("piv", "int64_t", m)] + parts
    batch = c_dim(prod(x.type.shape[:-2]))
    slots = f"CUVIL_MIN({batch}, {SLOTS})"  # the arena is sized before the block runs: no locals in the sizes
    gen.line(d, f"const int64_t batch = {batch}, slots = {slots};")
    scratch_parts(gen, d, [(f"{name}_slots", ctype, f"{slots} * ({count})") for name, ctype, count in parts])
    gen.line(d, f"#pragma omp parallel for {par_if(f'batch * {m} * {n} * {n}')}")
    gen.line(d, "for (int64_t slot = 0; slot < slots; slot++) {")
    for name, ctype, count in parts:
        gen.line(d + 1, f"{ctype} *restrict {name} = {name}_slots + slot * ({count});")
    gen.line(d + 1, "for (int64_t t = slot * batch / slots; t < (slot + 1) * batch / slots; t++) {")
    element = load(x.type.dtype, "x", f"t * {m} * {n} + e")
    gen.line(d + 2, f"for (int64_t e = 0; e < {m} * {n}; e++) a[e] = (double){element};")
    return d + 2, n


def _close(gen, depth: int) -> None:
    for k in range(1, 4):
        gen.line(depth - k, "}")


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
    d, _ = _setup_orth(gen, depth, op, {"x": op.operands[0], "y": lu, "p": piv, "info": info}, [])
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


def _setup_orth(gen, depth: int, op, pointers: dict, parts: list) -> tuple:
    """_setup, with the helpers of the orthogonal factorisations (after LINALG_C, whose LU they use)."""
    opened = _setup(gen, depth, op, pointers, parts)
    gen.helpers["cuvil_linalg_orth"] = ORTH_C
    return opened


def _geqrf(gen, op, depth: int) -> None:
    (x,), (packed, tau) = op.operands, op.results
    m, n = (c_dim(d) for d in x.type.shape[-2:])
    k = c_dim(tau.type.shape[-1])
    d, _ = _setup_orth(gen, depth, op, {"x": x, "y": packed, "tau": tau}, [("h", "double", k)])
    gen.line(d, f"cuvil_geqr2(a, {m}, {n}, h);")
    dt = packed.type.dtype
    gen.line(d, f"for (int64_t e = 0; e < {m} * {n}; e++) y[t * {m} * {n} + e] = {store_value(dt, 'a[e]')};")
    gen.line(d, f"for (int64_t i = 0; i < {k}; i++) tau[t * {k} + i] = {store_value(dt, 'h[i]')};")
    _close(gen, d)


def _householder_product(gen, op, depth: int) -> None:
    (x, tau), q = op.operands, op.results[0]
    m, n = (c_dim(d) for d in x.type.shape[-2:])
    k = c_dim(tau.type.shape[-1])
    parts = [("h", "double", k), ("q", "double", f"{m} * {n}")]
    d, _ = _setup_orth(gen, depth, op, {"x": x, "tau": tau, "y": q}, parts)
    gen.line(d, f"for (int64_t i = 0; i < {k}; i++) h[i] = (double){load(tau.type.dtype, 'tau', f't * {k} + i')};")
    gen.line(d, f"cuvil_orgqr(a, {m}, {n}, h, {k}, q);")
    gen.line(d, f"for (int64_t e = 0; e < {m} * {n}; e++) y[t * {m} * {n} + e] = {store_value(q.type.dtype, 'q[e]')};")
    _close(gen, d)


def _svd(gen, op, depth: int) -> None:
    """Jacobi on the columns of A (m >= n) or of A^T: `w` holds them column-major, `v` the k x k rotations."""
    x, (u, s, vh) = op.operands[0], op.results
    m, n = x.type.shape[-2:]
    tall, k, long_ = m >= n, min(m, n), max(m, n)
    parts = [("w", "double", long_ * k), ("v", "double", k * k), ("sv", "double", k)]
    d, _ = _setup_orth(gen, depth, op, {"x": x, "u": u, "s": s, "vh": vh}, parts)
    gen.line(d, f"for (int64_t i = 0; i < {m}; i++) for (int64_t j = 0; j < {n}; j++) "
                f"w[{'j * %d + i' % m if tall else 'i * %d + j' % n}] = a[i * {n} + j];")
    gen.line(d, f"cuvil_jacobi_svd(w, {long_}, {k}, v, sv);")
    left, right = ("w", "v") if tall else ("v", "w")  # column-major factors: U's columns, V's columns
    rows = m if tall else k
    dt = u.type.dtype
    gen.line(d, f"for (int64_t j = 0; j < {k}; j++) {{")
    gen.line(d + 1, f"double sign = cuvil_peak_sign({left} + j * {m if tall else k}, {m});")
    gen.line(d + 1, f"s[t * {k} + j] = {store_value(dt, 'sv[j]')};")
    gen.line(d + 1, f"for (int64_t i = 0; i < {m}; i++) u[(t * {m} + i) * {k} + j] = "
                    f"{store_value(dt, f'sign * {left}[j * {rows} + i]')};")
    gen.line(d + 1, f"for (int64_t i = 0; i < {n}; i++) vh[(t * {k} + j) * {n} + i] = "
                    f"{store_value(dt, f'sign * {right}[j * {k if tall else n} + i]')};")
    gen.line(d, "}")
    _close(gen, d)


def _eigh(gen, op, depth: int) -> None:
    x, (w, v) = op.operands[0], op.results
    n = c_dim(x.type.shape[-1])
    parts = [("vec", "double", f"{n} * {n}"), ("val", "double", n)]
    d, _ = _setup_orth(gen, depth, op, {"x": x, "w": w, "y": v}, parts)
    read = "i <= j" if op.attrs["upper"] else "i >= j"  # the triangle that is read, mirrored onto the other
    gen.line(d, f"for (int64_t i = 0; i < {n}; i++) for (int64_t j = 0; j < {n}; j++) "
                f"if (!({read})) a[i * {n} + j] = a[j * {n} + i];")
    gen.line(d, f"cuvil_jacobi_eigh(a, {n}, vec, val);")
    dt = v.type.dtype
    gen.line(d, f"for (int64_t j = 0; j < {n}; j++) w[t * {n} + j] = {store_value(dt, 'val[j]')};")
    gen.line(d, f"for (int64_t e = 0; e < {n} * {n}; e++) y[t * {n} * {n} + e] = "
                f"{store_value(dt, f'vec[(e % {n}) * {n} + e / {n}]')};")
    _close(gen, d)


def _matrix_exp(gen, op, depth: int) -> None:
    x, y = op.operands[0], op.results[0]
    n = c_dim(x.type.shape[-1])
    d, _ = _setup_orth(gen, depth, op, {"x": x, "y": y}, [("b", "double", f"6 * {n} * {n}")])
    gen.line(d, f"const double *r = cuvil_matrix_exp(a, {n}, b, piv);")
    gen.line(d, f"for (int64_t e = 0; e < {n} * {n}; e++) y[t * {n} * {n} + e] = {store_value(y.type.dtype, 'r[e]')};")
    _close(gen, d)


def _ldl_factor(gen, op, depth: int) -> None:
    x, (ld, piv, info) = op.operands[0], op.results
    n = c_dim(x.type.shape[-1])
    d, _ = _setup(gen, depth, op, {"x": x, "y": ld, "p": piv, "info": info}, [])
    gen.helpers["cuvil_linalg_ldl"] = LDL_C
    gen.line(d, f"info[t] = (int32_t)cuvil_ldl(a, {n}, p + t * {n});")
    gen.line(d, f"for (int64_t e = 0; e < {n} * {n}; e++) y[t * {n} * {n} + e] = "
                f"e % {n} <= e / {n} ? {store_value(ld.type.dtype, 'a[e]')} : {store_value(ld.type.dtype, '0.0')};")
    _close(gen, d)


EMITTERS.update({"ldl_factor": _ldl_factor, "geqrf": _geqrf, "householder_product": _householder_product, "svd": _svd,
                 "eigh": _eigh, "matrix_exp": _matrix_exp})
