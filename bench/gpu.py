"""The one prepared GPU check of the CUDA backend (docs/backend-cuda.md), in well under 10 minutes on an H200:

1. every op case of tests/ops (except the CUDA backend's NOT_YET list) compiled for target="cuda" and run on the GPU,
   against the reference interpreter (tolerances of tests/backends/cpu/test_ops_compiled.py);
2. the tests' tiny CNN and transformer block (its attention is the fused flash-style kernel), ResNet-18, BERT-base
   (s128) and GPT-2 small (s128), batch 1, random weights (bench/workloads.py), against PyTorch on the same GPU;
3. latency at batch 1 of those models: Cuvil (graph replay) vs PyTorch eager, torch.compile (default) and
   torch.compile(mode="reduce-overhead") (CUDA Graphs), all in this one run; plus the host time of one replay;
4. extras (bench/gpu_extras.py, before the latency stage): masked attention, DLPack with torch CUDA, the Runtime's
   stream priority, the standalone C runtime running a cuda .cuv through the real driver, and cuDNN against the
   direct conv kernels (when libcudnn loads: pip install 'cuvil[cudnn]').

    python -m bench.gpu                  # on the GPU machine (tests/gpu/run.sh wraps it)
    python -m bench.gpu --dry-run        # anywhere: the same stages against the tests' fake driver, no timings

It stops at once, with one line saying why, when the machine has no CUDA driver, no GPU, no CUDA C compiler or no
cuBLASLt. Each stage's failures are listed, not fatal; the exit status is 1 when any check failed. `--out DIR` writes
results.json there.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MODELS = ("tiny_cnn", "tiny_transformer", "resnet18", "bert", "gpt2")  # the tiny ones: tests/backends/cuda/models.py
BUDGET_S = {"ops": 150, "models": 200, "extras": 60, "latency": 120}  # each stage stops starting work past its share


def preflight(dry_run: bool) -> list:
    """What the run needs, as lines; raises SystemExit with the first missing piece."""
    from cuvil.backends.cuda import cublaslt, toolchain
    from cuvil.backends.cuda.driver import CudaDriver
    from cuvil.errors import CuvilError

    lines = []
    try:
        lines.append(f"compiler: {toolchain.compiler()} ({toolchain.compiler_version(toolchain.compiler())})")
        if dry_run:
            return lines + ["driver: the tests' fake (dry run)"]
        d = CudaDriver.load()
        d.cuInit(0)
        dev = d.cuDeviceGet(0)
        major, minor = d.cuDeviceGetAttribute(75, dev), d.cuDeviceGetAttribute(76, dev)
        lines.append(f"device 0: compute capability {major}.{minor}")
        cublaslt._library()
    except (CuvilError, OSError, AttributeError) as e:
        raise SystemExit(f"bench.gpu: cannot run: {e}") from None
    return lines


def _driver_patch(dry_run: bool):
    """In a dry run, target='cuda' builds against the recording fake (tests/backends/cuda/fake_driver.py)."""
    if not dry_run:
        return
    from cuvil.backends.cuda import cublaslt, driver
    from tests.backends.cuda.fake_driver import FakeBlas, FakeDriver

    fake = FakeDriver()
    driver.CudaDriver.load = classmethod(lambda cls: fake)
    cublaslt.CublasLt = lambda: FakeBlas(fake)


def op_cases(limit=None) -> list:
    """The op cases the GPU checks: every case of tests/ops the CUDA backend compiles."""
    from tests.backends.cuda.test_compile import NOT_YET, NOT_YET_CASES
    from tests.ops.test_registry_sweep import CASES

    return [c for c in CASES if c.op not in NOT_YET and c.name() not in NOT_YET_CASES][:limit]


def stage_ops(dry_run: bool, results: dict, limit=None) -> None:
    from cuvil.compiler import compile_module
    from cuvil.interpreter import interpret
    from tests.backends.cpu.test_ops_compiled import assert_matches
    from tests.ops.test_registry_sweep import build_case

    cases = op_cases(limit)
    start, passed, failed = time.time(), 0, {}

    def build(case):  # compile_module: NVRTC calls release the GIL, so cases build side by side
        m = build_case(case)
        return m, compile_module(m, target="cuda")

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        builds = [pool.submit(build, c) for c in cases]
        for case, future in zip(cases, builds):
            if time.time() - start > BUDGET_S["ops"]:
                failed["(budget)"] = f"stopped after {passed + len(failed)} of {len(cases)} cases"
                break
            try:
                m, exe = future.result()
                got = exe(*case.inputs)
                if not dry_run:
                    assert_matches(got, interpret(m, case.inputs), case.name())
                passed += 1
            except Exception as e:  # noqa: BLE001 (every failure is reported, the run goes on)
                failed[case.name()] = f"{type(e).__name__}: {str(e)[:300]}"
        for future in builds:
            future.cancel()
    results["ops"] = {"cases": len(cases), "passed": passed, "failed": failed, "seconds": round(time.time() - start)}
    print(f"ops: {passed}/{len(cases)} passed in {time.time() - start:.0f} s", flush=True)
    for name, why in list(failed.items())[:40]:
        print(f"  FAIL {name}: {why}", flush=True)


def _workload(name: str):
    from bench.workloads import Built, ResNet18, transformer_workload, vision_workload
    from tests.backends.cuda import models

    if name.startswith("tiny_"):
        return Built(*getattr(models, name)())
    return vision_workload(ResNet18) if name == "resnet18" else transformer_workload(name, 128)


def stage_models(dry_run: bool, results: dict, compiled: dict) -> None:
    import torch

    import cuvil

    start = time.time()
    for name in MODELS:
        if time.time() - start > BUDGET_S["models"]:
            results.setdefault("models", {})[name] = "skipped: stage budget spent"
            continue
        t0 = time.time()
        try:
            built = _workload(name)
            fn = cuvil.compile(built.exported, built.inputs, target="cuda", cache=False)
            got = fn(*built.inputs)
            entry = {"compile_s": round(time.time() - t0, 1)}
            if not dry_run:
                device = "cuda"
                model = built.module.to(device)
                with torch.no_grad():
                    want = model(*(x.to(device) for x in built.inputs)).float().cpu().numpy()
                got = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
                err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-12))
                entry.update(max_rel_err=err, ok=err < 1e-3)
            compiled[name] = (fn, built)
        except Exception as e:  # noqa: BLE001
            entry = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:400]}",
                     "where": traceback.format_exc(limit=3)[-600:]}
        results.setdefault("models", {})[name] = entry
        print(f"model {name}: {entry}", flush=True)


def _time(fn, sync, rounds: int = 50, warmup: int = 10) -> float:
    """Median milliseconds of `fn()` over `rounds` calls after `warmup`."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)


