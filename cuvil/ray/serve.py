"""`cuvil.ray.serve.deployment`: a `.cuv` model as a Ray Serve application that answers requests of one row each
and runs them in batches (`@serve.batch`: the requests that arrive within `batch_wait_timeout_s`, up to
`max_batch_size`, become one call).

    app = cuvil.ray.serve.deployment("model.cuv", max_batch_size=32)
    serve.run(app)                                   # POST {"x": [...]} to http://127.0.0.1:8000/
    handle.remote({"x": row})                        # or through a handle: a dict of arrays back
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from ray import serve

from ..errors import ShapeError
from .predictor import Predictor


def deployment(model, entry: str = "main", *, max_batch_size: int = 32, batch_wait_timeout_s: float = 0.005,
               num_replicas: int = 1, num_cpus: float = 1, num_threads: Optional[int] = None,
               name: str = "cuvil", pad_value=0):
    """A bound Serve application for `serve.run`: `num_replicas` replicas of `num_cpus` CPUs each, each loading
    `model` (a path, bytes or a `cuvil.ray.put` reference) once; `num_threads` defaults to `num_cpus`."""
    options = {"name": name, "num_replicas": num_replicas, "ray_actor_options": {"num_cpus": num_cpus}}
    return CuvilModel.options(**options).bind(model, entry, num_threads, max_batch_size, batch_wait_timeout_s,
                                              pad_value)


@serve.deployment
class CuvilModel:
    """One replica: HTTP requests carry a JSON object {input name: one row as nested lists} and get {output name:
    nested lists}; handle calls pass a dict of arrays and get a dict of arrays."""

    def __init__(self, model, entry: str, num_threads, max_batch_size: int, batch_wait_timeout_s: float,
                 pad_value=0):
        self.predictor = Predictor(model, entry, num_threads=num_threads, pad_value=pad_value)
        self.predict_rows.set_max_batch_size(max_batch_size)
        self.predict_rows.set_batch_wait_timeout_s(batch_wait_timeout_s)
        self.requests = self.batches = 0

    @serve.batch
    async def predict_rows(self, rows: list) -> list:
        """The rows of concurrent requests as one batch: stacked, or ragged (padded by the Predictor)."""
        batch = {p.name: _column([row[p.name] for row in rows]) for p in self.predictor.function.inputs}
        out = self.predictor(batch)
        self.requests, self.batches = self.requests + len(rows), self.batches + 1
        return [{name: col[i] for name, col in out.items()} for i in range(len(rows))]

    async def __call__(self, request):
        if isinstance(request, dict):  # a handle call: a bad row raises its ShapeError here
            return await self.predict_rows(self._checked(request))
        try:
            row = self._checked(await request.json())
        except (ShapeError, ValueError) as e:  # a bad row fails its own request, never the batch it would join
            from starlette.responses import JSONResponse

            return JSONResponse({"error": str(e)}, status_code=400)
        result = await self.predict_rows(row)
        return {name: value.tolist() for name, value in result.items()}

    def stats(self) -> dict:
        """Rows answered and the model calls (batches) they took, since this replica started."""
        return {"requests": self.requests, "batches": self.batches}

    def _checked(self, row) -> dict:
        """The row, once it has every input and fits the model's sizes and dtypes (ShapeError naming what not)."""
        if not isinstance(row, dict):
            raise ShapeError(f"a request is a JSON object {{input name: row}}, got a {type(row).__name__}")
        self.predictor.plan.arrays({name: [value] for name, value in row.items()})
        return row


def _column(values: list):
    arrays = [np.asarray(v) for v in values]
    return np.stack(arrays) if len({a.shape for a in arrays}) == 1 else arrays
