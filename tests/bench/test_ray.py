"""bench/ray.py: the in-process loop (a fresh process that imports the engine, loads the model and runs the batches,
and reports its seconds and CPU), the no-model engine, the CPU counters, and one short Ray job of each kind on the
Ray tests' local cluster (the Predictor itself is tested in tests/ray)."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cuvil
from tests.ray import models
from tests.ray.conftest import artifacts, cluster  # noqa: F401 (the Ray tests' fixtures)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("engine", ["cuvil", "ort"])
def test_the_in_process_loop_runs_in_a_fresh_process_and_imports_its_engine_on_the_clock(engine, tmp_path):
    pytest.importorskip("ray")
    if engine == "ort":
        pytest.importorskip("onnxruntime")
    blob = models.cnn()
    model = tmp_path / ("cnn.cuv" if engine == "cuvil" else "cnn.onnx")
    if engine == "cuvil":
        cuvil.export(cuvil.load_onnx(blob).optimize(), model)
    else:
        model.write_bytes(blob)
    np.savez(tmp_path / "block.npz", image=models.images(40))
    code = ("import json, runpy, sys; sys.argv = ['bench.ray', '--child', *sys.argv[1:]]; "
            "runpy.run_module('bench.ray', run_name='__main__'); "
            "print(json.dumps(sorted(m for m in ('cuvil', 'onnxruntime') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code, engine, str(model), str(tmp_path / "block.npz"), "16", "2", "1"],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    timing, imported = out.stdout.splitlines()[-2:]
    assert json.loads(timing)["seconds"] > 0
    assert json.loads(imported) == [{"cuvil": "cuvil", "ort": "onnxruntime"}[engine]]  # only its own engine


def test_the_in_process_loop_reports_its_cpu_seconds(tmp_path):
    pytest.importorskip("ray")
    model = tmp_path / "cnn.cuv"
    cuvil.export(cuvil.load_onnx(models.cnn()).optimize(), model)
    np.savez(tmp_path / "block.npz", image=models.images(40))
    block = str(tmp_path / "block.npz")
    argv = [sys.executable, "-m", "bench.ray", "--child", "cuvil", str(model), block, "16", "2", "1"]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT)
    timing = json.loads(out.stdout.splitlines()[-1])
    assert 0 < timing["cpu"] and timing["seconds"] > 0


def test_the_noop_engine_answers_every_row_at_once_and_imports_no_engine():
    pytest.importorskip("ray")
    from bench import ray as bench_ray

    out = bench_ray.predictor(bench_ray.NOOP, None, 2)({"image": models.images(7)})
    assert list(out) == ["out"] and out["out"].shape == (7,) and out["out"].dtype == np.float32
    code = ("import sys; from bench import ray as r; r.predictor(r.NOOP, None, 1); "
            "print(sorted(m for m in ('cuvil.ray', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split()[-1] == "[]"


def test_machine_cpu_counts_busy_time_that_grows_with_work():
    pytest.importorskip("ray")
    from bench import ray as bench_ray

    before, cpu = bench_ray.machine_cpu(), bench_ray.process_cpu()
    while bench_ray.process_cpu() - cpu < 0.05:  # some CPU spent here
        pass
    busy, stolen = bench_ray.machine_cpu() - before
    assert busy >= 0.03 and stolen >= 0  # ticks of 10 ms: most of the 50 ms spent shows
    idle = bench_ray.idle_cpu(0.05)
    assert idle.shape == (2,) and (idle >= 0).all() and idle[0] <= (os.cpu_count() or 1) + 0.5


def test_a_ray_job_of_each_kind_reports_its_cpu_and_start_up(cluster, artifacts):  # noqa: F811 (the fixtures)
    """The noop job (Ray alone) and a Cuvil job with Arrow batches (--ab-format), on the tests' local cluster."""
    from bench import ray as bench_ray

    args = argparse.Namespace(cpus_per_worker=1, workers=1, trace=True, batch=16, format="numpy")
    ds = bench_ray.dataset({"image": models.images(64)}, 2)
    for engine, model, batch_format in ((bench_ray.NOOP, None, None), ("cuvil", str(artifacts["cnn"][0]), "pyarrow")):
        job = bench_ray.ray_job(ds, engine, model, args, batch_format=batch_format)
        assert job["seconds"] > job["startup"] > 0 and job["steady"] > 0
        assert job["cpu"]["machine"] >= job["cpu"]["calls"] >= 0 and job["cpu"]["driver"] > 0


_NICENESS = """
import os, sys, ray
from bench import ray as bench_ray
bench_ray.start_ray(1, int(sys.argv[1]))
print(ray.get(ray.remote(lambda: os.getpriority(os.PRIO_PROCESS, 0)).remote()))
ray.shutdown()
"""


def test_bench_ray_starts_its_workers_at_the_niceness_it_is_given():
    """--worker-niceness reaches the raylet that ray.init starts: a task's process runs at it, not at Ray's 15."""
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_worker_niceness")}
    out = subprocess.run([sys.executable, "-c", _NICENESS, "3"], check=True, capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=240)
    assert out.stdout.split()[-1] == "3"
