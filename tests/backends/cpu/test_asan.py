"""Generated code under AddressSanitizer: a few programs compiled with -fsanitize=address, run in a
subprocess with libasan preloaded; any out-of-bounds access aborts it with a report."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[3]


def _libasan():
    try:
        path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return None
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan is not installed")
@pytest.mark.parametrize("program, done", [("asan_programs", "asan programs ok"),
                                           ("library_asan_programs", "library asan programs ok")])
def test_programs_are_memory_safe_under_asan(tmp_path, program, done):
    """asan_programs: whole programs with adversarial indices; library_asan_programs: every library op with
    exactly sized buffers."""
    env = {**os.environ, "LD_PRELOAD": _libasan(), "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
           "CUVIL_EXTRA_CFLAGS": "-fsanitize=address -fno-omit-frame-pointer", "CUVIL_CACHE_DIR": str(tmp_path),
           "CUVIL_OPT_LEVEL": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", f"tests.backends.cpu.{program}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    assert done in out.stdout
