"""Generated CUDA C run on the host, for the tests: the kernels built by g++ with CUVIL_CUDA_EMULATION (cuvil_cuda.h:
each kernel one thread of one block, its grid-stride loops doing all the work), launched by the fake driver on its
host-backed memory, GEMMs by NumPy. It checks what the kernels compute, not what a GPU does with them (warps,
barriers, atomics, launch shapes): kernels that need real lanes (the attention kernel) are not emulated."""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from cuvil.backends.cuda import backend, toolchain
from tests.backends.cuda.fake_driver import FakeBlas, FakeDriver

FOLDER = Path(tempfile.gettempdir()) / f"cuvil-cuda-emulation-{os.getuid()}"


def host_library(source: str) -> ctypes.CDLL:
    """`source` (a program's CUDA C) built for the host, cached by its hash."""
    header = b"".join(toolchain.headers().values()).decode()
    key = hashlib.sha256((source + header).encode()).hexdigest()[:24]
    lib = FOLDER / f"{key}.so"
    if not lib.exists():
        FOLDER.mkdir(exist_ok=True)
        src = FOLDER / f"{key}.{os.getpid()}.cpp"
        src.write_text(source)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-DCUVIL_CUDA_EMULATION",
                        *(f"-I{d}" for d in toolchain.header_dirs()), "-w", "-o", str(tmp), str(src)], check=True)
        os.replace(tmp, lib)
        src.unlink()
    return ctypes.CDLL(str(lib))


def emulated(module, library=None, prefix: str = ""):
    """A CudaFunction of `module` (after the CUDA pipeline) whose kernels run on the host; `library`/`prefix`: a
    host build holding several programs' kernels renamed apart."""
    d = FakeDriver()
    run = backend.build(module, archs=(), driver=d, blas=lambda: FakeBlas(d, compute=True))
    d.library = library or host_library(run.built.program.source)
    d.prefix = prefix
    return run.function
