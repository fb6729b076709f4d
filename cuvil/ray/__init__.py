"""Cuvil on Ray (`pip install cuvil[ray]`; docs/scale-out.md): batch inference of `.cuv` models over Ray Datasets,
and online inference with Ray Serve (`cuvil.ray.serve`). `import cuvil` never imports this package, nor Ray.

    import ray, cuvil.ray
    ds = ray.data.from_numpy(x).rename_columns({"data": "x"})
    out = ds.map_batches(cuvil.ray.Predictor, fn_constructor_kwargs={"model": "model.cuv"},
                         concurrency=2, batch_size=64)
"""
from .batches import BatchPlan
from .predictor import Predictor, artifact_bytes, put, worker_threads

__all__ = ["BatchPlan", "Predictor", "artifact_bytes", "put", "worker_threads"]