def _latency_row(fn, built) -> dict:
    import torch

    model = built.module.to("cuda")
    inputs = tuple(x.to("cuda") for x in built.inputs)
    row = {}
    with torch.no_grad():
        row["torch_eager_ms"] = _time(lambda: model(*inputs), torch.cuda.synchronize)
        for mode, key in ((None, "torch_compile_ms"), ("reduce-overhead", "torch_compile_graphs_ms")):
            try:
                compiled_model = torch.compile(model, mode=mode)
                row[key] = _time(lambda m=compiled_model: m(*inputs), torch.cuda.synchronize, warmup=5)
            except Exception as e:  # noqa: BLE001
                row[key] = f"{type(e).__name__}: {str(e)[:200]}"
    row["cuvil_ms"] = _time(lambda: fn(*built.inputs), lambda: None)
    cuda_fn = fn.executable._run.function
    state = next(iter(cuda_fn.states.values()))
    t = time.perf_counter()
    for _ in range(100):  # the host's share of a replay: launches queue without waiting
        cuda_fn.driver.cuGraphLaunch(state.graph_exec, cuda_fn.stream)
    row["replay_host_us"] = (time.perf_counter() - t) / 100 * 1e6
    cuda_fn.driver.cuStreamSynchronize(cuda_fn.stream)
    return row


def stage_latency(results: dict, compiled: dict) -> None:
    start, out = time.time(), {}
    for name, (fn, built) in compiled.items():
        if time.time() - start > BUDGET_S["latency"]:
            out[name] = "skipped: stage budget spent"
            continue
        try:
            out[name] = _latency_row(fn, built)
        except Exception as e:  # noqa: BLE001
            out[name] = f"{type(e).__name__}: {str(e)[:300]}"
        print(f"latency {name}: {out[name]}", flush=True)
    results["latency"] = out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu")
    p.add_argument("--dry-run", action="store_true", help="no GPU: the fake driver, no numbers compared or timed")
    p.add_argument("--out", default=os.environ.get("OUT"), help="folder for results.json")
    p.add_argument("--only", choices=("ops", "models", "extras", "latency"), action="append")
    p.add_argument("--limit", type=int, help="the first LIMIT op cases only")
    args = p.parse_args(argv)
    stages = args.only or ["ops", "models", "extras", "latency"]
    start = time.time()
    results = {"preflight": preflight(args.dry_run)}
    print("\n".join(results["preflight"]), flush=True)
    _driver_patch(args.dry_run)
    compiled: dict = {}
    if "ops" in stages:
        stage_ops(args.dry_run, results, args.limit)
    if "models" in stages or "latency" in stages:
        stage_models(args.dry_run, results, compiled)
    if "extras" in stages:
        from bench.gpu_extras import stage_extras

        stage_extras(args.dry_run, results)
    if "latency" in stages and not args.dry_run:
        stage_latency(results, compiled)
    results["seconds"] = round(time.time() - start)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
    from bench.gpu_extras import failed

    bad = results.get("ops", {}).get("failed") or any(
        isinstance(v, dict) and v.get("ok") is False for v in results.get("models", {}).values()) or \
        failed(results.get("extras", {}))
    print(f"bench.gpu: {'FAILED' if bad else 'all checks passed'} in {results['seconds']} s", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
