"""bench/wasm.py's roofline: FLOPs and compulsory bytes per call of its workloads, and each peer's share of its peak."""
import pytest

from bench import wasm
from bench.workloads import mlp_workload


def test_the_mlp_costs_its_multiply_adds_and_its_weights():
    sizes = (784, 1024, 1024, 10)
    layers = list(zip(sizes, sizes[1:]))
    c = wasm.cost(mlp_workload(1, sizes))
    assert c["flops"] == 2 * sum(i * o for i, o in layers)
    assert c["bytes"] == 4 * (sum(i * o + o for i, o in layers) + sizes[0] + sizes[-1])


def test_the_cnn_costs_its_convolutions():
    c = wasm.cost(wasm.small_cnn_workload(size=8))
    convs = [(3, 32, 8), (32, 64, 4), (64, 64, 2)]  # (in, out, side): padded 3x3 convolutions, each pooled by 2
    assert c["flops"] == 2 * (sum(i * o * 9 * s * s for i, o, s in convs) + 64 * 10)


PEAKS = {"native (16 lanes)": 100.0, "wasm SIMD128 (4 lanes)": 20.0, "wasm relaxed-SIMD (4 lanes)": 40.0}


@pytest.mark.parametrize("peer, peak", [("native", 100.0), ("wasm", 20.0), ("wasm 4x2", 20.0), ("ort", 20.0),
                                        ("wasm relaxed", 40.0), ("wasm relaxed 4x2w6", 40.0)])
def test_each_peer_is_held_to_its_levels_peak(peer, peak):
    assert wasm.peak_of(peer, PEAKS) == peak


def test_the_roofline_divides_the_cost_by_the_cpu_time():
    r = {"cost": {"flops": 4e9, "bytes": 2e9}, "cpu_s": {"native": 0.1, "wasm relaxed": 0.5}}
    rows = wasm.roofline(r, PEAKS)
    assert rows["native"] == {"gflops": 40.0, "gbs": 20.0, "of_peak": 0.4, "of_rate": None}
    assert rows["wasm relaxed"] == {"gflops": 8.0, "gbs": 4.0, "of_peak": 0.2, "of_rate": None}
    rates = {"native (16 lanes)": 40.0, "wasm relaxed-SIMD (4 lanes)": 16.0}
    assert [row["of_rate"] for row in wasm.roofline(r, PEAKS, rates).values()] == [0.5, 0.25]
    assert wasm.roofline(r, {})["native"]["of_peak"] is None
