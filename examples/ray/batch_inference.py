"""Batch inference of a `.cuv` over a Ray Dataset: the same script on this machine or on a cluster
(docs/scale-out.md).

    python examples/ray/batch_inference.py                          # a local cluster of this machine's CPUs
    python examples/ray/batch_inference.py --address auto --model /shared/classifier.cuv --workers 8
"""
import argparse
import os
import tempfile

import numpy as np
import ray

import classifier
import cuvil
import cuvil.ray


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="a running cluster ('auto', or ray://HEAD:10001)")
    parser.add_argument("--model", default=None, help="a .cuv every node can read; else one is exported here and "
                        "sent through the object store")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cpus-per-worker", type=float, default=1)
    args = parser.parse_args()
    ray.init(address=args.address)
    path = args.model or classifier.export(os.path.join(tempfile.mkdtemp(), "classifier.cuv"))
    model = path if args.model else cuvil.ray.put(path)  # a path every node can read, or the bytes themselves
    x = classifier.rows(args.rows)
    ds = ray.data.from_numpy(x).rename_columns({"data": "x"}).repartition(4 * args.workers)
    out = ds.map_batches(cuvil.ray.Predictor, fn_constructor_kwargs={"model": model},
                         compute=ray.data.ActorPoolStrategy(size=args.workers), num_cpus=args.cpus_per_worker,
                         batch_size=256)
    logits = np.concatenate([b["output_0"] for b in out.iter_batches(batch_size=None, batch_format="numpy")])
    print(f"{len(logits)} rows on {args.workers} workers; class counts {np.bincount(logits.argmax(1)).tolist()}")


if __name__ == "__main__":
    main()
