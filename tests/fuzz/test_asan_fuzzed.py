"""The fuzzed models that compile, built with -fsanitize=address and run in a worker process with libasan
preloaded and exactly sized arenas (exact_arena.py): any out-of-bounds access aborts the worker, a crash.
Random graphs are called at sizes largest first, loaded mutants at symbolic sizes 4 then 1, so an undersized
call follows a larger one. ONNX Runtime is not run here: the check is memory safety, not values."""
from __future__ import annotations

import os
import subprocess

import pytest

from cuvil.backends.cpu.toolchain import cache_dir
from tests.backends.cpu.test_asan import _libasan

from .pool import run_jobs
from .seeds import SEEDS
from .settings import SEED, fuzz, scaled

GRAPHS, MUTANTS = 8, 30  # mutants per seed model: about one in six loads and is compiled


def _preload() -> str:
    """libasan, and libstdc++ with it: ASan's interceptor of C++ throws (onnx's checker throws) needs it loaded."""
    cxx = subprocess.run(["gcc", "-print-file-name=libstdc++.so.6"], capture_output=True, text=True).stdout.strip()
    return " ".join([_libasan()] + ([cxx] if os.path.isabs(cxx) and os.path.exists(cxx) else []))


def _asan_env(**extra) -> dict:
    """ASan libraries are cached apart (the key has the flags too), so that later runs skip building them."""
    return {"LD_PRELOAD": _preload(), "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "CUVIL_EXTRA_CFLAGS": "-fsanitize=address -fno-omit-frame-pointer",
            "CUVIL_CACHE_DIR": str(cache_dir() / "asan"), "CUVIL_FASTCALL": "0", "CUVIL_FUZZ_EXACT_ARENA": "1",
            "CUVIL_FUZZ_ORT": "0", **extra}


@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan is not installed")
def test_fuzzed_models_are_memory_safe_under_asan(record_property):
    jobs = [{"kind": "graph", "args": {"seed": SEED, "index": i}} for i in range(scaled(GRAPHS))]
    jobs += [{"kind": "mutant", "args": {"seed_model": name, "seed": SEED, "index": i, "compiled": True}}
             for name in sorted(SEEDS) for i in range(scaled(MUTANTS))]
    results = fuzz("under AddressSanitizer", jobs, record_property, timeout=300.0, env=_asan_env(),
                   first_timeout=1800.0)
    assert sum(r.outcome == "cuvil-only" for r in results) >= scaled(GRAPHS), "too few compiled models ran"


@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan is not installed")
def test_an_arena_64_bytes_short_is_caught():
    """The check can fail: with every arena a buffer alignment (64 bytes) shorter than the plan asks, ASan
    aborts the worker."""
    job = {"kind": "graph", "args": {"seed": 0, "index": 0}}
    [result] = run_jobs([job], 300.0, _asan_env(CUVIL_FUZZ_ARENA_SHORTFALL="64"))
    assert result.outcome == "crash" and "heap-buffer-overflow" in result.detail, result
