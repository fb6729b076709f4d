"""The prepared GPU script (bench/gpu.py, tests/gpu/run.sh) without a GPU: it imports, its case list builds, it stops
at once with one clear line where there is no driver, and its dry run (the fake driver) goes through its stages."""
import subprocess
from pathlib import Path

import pytest

from bench import gpu
from cuvil.backends.cuda.driver import CudaDriver
from cuvil.errors import UnsupportedError
from tests.backends.cuda.test_compile import NOT_YET


def test_the_case_list_covers_every_case_the_backend_compiles():
    cases = gpu.op_cases()
    assert len(cases) > 200 and not any(c.op in NOT_YET for c in cases)


def test_no_driver_stops_at_once_with_one_line(cuda_compiler, monkeypatch):
    def missing(cls):
        raise UnsupportedError("target='cuda' needs an NVIDIA driver (libcuda.so.1), and this machine has none")

    monkeypatch.setattr(CudaDriver, "load", classmethod(missing))
    with pytest.raises(SystemExit, match="cannot run: .*libcuda"):
        gpu.main([])


def test_dry_run_of_the_op_stage(cuda_compiler, tmp_path, monkeypatch):
    monkeypatch.setattr(CudaDriver, "load", CudaDriver.load)  # the dry run patches it; undone after the test
    from cuvil.backends.cuda import cublaslt
    monkeypatch.setattr(cublaslt, "CublasLt", cublaslt.CublasLt)
    assert gpu.main(["--dry-run", "--only", "ops", "--limit", "12", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "results.json").exists()


def test_run_sh_is_executable_and_calls_the_script():
    script = Path(__file__).with_name("run.sh")
    assert script.stat().st_mode & 0o111 and "bench.gpu" in script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_dry_run_of_the_extras_stage(cuda_compiler, tmp_path, monkeypatch):
    """Masked attention and the Runtime's stream priority against the fake driver (DLPack with torch CUDA and the C
    runtime on the real driver run only on a GPU)."""
    import json

    monkeypatch.setattr(CudaDriver, "load", CudaDriver.load)
    from cuvil.backends.cuda import cublaslt
    monkeypatch.setattr(cublaslt, "CublasLt", cublaslt.CublasLt)
    assert gpu.main(["--dry-run", "--only", "extras", "--out", str(tmp_path)]) == 0
    extras = json.loads((tmp_path / "results.json").read_text())["extras"]
    assert set(extras["attention"]) == {"add-k128-d64", "keep-guarded-k100-d64", "keep-k70-d40"}
    assert extras["runtime"]["matches"] is True and "dlpack_torch" not in extras
