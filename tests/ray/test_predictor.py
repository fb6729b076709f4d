"""cuvil.ray.Predictor on a local Ray cluster: a CNN and a BERT-like encoder (on ragged rows) over 2,000 rows equal
to one process running the same `.cuv` (and to ONNX Runtime), the model through the object store, a fixed batch size,
Arrow batches, a worker killed mid-job with every row answered once, and a CPU the model was not built for."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import cuvil
from cuvil.errors import ArtifactError
from cuvil.runtime import container, host
from tests.ray import models

ray = pytest.importorskip("ray")
import cuvil.ray  # noqa: E402 (after the skip: it imports ray)

ROWS = 2000


def _dataset(columns: dict):
    ids = np.arange(len(next(iter(columns.values()))))
    return ray.data.from_items([{"id": i, **{k: v[i] for k, v in columns.items()}} for i in ids])


def _run(ds, model, **kw) -> dict:
    """Every row of the job's result, ordered by id."""
    out = ds.map_batches(cuvil.ray.Predictor, fn_constructor_kwargs={"model": model, "keep_columns": ["id"]},
                         compute=ray.data.ActorPoolStrategy(size=2), batch_size=64, **kw)
    parts = list(out.iter_batches(batch_size=None, batch_format="numpy"))
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(cols["id"], kind="stable")
    return {k: v[order] for k, v in cols.items()}


def _compare(got: dict, path, blob, feeds: dict) -> None:
    """Equal to one process calling the same .cuv on all rows, and to ONNX Runtime on the ONNX model."""
    np.testing.assert_array_equal(got["id"], np.arange(ROWS))
    local = cuvil.ray.Predictor(path)(feeds)
    session = ort.InferenceSession(blob)
    reference = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    for name, expected in local.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[name], reference[name], rtol=1e-4, atol=1e-4)


def test_cnn_over_2000_rows_equals_one_process(cluster, artifacts):
    path, blob = artifacts["cnn"]
    feeds = {"image": models.images(ROWS)}
    _compare(_run(_dataset(feeds), str(path)), path, blob, feeds)


def test_bert_over_2000_ragged_rows_equals_one_process(cluster, artifacts):
    """Rows of 4 to 16 tokens (Ray's variable-shaped tensor columns), padded by the Predictor to the model's 16
    with mask 0: the same outputs as the padded rows in one process."""
    path, blob = artifacts["bert"]
    feeds = models.tokens(ROWS)
    lengths = feeds["attention_mask"].sum(1)
    ragged = {k: np.array([row[:n] for row, n in zip(v, lengths)], dtype=object) for k, v in feeds.items()}
    _compare(_run(_dataset(ragged), str(path)), path, blob, feeds)


def test_model_bytes_in_the_object_store_a_fixed_batch_and_arrow_batches(cluster, artifacts):
    """cuvil.ray.put: one copy per node, read in place; the batch-8 CNN takes 64-row batches as 8 calls and the
    ragged tail as a padded one; pyarrow batches convert without a detour through Python objects."""
    path, blob = artifacts["cnn8"]
    images = models.images(203, seed=5)
    got = _run(_dataset({"image": images}), cuvil.ray.put(path), batch_format="pyarrow")
    session = ort.InferenceSession(artifacts["cnn"][1])
    np.testing.assert_array_equal(got["id"], np.arange(203))
    np.testing.assert_allclose(got["logits"], session.run(None, {"image": images})[0], rtol=1e-4, atol=1e-4)


class KillOnce(cuvil.ray.Predictor):
    """A Predictor whose process kills itself (SIGKILL: no cleanup) at the first batch holding row 1000."""

    def __init__(self, marker: str, **kw):
        super().__init__(**kw)
        self.marker = marker

    def __call__(self, batch):
        if 1000 in batch["id"] and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__call__(batch)


def test_a_worker_killed_mid_job_and_every_row_answered_once(cluster, artifacts, tmp_path):
    path, blob = artifacts["cnn"]
    feeds = {"image": models.images(ROWS, seed=7)}
    marker = tmp_path / "killed"
    out = _dataset(feeds).map_batches(
        KillOnce, fn_constructor_kwargs={"marker": str(marker), "model": str(path), "keep_columns": ["id"]},
        compute=ray.data.ActorPoolStrategy(size=2), batch_size=64, max_restarts=2, max_task_retries=2)
    parts = list(out.iter_batches(batch_size=None, batch_format="numpy"))
    assert marker.exists(), "no worker was killed"
    ids = np.concatenate([p["id"] for p in parts])
    assert sorted(ids.tolist()) == list(range(ROWS))  # every row once: none lost, none twice
    logits = np.concatenate([p["logits"] for p in parts])[np.argsort(ids)]
    np.testing.assert_allclose(logits, cuvil.ray.Predictor(path)(feeds)["logits"], rtol=1e-5, atol=1e-6)


