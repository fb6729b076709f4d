"""`random_uniform`'s generator is Philox4x32-10: Random123's known answers, and its scalar form in cases_random."""
import numpy as np
import pytest

from cuvil.ops.random import philox4x32

from .cases_random import philox_scalar

# Random123's kat_vectors for philox4x32 with 10 rounds: counter, key, result
KNOWN = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
         ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
         ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
          (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


@pytest.mark.parametrize("counter, key, want", KNOWN)
def test_known_answers(counter, key, want):
    assert tuple(int(w) for w in philox4x32(*counter, *key)) == want
    assert tuple(philox_scalar(list(counter), *key)) == want


def test_vectorised_form_matches_the_scalar_one():
    rng = np.random.default_rng(0)
    c = rng.integers(0, 2 ** 32, size=(4, 50), dtype=np.uint64)
    words = philox4x32(*c, 0x12345678, 0x9ABCDEF0)
    for j in range(50):
        assert [int(w[j]) for w in words] == philox_scalar([int(v) for v in c[:, j]], 0x12345678, 0x9ABCDEF0)
