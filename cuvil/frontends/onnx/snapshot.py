"""A model file's large initializers copied into unlinked files of Cuvil's cache folder and mapped from there: what
`load_onnx(path)` does by default. Held in private memory (as the parsed message held them) the weights stayed
resident beside their packed forms through the compile and after it (BERT-base 2.05x its weights at the peak, 1.86x
after an uncached compile); mapped from a file that only this process can reach, their pages leave the resident set
once packed (mapped_pages.py) and come back from the page cache when read again, and no rewrite of the model file
can truncate the mapping (the SIGBUS that keeps mapping the model file itself opt-in, `mmap=True`). The copy is made
in the kernel (copy_file_range), page cache to page cache: no user memory; each copy is freed with its last array.
"""
from __future__ import annotations

import logging
import os
import tempfile

import numpy as np

from ...errors import SerializationError

log = logging.getLogger("cuvil.frontends.onnx")
KEY = "cuvil_copy"  # the external-data key of a reference to copy, not map: the file's stamp when it was read
_CHUNK = 1 << 20  # bytes per read and write where the kernel cannot copy between the two files


def stamp(st: os.stat_result) -> str:
    """What changes when a file is rewritten: a copy taken after that would not be the weights that were read."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def copy(path: str, offset: int, length: int, stamped: str, name: str) -> np.ndarray:
    """Bytes [offset, offset + length) of the model file as a read-only uint8 array mapped from a private copy, or
    read into memory where no copy can be written (the cache folder read-only or full)."""
    with open(path, "rb") as src:
        if stamp(os.fstat(src.fileno())) != stamped:
            raise SerializationError(f"tensor {name!r}: the model file {path!r} changed since it was read; load it "
                                     "again")
        try:
            return _mapped_copy(src.fileno(), offset, length)
        except OSError as e:
            log.debug("tensor %r: no file-backed copy (%s); reading it into memory", name, e)
        return _read(src.fileno(), offset, length, name)


def _mapped_copy(src: int, offset: int, length: int) -> np.ndarray:
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder, prefix="weights-") as dst:  # unlinked (O_TMPFILE where the kernel has it)
        _copy_range(src, dst.fileno(), offset, length)
        return np.memmap(dst, np.uint8, "r", 0, (length,))


def _folder():
    from ...backends.cpu.toolchain import cache_dir

    return cache_dir() / "weights"


def _copy_range(src: int, dst: int, offset: int, length: int) -> None:
    """Copy in the kernel where it can (copy_file_range, Linux 4.5+), else through a small buffer."""
    done = 0
    kernel = hasattr(os, "copy_file_range")
    while done < length:
        n = min(length - done, 1 << 30)
        if kernel:
            try:
                got = os.copy_file_range(src, dst, n, offset + done, done)
            except OSError:  # another file system (older kernels), or none of it: the plain way
                kernel = False
                continue
        else:
            chunk = os.pread(src, min(n, _CHUNK), offset + done)
            got = os.pwrite(dst, chunk, done) if chunk else 0
        if got == 0:
            raise OSError("the model file ended before its tensor's data")
        done += got


def _read(src: int, offset: int, length: int, name: str) -> np.ndarray:
    out = np.empty(length, np.uint8)
    view, done = memoryview(out), 0
    while done < length:
        got = os.preadv(src, [view[done:]], offset + done)
        if got == 0:
            raise SerializationError(f"tensor {name!r}: the model file ended before its data")
        done += got
    out.flags.writeable = False
    return out
