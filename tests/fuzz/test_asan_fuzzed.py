"""The fuzzed models that compile, built with -fsanitize=address and run in a worker process with libasan
preloaded and exactly sized arenas (exact_arena.py): any out-of-bounds access aborts the worker, a crash.
Random graphs are called at sizes largest first, loaded mutants at symbolic sizes 4 then 1, so an undersized
call follows a larger one. ONNX Runtime is not run here: the check is memory safety, not values."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.backends.cpu.test_asan import _libasan

from .seeds import SEEDS
from .settings import SEED, fuzz, scaled

GRAPHS, MUTANTS = 8, 30  # mutants per seed model: about one in six loads and is compiled


def _preload() -> str:
    """libasan, and libstdc++ with it: ASan's interceptor of C++ throws (onnx's checker throws) needs it loaded."""
    cxx = subprocess.run(["gcc", "-print-file-name=libstdc++.so.6"], capture_output=True, text=True).stdout.strip()
    return " ".join([_libasan()] + ([cxx] if os.path.isabs(cxx) and os.path.exists(cxx) else []))


def _asan_env(tmp_path) -> dict:
    return {"LD_PRELOAD": _preload(), "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "CUVIL_EXTRA_CFLAGS": "-fsanitize=address -fno-omit-frame-pointer", "CUVIL_CACHE_DIR": str(tmp_path),
            "CUVIL_FASTCALL": "0", "CUVIL_FUZZ_EXACT_ARENA": "1", "CUVIL_FUZZ_ORT": "0"}


@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan is not installed")
def test_fuzzed_models_are_memory_safe_under_asan(tmp_path, record_property):
    jobs = [{"kind": "graph", "args": {"seed": SEED, "index": i}} for i in range(scaled(GRAPHS))]
    jobs += [{"kind": "mutant", "args": {"seed_model": name, "seed": SEED, "index": i, "compiled": True}}
             for name in sorted(SEEDS) for i in range(scaled(MUTANTS))]
    results = fuzz("under AddressSanitizer", jobs, record_property, timeout=300.0, env=_asan_env(tmp_path))
    assert sum(r.outcome == "cuvil-only" for r in results) >= scaled(GRAPHS), "too few compiled models ran"
