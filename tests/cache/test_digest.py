"""The weights' checksum of the torch route's cache key (cuvil/cache/digest.c): every byte, its place and the length
count; the vector forms (AVX-512, AVX2) give the plain C form's digests; threads do not change them."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cuvil.backends.cpu import toolchain
from cuvil.cache import digest

RNG = np.random.default_rng(7)


def one(data: np.ndarray) -> bytes:
    return digest.ranges_digests([data])[0]


def test_every_flipped_bit_and_every_length_is_another_digest():
    data = RNG.integers(0, 256, 5000, dtype=np.uint8)  # 4 blocks of 1 KiB, stripes and a partial stripe
    seen = {one(data[:n]) for n in range(0, 300)} | {one(data[:n]) for n in range(1000, 1100)}
    assert len(seen) == 400
    base = one(data)
    for at in (0, 3, 7, 63, 64, 1023, 1024, 4095, 4096, 4991, 4999):
        for bit in range(8):
            flipped = data.copy()
            flipped[at] ^= np.uint8(1 << bit)
            assert one(flipped) != base, (at, bit)
    assert one(np.frombuffer(b"a", np.uint8)) != one(np.frombuffer(b"a\0", np.uint8))  # the zero padding is not data


def test_moved_words_are_another_digest():
    """The same words elsewhere: two stripes swapped in a block, the same stripe of two blocks (its secret words are
    the same), two words of one stripe."""
    data = RNG.integers(0, 256, 4096, dtype=np.uint8)
    base = one(data)
    stripes = data.reshape(-1, 64)
    for i, j in ((0, 1), (3, 19), (5, 37)):
        moved = stripes.copy()
        moved[[i, j]] = moved[[j, i]]
        assert one(moved.reshape(-1)) != base, (i, j)
    words = data.view(np.uint64).copy()
    words[[0, 1]] = words[[1, 0]]
    assert one(words.view(np.uint8)) != base


@pytest.mark.parametrize("flags", [("-mno-avx512f",), ("-mno-avx2",)], ids=["avx2", "plain"])
def test_each_vector_form_gives_the_plain_digests(flags):
    if "avx2" not in toolchain.cpu_features():
        pytest.skip("the host has no AVX2: only the plain form is built")
    lib = toolchain.load_library(digest.SOURCE.read_text(), name="digest-test", opt_level=1, extra_flags=flags)
    arrays = [RNG.integers(0, 256, n, dtype=np.uint8) for n in (0, 1, 64, 1000, 1 << 16, 100003)]
    want = digest.ranges_digests(arrays)
    ptrs = np.array([a.ctypes.data for a in arrays], dtype=np.uintp)
    lens = np.array([a.size for a in arrays], dtype=np.int64)
    out = np.zeros((len(arrays), 2), dtype="<u8")
    lib.cuvil_digest_ranges.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int]
    lib.cuvil_digest_ranges(len(arrays), ptrs.ctypes.data, lens.ctypes.data, out.ctypes.data, 1)
    assert [row.tobytes() for row in out] == want


def test_threads_do_not_change_the_digests(monkeypatch):
    arrays = [RNG.integers(0, 256, n, dtype=np.uint8) for n in range(100, 3000, 97)]
    one_thread = digest.ranges_digests(arrays)
    monkeypatch.setattr(digest.container, "cpu_count", lambda: 8)
    monkeypatch.setattr(digest, "ONE_THREAD_BYTES", 0)  # these small arrays on eight threads all the same
    assert digest.ranges_digests(arrays) == one_thread
    assert digest.ranges_digests(arrays[::-1]) == one_thread[::-1]


def test_a_few_megabytes_are_digested_on_the_calling_thread(monkeypatch):
    """Helper threads would save under a millisecond there, and on a busy machine the key waits for them."""
    threads, real = [], digest._library()

    class Spy:
        def cuvil_digest_ranges(self, *args):
            threads.append(args[-1])
            return real.cuvil_digest_ranges(*args)

    monkeypatch.setattr(digest.container, "cpu_count", lambda: 8)
    monkeypatch.setattr(digest, "_library", lambda: Spy())
    small = digest.ranges_digests([np.zeros(1 << 20, np.uint8)])
    digest.ranges_digests([np.zeros(digest.ONE_THREAD_BYTES, np.uint8)])
    assert threads == [1, 8] and small == digest.ranges_digests([np.zeros(1 << 20, np.uint8)])
