"""Cases for `random_uniform`, against a scalar Philox4x32-10 written out here (checked on Random123's known
answers in tests/ops/test_random.py), so the oracle is independent of the op's vectorised reference."""
import numpy as np

from .cases import Case

MASK = 0xFFFFFFFF


def philox_scalar(c: list, k0: int, k1: int) -> list:
    """Philox4x32-10 on Python ints, as Random123 writes it."""
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK]
        k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
    return c


def uniform(counters, seed: int, stream: int, dtype):
    out = []
    for n in np.asarray(counters, np.int64).ravel().view(np.uint64).tolist():
        w = philox_scalar([n & MASK, n >> 32, stream, 0], seed & MASK, seed >> 32)
        out.append((w[0] >> 8) * 2.0 ** -24 if dtype == np.float32 else (((w[0] << 32) | w[1]) >> 11) * 2.0 ** -53)
    return np.array(out, dtype).reshape(np.shape(counters))


COUNTERS = np.array([[0, 1, 2, 3], [2 ** 40 + 7, -1, -2 ** 63, 12345]], np.int64)
CASES = [
    Case("random_uniform", [COUNTERS], {"seed": 42}, expected=lambda xs: [uniform(xs[0], 42, 0, np.float32)],
         rtol=0, atol=0),
    Case("random_uniform", [COUNTERS], {"seed": 2 ** 62 + 99, "stream": 7, "dtype": "f64"}, rtol=0, atol=0,
         expected=lambda xs: [uniform(xs[0], 2 ** 62 + 99, 7, np.float64)], id="f64-stream"),
]
