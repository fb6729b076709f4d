"""The Ray Serve example (examples/ray/serve_localhost.py) answering concurrent requests from a local client:
every answer equals the model in this process, requests were batched, and a bad request fails alone."""
import json
import socket
import sys
import urllib.error
from pathlib import Path

import numpy as np
import pytest

import cuvil

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ray"


@pytest.fixture(scope="module")
def example(cluster, tmp_path_factory):
    sys.path.insert(0, str(EXAMPLE))
    try:
        import classifier
        import serve_localhost
    finally:
        sys.path.remove(str(EXAMPLE))
    path = classifier.export(str(tmp_path_factory.mktemp("serve") / "classifier.cuv"))
    with socket.socket() as s:  # a free port: other programs on this machine may hold 8000
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = serve_localhost.start(path, port, max_batch_size=8)
    yield serve_localhost, classifier, path, url
    serve.shutdown()


def test_concurrent_requests_are_answered_in_batches(example):
    serve_localhost, classifier, path, url = example
    x = classifier.rows(48, seed=3)
    got = serve_localhost.query(url, x, clients=16)
    np.testing.assert_allclose(got, cuvil.load(path)(x), rtol=1e-5, atol=1e-5)
    handle = serve.get_app_handle("classifier")
    stats = handle.stats.remote().result()
    assert stats["requests"] == 48 and stats["batches"] < 48, stats  # dynamic batching joined requests
    row = handle.remote({"x": x[0]}).result()
    np.testing.assert_allclose(row["output_0"], got[0], rtol=1e-6)


def test_a_bad_request_fails_alone_with_its_reason(example):
    serve_localhost, classifier, path, url = example
    with pytest.raises(urllib.error.HTTPError) as info:
        serve_localhost.post(url, {"image": [1.0]})
    assert info.value.code == 400
    assert "no column(s) 'x'" in json.loads(info.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError, match="400"):
        serve_localhost.post(url, {"x": [1.0] * (classifier.FEATURES + 1)})
