"""Pages of weights mapped from a file leave the resident set once read (mapped_pages.py); nothing else does, and
no value changes."""
from __future__ import annotations

import numpy as np
import pytest

from cuvil import mapped_pages

MIB = 1 << 20


def _rss_file_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("RssFile:"))


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "w.bin"
    np.arange(8 * MIB, dtype=np.float32).tofile(path)  # 32 MiB
    return path


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="reads /proc/self/status")
def test_a_read_only_mapped_weight_leaves_the_resident_set_and_reads_the_same(weights_file):
    w = np.memmap(weights_file, np.float32, "r").reshape(1024, -1)[1:]  # a view inside the mapping
    before = _rss_file_mb()
    total = float(w.sum(dtype=np.float64))
    assert _rss_file_mb() - before > 24
    mapped_pages.release(w)
    assert _rss_file_mb() - before < 4
    assert float(w.sum(dtype=np.float64)) == total


def test_private_and_copy_on_write_memory_is_left_alone(weights_file):
    cow = np.memmap(weights_file, np.float32, "c")
    cow[:4] = -1.0
    private = np.arange(1 << 20, dtype=np.float32)
    mapped_pages.release(cow)
    mapped_pages.release(private)
    assert (cow[:4] == -1.0).all() and cow[4] == 4.0 and private[-1] == (1 << 20) - 1
    assert not mapped_pages._read_only_file_map(np.memmap(weights_file, np.float32, "r+"))
    assert mapped_pages._read_only_file_map(np.frombuffer(np.memmap(weights_file, np.uint8, "r"), np.float32))
