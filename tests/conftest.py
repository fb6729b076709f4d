"""Tests compile generated C at -O1: the code is the same, the C compiler is about three times faster.
Benchmarks use the real flags (-O3)."""
import os

os.environ.setdefault("CUVIL_OPT_LEVEL", "1")
# Verify the IR after every pass (compile_module skips it by default: it costs more than the passes), and keep
# compiled artifacts out of the shared cache (tests that exercise it give it a folder of their own).
os.environ.setdefault("CUVIL_VERIFY", "1")
os.environ.setdefault("CUVIL_ARTIFACT_CACHE", "0")

from tests.fuzz.summary import pytest_runtest_logreport, pytest_terminal_summary  # noqa: E402, F401 - fuzz counts

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def cuda_compiler():
    """A CUDA C compiler (NVRTC from the pip wheel, or nvcc), never a GPU; tests that need one skip without it."""
    from cuvil.backends.cuda import toolchain
    from cuvil.errors import UnsupportedError

    try:
        return toolchain.compiler()
    except UnsupportedError as e:
        pytest.skip(str(e))