def _needing_a_missing_feature(path, out):
    """The same file, its native code marked as needing a CPU feature no x86-64 or aarch64 machine has."""
    c = container.Container.open(path)
    lacking = 1 << host.FEATURE_BITS["threads"]  # a wasm32 feature
    sections = [container.Section(n, [bytes(c.data(n))], r.flags, lacking if n == "native" else r.features)
                for n, r in c.rows.items()]
    container.write(out, sections, c.triple, c.required_features | lacking)
    return out


def test_a_worker_on_a_cpu_without_a_needed_feature_reports_it(cluster, artifacts, tmp_path):
    bad = _needing_a_missing_feature(artifacts["cnn"][0], tmp_path / "bad.cuv")
    with pytest.raises(ArtifactError, match="CPU features this machine lacks: threads"):
        cuvil.ray.Predictor(bad)
    actor = ray.remote(cuvil.ray.Predictor).remote(cuvil.ray.put(bad))
    with pytest.raises(ray.exceptions.RayActorError, match="CPU features this machine lacks: threads"):
        ray.get(actor.__call__.remote({"image": models.images(2)}))


def test_arrow_tensor_columns_become_views_of_the_block():
    """Ray's fixed-shape tensor columns of a sliced block (what batch_format='pyarrow' hands a worker) as NumPy
    views of the block's values, equal to Ray's own conversion; booleans (bits) and ragged rows are converted."""
    from ray.data.block import BlockAccessor

    from cuvil.ray.predictor import batch_columns

    columns = {"image": models.images(40), "flags": np.arange(40 * 3).reshape(40, 3) % 2 == 0,
               "id": np.arange(40)}
    block = BlockAccessor.batch_to_block(columns).slice(5, 20)
    got = batch_columns(block)
    for name, expected in columns.items():
        np.testing.assert_array_equal(got[name], expected[5:25])
    assert np.shares_memory(got["image"], batch_columns(block)["image"])  # both views of the block, no copies
    ragged = BlockAccessor.batch_to_block({"x": np.array([np.ones(2), np.ones(3)], dtype=object)})
    assert [len(r) for r in batch_columns(ragged)["x"]] == [2, 3]


def test_a_worker_imports_no_frontend(artifacts):
    """What a Ray worker imports to load and run a .cuv: no torch, onnx, onnxruntime or jax (its start-up)."""
    code = ("import sys, numpy as np, cuvil.ray; p = cuvil.ray.Predictor(sys.argv[1]); "
            "p({'image': np.zeros((2, 3, 16, 16), np.float32)}); "
            "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'jax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(artifacts["cnn"][0])], check=True, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2])  # this checkout's cuvil
    assert out.stdout.strip() == "[]", out.stdout


def test_the_call_machinery_is_built_before_the_first_batch(artifacts):
    """A worker builds its entry's calls (the constants' check, the call module) in the background from the end of
    `__init__`, while Ray has not yet sent the first batch; in a fresh process, without a call."""
    code = ("import sys, threading, cuvil.ray; p = cuvil.ray.Predictor(sys.argv[1]); "
            "[t.join() for t in threading.enumerate() if t.name == 'cuvil-ray-prepare']; "
            "print('cuvil.backends.cpu.executable' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(artifacts["cnn"][0])], check=True, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "True", out.stdout


def test_a_damaged_constant_fails_the_first_batch_with_its_artifact_error(artifacts, tmp_path):
    """The constants are checked in the background: a damaged byte fails the first batch (and every later one)
    with the ArtifactError naming the section, never a crash or a wrong answer."""
    bad = tmp_path / "damaged.cuv"
    data = bytearray(artifacts["cnn"][0].read_bytes())
    row = container.Container.open(artifacts["cnn"][0]).rows["consts"]
    data[row.offset + row.size // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    predictor = cuvil.ray.Predictor(str(bad))
    for _ in range(2):
        with pytest.raises(ArtifactError, match="consts"):
            predictor({"image": models.images(2)})



def test_unpickling_the_predictor_imports_neither_ray_data_nor_the_compiler():
    """What a worker imports to unpickle `cuvil.ray.Predictor` (Ray's actor start) and to load and run a model."""
    child = ("import pickle, sys, ray; before = set(sys.modules); import cloudpickle; "
             "cls = pickle.loads(cloudpickle.dumps(__import__('cuvil.ray').ray.Predictor)); "
             "print(len(cloudpickle.dumps(cls)), *sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert out.returncode == 0, out.stderr[-3000:]
    size, *modules = out.stdout.split()
    assert int(size) < 200  # pickled by reference: the worker imports it, nothing travels with it
    heavy = [m for m in modules if m.startswith(("ray.data", "cuvil.ops", "cuvil.ir.builder", "cuvil.compiler",
                                                 "cuvil.api", "cuvil.passes", "cuvil.frontends", "torch", "onnx"))]
    assert not heavy, heavy
