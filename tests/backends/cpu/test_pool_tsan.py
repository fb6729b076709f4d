"""cuvil_pool.c under ThreadSanitizer: a C driver (pool_tsan_driver.c) with four threads calling the pool at once,
with the caller spinning for a worker's chunk (the default) and sleeping for it at once (CUVIL_WAIT_SPIN_US=0)."""
import os
import pathlib
import shutil
import subprocess

import pytest

HERE = pathlib.Path(__file__).parent
KERNELS = HERE.parents[2] / "cuvil" / "backends" / "cpu" / "kernels"


def _tsan_builds() -> bool:
    if shutil.which("gcc") is None:
        return False
    path = subprocess.run(["gcc", "-print-file-name=libtsan.so"], capture_output=True, text=True).stdout.strip()
    return os.path.isabs(path) and os.path.exists(path)


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    out = tmp_path_factory.mktemp("pool-tsan") / "pool_tsan"
    subprocess.run(["gcc", "-O1", "-g", "-fsanitize=thread", f"-I{KERNELS}", str(HERE / "pool_tsan_driver.c"),
                    str(KERNELS / "cuvil_pool.c"), "-o", str(out), "-lpthread"], check=True)
    return out


@pytest.mark.skipif(not _tsan_builds(), reason="gcc's libtsan is not installed")
@pytest.mark.parametrize("wait_spin_us", ["", "0"])
def test_the_pool_has_no_data_race_under_tsan(driver, wait_spin_us):
    env = {**os.environ, "CUVIL_WAIT_SPIN_US": wait_spin_us, "TSAN_OPTIONS": "halt_on_error=1"}
    out = subprocess.run([str(driver)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-6000:]
    assert "pool tsan ok" in out.stdout and "WARNING: ThreadSanitizer" not in out.stderr
