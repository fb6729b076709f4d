"""One local Ray cluster (`ray.init(num_cpus=2)`) for every Ray test of a pytest process, and the test models
compiled to `.cuv` once."""
import os
from pathlib import Path

import pytest

import cuvil
from tests.ray import models

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="session")
def cluster():
    """The local cluster; its workers import this checkout's cuvil and tests (PYTHONPATH, inherited)."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> dict:
    """{name: (path of the .cuv, the ONNX model's bytes)} for the CNN, the BERT-like encoder and the CNN with a
    fixed batch of 8."""
    folder = tmp_path_factory.mktemp("ray-models")
    out = {}
    for name, blob in (("cnn", models.cnn()), ("bert", models.bert()), ("cnn8", models.cnn(batch=8))):
        path = folder / f"{name}.cuv"
        cuvil.export(cuvil.load_onnx(blob).optimize(), path)
        out[name] = (path, blob)
    return out
