"""The CUDA backend's tests need a CUDA C compiler (NVRTC from the pip wheel, or nvcc), never a GPU."""
import pytest

from cuvil.backends.cuda import toolchain
from cuvil.errors import UnsupportedError


@pytest.fixture(scope="session")
def cuda_compiler():
    try:
        return toolchain.compiler()
    except UnsupportedError as e:
        pytest.skip(str(e))
