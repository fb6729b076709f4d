"""conv_int8.c and conv_lowp.c under AddressSanitizer: every path, every geometry of test_conv_int8.py, buffers sized
exactly."""
import os
import subprocess
import sys

import pytest

from tests.backends.cpu.test_asan import ROOT, _libasan


@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan is not installed")
def test_the_int8_convolution_is_memory_safe_under_asan(tmp_path):
    env = {**os.environ, "LD_PRELOAD": _libasan(), "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
           "CUVIL_EXTRA_CFLAGS": "-fsanitize=address -fno-omit-frame-pointer", "CUVIL_CACHE_DIR": str(tmp_path),
           "CUVIL_OPT_LEVEL": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "tests.quantize.qconv_asan_program"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1200)  # an ASan build of the library
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    assert "qconv asan ok" in out.stdout
