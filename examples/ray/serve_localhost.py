"""Online inference on localhost: a `.cuv` classifier behind Ray Serve with dynamic batching, queried by 32
concurrent HTTP clients; every answer is checked against the model called in this process.

    python examples/ray/serve_localhost.py [--port 8000] [--requests 64]
"""
import argparse
import json
import os
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import ray
from ray import serve

import classifier
import cuvil
import cuvil.ray.serve


def start(model_path: str, port: int, max_batch_size: int = 16) -> str:
    """Serve the model at http://127.0.0.1:PORT/ and return that address."""
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(cuvil.ray.serve.deployment(model_path, max_batch_size=max_batch_size), route_prefix="/",
              name="classifier")
    return f"http://127.0.0.1:{port}/"


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def query(url: str, x: np.ndarray, clients: int = 32) -> np.ndarray:
    """One request per row, `clients` at a time; the answers in row order."""
    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(lambda row: post(url, {"x": row.tolist()}), x))
    return np.array([a["output_0"] for a in answers], np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--requests", type=int, default=64)
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False)
    path = classifier.export(os.path.join(tempfile.mkdtemp(), "classifier.cuv"))
    url = start(path, args.port)
    x = classifier.rows(args.requests)
    got = query(url, x)
    np.testing.assert_allclose(got, cuvil.load(path)(x), rtol=1e-5, atol=1e-5)
    print(f"{len(x)} concurrent requests answered by {url}, equal to the in-process model; first: {got[0][:3]}")
    serve.shutdown()


if __name__ == "__main__":
    main()
