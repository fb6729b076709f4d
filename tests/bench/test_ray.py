"""bench/ray.py's in-process loop: a fresh process that imports the engine, loads the model and runs the batches,
and reports its seconds (the Ray jobs themselves are in tests/ray)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cuvil
from tests.ray import models

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
