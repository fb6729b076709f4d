"""Smoke tests of the benchmark suite on tiny workloads: one or two rounds, every code path of the harness."""
import json

import numpy as np
import pytest

pytest.importorskip("torch")  # the workloads are PyTorch modules

from bench import __main__ as cli  # noqa: E402
from bench import harness, report  # noqa: E402
from bench import peers as P  # noqa: E402
from bench.workloads import QUICK, STANDARD, select  # noqa: E402

W1 = QUICK[0]


def _peers(*names):
    return [p for p in P.PEERS if p.name in names]


def test_measure_times_peers_and_cuvil_routes(tmp_path):
    results = harness.measure(W1, _peers("numpy", "torch eager", "cuvil jit", "cuvil torch"), threads=2, rounds=2,
                              round_s=0.001, onnx_dir=str(tmp_path), profile=True, log=lambda *a: None)
    by_peer = {r.peer: r for r in results}
    assert all(r.status == "ok" and len(r.samples_ms) >= 2 for r in results), [(r.peer, r.error) for r in results]
    jit = by_peer["cuvil jit"]
    assert jit.max_err <= harness.TOLERANCE and jit.first_s > 0
    assert jit.arena_bytes is not None and jit.weights_bytes == 32 * 16 * 4
    assert "error" not in jit.profile, jit.profile
    assert jit.profile["overhead"] > 0 and jit.profile["top"][0]["ops"].startswith("matmul")
    assert by_peer["numpy"].profile is None and all(r.cpu_pressure is not None for r in results)


def _raising(b, ctx):
    raise ValueError("no kernel for this\nsecond line")


def _wrong(b, ctx):
    return lambda: b.module(*b.inputs) + 1


def test_failures_and_wrong_outputs_are_reported_not_timed(tmp_path):
    peers = [P.Peer("broken", _raising), P.Peer("off by one", _wrong), P.Peer("jax-less", lambda b, c: (_ for _ in ())
                                                                                 .throw(P.NotApplicable()))]
    results = harness.measure(W1, peers, 2, 1, 0.001, str(tmp_path), log=lambda *a: None)
    status = {r.peer: (r.status, r.error) for r in results}
    assert status["broken"] == ("failed", "ValueError: no kernel for this")
    assert status["off by one"][0] == "mismatch" and "max error" in status["off by one"][1]
    assert status["jax-less"] == ("n/a", "")
    assert all(not r.samples_ms for r in results)
    text = report.markdown(_meta(), results, {}, [p.name for p in peers])
    assert "broken: failed: ValueError: no kernel for this" in text


def _meta():
    return {"command": "python -m bench --suite quick", "machine": "test", "load_before": 0.1, "load_after": 0.2,
            "noise": "quiet", "versions": "-", "openblas": "-", "dispatch_us": {"Executable": 3.0}}


def test_report_table_ratios_chart_and_docs(tmp_path):
    rows = [harness.Result("W1", "ONNX Runtime", samples_ms=[1.0, 1.0, 2.0]),
            harness.Result("W1", "torch eager", samples_ms=[2.0, 2.0]),
            harness.Result("W1", "cuvil jit", samples_ms=[0.5, 0.5], arena_bytes=2**20, weights_bytes=2**21),
            harness.Result("W1", "cuvil torch", status="failed", error="UnsupportedError: x")]
    names = ["torch eager", "ONNX Runtime", "cuvil jit", "cuvil torch"]
    probes = {"W1": {"cuvil jit": {"cold": {"first_s": 1.5, "rss_mb": 300, "rss_delta_mb": 20},
                                   "warm": {"first_s": 0.05, "rss_mb": 290, "rss_delta_mb": 10}},
                     "ONNX Runtime": {"first_s": 0.01, "rss_mb": 310, "rss_delta_mb": 30}}}
    text = report.markdown(_meta(), rows, probes, names)
    assert "| W1 | 2 / 2 (2.00) | 1 / 1.8 | **0.5 / 0.5 (0.50)** | jit | - |" in text
    assert "1.50 / 0.05" in text and "290 (+10)" in text and "| 1.00 | 2.0 |" in text
    png = tmp_path / "chart.png"
    pytest.importorskip("matplotlib")
    report.chart(str(png), rows, names)
    assert png.read_bytes()[:4] == b"\x89PNG"
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- bench:begin -->\nold\n<!-- bench:end -->\noutro\n")
    report.update_docs(str(doc), "new table\n")
    assert doc.read_text() == "intro\n<!-- bench:begin -->\nnew table\n<!-- bench:end -->\noutro\n"
    report.save_json(str(tmp_path / "r.json"), _meta(), rows, probes)
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["median_ms"] == 1.0
    meta, again, probes_again = report.load_json(str(tmp_path / "r.json"))  # what --render reads
    assert report.markdown(meta, again, probes_again, names) == text


def test_probe_measures_first_call_and_memory_in_a_fresh_process(tmp_path):
    out = harness.probe("quick", W1, _peers("cuvil jit")[0], 2, str(tmp_path), cache=str(tmp_path / "cache"),
                        timeout=300)
    assert "error" not in out, out
    assert out["first_s"] > 0 and out["rss_mb"] > out["rss_delta_mb"] >= 0


def test_onnx_runtime_peer_on_an_exported_model(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    results = harness.measure(W1, _peers("ONNX Runtime"), 2, 1, 0.001, str(tmp_path), log=lambda *a: None)
    assert results[0].status == "ok", results[0].error
    assert list(tmp_path.glob("*.onnx"))


def test_selection_environment_and_dispatch():
    assert [w.name for w in select("standard", "W5")] == ["W5 relu branch", "W5 sigmoid branch"]
    assert {w.key for w in STANDARD} == {"W1", "W2", "W3", "W4", "W5", "W6", "MNV2", "GPT2", "GPT2D",
                                           "MNV3", "EFFB0", "UNET", "VITB", "VITT", "WHSP", "LLAMA"}
    env = cli.fair_env(2)
    assert env["OPENBLAS_THREAD_TIMEOUT"] == "20" and env["MALLOC_MMAP_THRESHOLD_"] == str(1 << 30)
    assert env["CUVIL_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "2"
    assert isinstance(harness.other_benchmarks(), list) and harness.cpu_pressure() >= 0 <= harness.cpu_stall_us()
    args = cli.parse_args(["--suite", "quick", "--only", "W1", "--rounds", "1"])
    assert args.suite == "quick" and args.rounds == 1 and args.threads == 2
    us = harness.dispatch_overhead(calls=500)
    assert set(us) >= {"cuvil.jit function", "Executable", "CpuFunction"} and all(v > 0 for v in us.values())


def test_quick_workloads_build_and_match_their_numpy_forms():
    for wl in QUICK:
        b = wl.build()
        ref = P.to_numpy(P._torch_eager(b, None)())
        if b.numpy_fn is not None:
            np.testing.assert_allclose(b.numpy_fn(*b.numpy_inputs), ref, rtol=1e-4, atol=1e-5)


def test_reduced_precision_peers_run_only_when_named():
    from bench import peers_int8

    names = {p.name for p in peers_int8.INT8_PEERS}
    assert not names & {p.name for p in P.select()}
    assert {p.name for p in P.select("cuvil int8,ONNX Runtime")} == {"cuvil int8", "ONNX Runtime"}
