"""Cuvil's GEMM kernels against NumPy: shapes (edges, odd sizes, block boundaries), strides, epilogues, packed
weights, batches, threads; and AddressSanitizer over odd shapes. Built at -O1 to keep the suite fast."""
from __future__ import annotations

import math
import os
import shutil
import subprocess

import numpy as np
import pytest

from cuvil.backends.cpu import kernels, toolchain
from cuvil.errors import ShapeError

pytestmark = pytest.mark.skipif(not any(map(shutil.which, toolchain.COMPILER_CANDIDATES)), reason="no C compiler")

OPT = 1
# Block sizes of the compiled library, read back so that the edge cases follow them.
CONFIG = {}

ACTS = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "relu6": lambda x: np.clip(x, 0, 6),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "hardswish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
}


@pytest.fixture(scope="module", autouse=True)
def lib():
    lib = kernels.load(OPT)
    CONFIG.update(kv.split("=") for kv in lib.cuvil_kernels_config().decode().split())
    yield lib
    lib.cuvil_set_num_threads(kernels.default_num_threads())


def block_sizes():
    vl = int(CONFIG["vl"])
    nv, _ = CONFIG["nr"].split("x")
    return int(CONFIG["mr"]), int(nv) * vl, int(CONFIG["kc"]), int(CONFIG["nc"])


def reference(a, b, bias=None, act="none", alpha=1.0, beta=0.0, c=None):
    out = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if bias is not None:
        out = out + bias
    if beta:
        out = out + beta * c
    return ACTS[act](out)


def assert_close(got, want, k):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * (1 + math.sqrt(k)))


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def edge_shapes():
    """Sizes at 0, 1 and either side of every block boundary, plus random ones; (M, N, K)."""
    rng = np.random.default_rng(1)
    fixed = [(0, 0, 0), (0, 5, 3), (4, 0, 3), (3, 4, 0), (1, 1, 1), (1, 2, 3), (2, 1, 5), (1, 17, 1), (1, 1, 300),
             (5, 63, 7), (5, 64, 8), (5, 65, 9), (6, 64, 256), (7, 65, 257), (12, 127, 255), (13, 129, 513),
             (64, 96, 784), (3, 600, 40), (33, 1100, 20), (1, 1023, 17), (6, 192, 768), (7, 193, 769),
             (2, 191, 1537)]
    rand_shapes = [tuple(int(x) for x in rng.integers(1, 80, 3)) for _ in range(25)]
    return fixed + rand_shapes


@pytest.mark.parametrize("m,n,k", edge_shapes())
def test_shapes(m, n, k):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = rand(rng, m, k), rand(rng, k, n)
    assert_close(kernels.sgemm(a, b, opt_level=OPT), reference(a, b), k)


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("m,n,k", [(1, 77, 33), (9, 70, 600), (40, 130, 64)])
def test_epilogue(act, m, n, k):
    rng = np.random.default_rng(k)
    a, b, bias, c0 = rand(rng, m, k), rand(rng, k, n), rand(rng, n), rand(rng, m, n)
    got = kernels.sgemm(a, b, c0.copy(), bias=bias, act=act, alpha=0.25, beta=-0.5, opt_level=OPT)
    assert_close(got, reference(a, b, bias, act, 0.25, -0.5, c0), k)


@pytest.mark.parametrize("act", ["none", "relu6", "gelu_erf"])
@pytest.mark.parametrize("m,n,k", [(1, 77, 33), (2, 1, 5), (13, 129, 513), (40, 130, 24), (7, 193, 769), (3, 4, 0)])
def test_row_bias(act, m, n, k):
    """A bias per row (an NCHW conv's output channels): full and partial tiles, one row, several K blocks, K = 0."""
    rng = np.random.default_rng(m + n + k)
    a, b, row_bias, c0 = rand(rng, m, k), rand(rng, k, n), rand(rng, m), rand(rng, m, n)
    want = ACTS[act](a.astype(np.float64) @ b + row_bias[:, None])
    assert_close(kernels.sgemm(a, b, np.full((m, n), np.nan, np.float32), row_bias=row_bias, act=act, opt_level=OPT),
                 want, k)
    got = kernels.sgemm(a, b, c0.copy(), row_bias=row_bias, act=act, alpha=0.5, beta=2.0, opt_level=OPT)
    assert_close(got, ACTS[act](0.5 * (a.astype(np.float64) @ b) + row_bias[:, None] + 2.0 * c0), k)


@pytest.mark.parametrize("act", ["relu", "relu6"])
def test_clamping_epilogues_keep_nan_like_the_ir(act):
    rng = np.random.default_rng(3)
    a, b = rand(rng, 7, 40), rand(rng, 40, 50)
    a[2, 5] = np.nan
    got = kernels.sgemm(a, b, act=act, opt_level=OPT)
    assert np.isnan(got[2]).all() and not np.isnan(np.delete(got, 2, axis=0)).any()
    assert_close(np.delete(got, 2, axis=0), np.delete(reference(a, b, None, act), 2, axis=0), 40)


def test_beta_zero_never_reads_c():
    rng = np.random.default_rng(0)
    a, b = rand(rng, 20, 700), rand(rng, 700, 70)
    out = np.full((20, 70), np.nan, np.float32)
    assert_close(kernels.sgemm(a, b, out, opt_level=OPT), reference(a, b), 700)


def test_k_zero_applies_only_the_epilogue():
    bias, c0 = np.arange(5, dtype=np.float32) - 2, np.ones((3, 5), np.float32)
    a, b = np.zeros((3, 0), np.float32), np.zeros((0, 5), np.float32)
    got = kernels.sgemm(a, b, c0.copy(), bias=bias, act="relu", beta=2.0, opt_level=OPT)
    np.testing.assert_array_equal(got, np.maximum(bias + 2.0, 0) * np.ones((3, 1)))


@pytest.mark.parametrize("m,n,k", [(1, 70, 33), (8, 130, 300), (37, 65, 64)])
def test_strided_and_transposed(m, n, k):
    rng = np.random.default_rng(2)
    big_a, big_b = rand(rng, 2 * m + 3, 2 * k + 5), rand(rng, 2 * k + 5, 2 * n + 3)
    views = {
        "a.T, b.T": (rand(rng, k, m).T, rand(rng, n, k).T),
        "leading dims": (big_a[:m, :k], big_b[:k, :n]),
        "column steps": (big_a[:m, : 2 * k : 2], big_b[1 : k + 1, 1 : 2 * n : 2]),
        "reversed": (big_a[:m, :k][::-1, ::-1], big_b[:k, :n][::-1, ::-1]),
        "float64": (rand(rng, m, k).astype(np.float64), rand(rng, k, n)),
    }
    for name, (a, b) in views.items():
        big_c = np.full((m, n + 9), 7.0, np.float32)
        got = kernels.sgemm(a, b, big_c[:, :n], opt_level=OPT)
        assert_close(got, reference(a, b), k), name
        assert (big_c[:, n:] == 7.0).all(), f"{name}: wrote outside C"


@pytest.mark.parametrize("m", [0, 1, 2, 7, 64, 100])
@pytest.mark.parametrize("transposed", [False, True])
def test_packed_weights(m, transposed):
    rng = np.random.default_rng(m)
    k, n = 530, 200
    b = rand(rng, n, k).T if transposed else rand(rng, k, n)
    packed = kernels.PackedB(b, opt_level=OPT)
    a, bias = rand(rng, m, k), rand(rng, n)
    assert_close(kernels.sgemm_packed(a, packed, bias=bias, act="gelu_tanh"), reference(a, b, bias, "gelu_tanh"), k)


@pytest.mark.parametrize("m,n,k", [(64, 1000, 1600), (7, 3000, 769), (1, 2304, 768)])
def test_packed_weights_in_rectangles_of_several_panels(m, n, k):
    """Pre-packed B where a thread's rectangle spans several panels (its first row block asks the next panel into
    L2 as it goes), K in uneven blocks and a partial last panel."""
    rng = np.random.default_rng(m + n + k)
    a, b, bias = rand(rng, m, k), rand(rng, k, n), rand(rng, n)
    assert_close(kernels.sgemm_packed(a, kernels.PackedB(b, opt_level=OPT), bias=bias, act="relu"),
                 reference(a, b, bias, "relu"), k)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("n,k", [(1024, 784), (10, 1024), (77, 33), (130, 257)])
def test_small_m_with_epilogue(m, n, k):
    """Single-request inference (batch 1 to 4): packed and plain weights, bias and relu, sizes off the vector."""
    rng = np.random.default_rng(m * 7 + n + k)
    a, b, bias = rand(rng, m, k), rand(rng, k, n), rand(rng, n)
    want = reference(a, b, bias, "relu")
    assert_close(kernels.sgemm_packed(a, kernels.PackedB(b, opt_level=OPT), bias=bias, act="relu"), want, k)
    assert_close(kernels.sgemm(a, b, bias=bias, act="relu", opt_level=OPT), want, k)
    assert_close(kernels.sgemm(a, np.ascontiguousarray(b.T).T, bias=bias, act="relu", opt_level=OPT), want, k)


def test_packed_size_matches_layout(lib):
    _, nr, _, _ = block_sizes()
    assert lib.cuvil_sgemm_packed_size(10, 1) == 10 * nr
    assert lib.cuvil_sgemm_packed_size(0, 5) == lib.cuvil_sgemm_packed_size(5, 0) == 0


def test_batched_attention_shapes():
    rng = np.random.default_rng(3)
    heads, seq, d = 5, 37, 16
    q, kt, v = rand(rng, heads, seq, d), rand(rng, heads, seq, d), rand(rng, heads, seq, d)
    scores = kernels.sgemm_batched(q, kt.transpose(0, 2, 1), alpha=0.25, opt_level=OPT)
    assert_close(scores, 0.25 * np.einsum("hsd,htd->hst", q, kt, dtype=np.float64), d)
    out = kernels.sgemm_batched(scores, v, opt_level=OPT)
    assert_close(out, np.matmul(scores.astype(np.float64), v), seq)


@pytest.mark.parametrize("batch", [0, 1, 2, 9])
def test_batched_shared_weight(batch):
    rng = np.random.default_rng(batch)
    a, w, bias = rand(rng, batch, 10, 300), rand(rng, 300, 70), rand(rng, 70)
    got = kernels.sgemm_batched(a, np.broadcast_to(w, (batch, 300, 70)), bias=bias, act="relu", opt_level=OPT)
    assert_close(got, reference(a, w, bias, "relu"), 300)


@pytest.mark.parametrize("m,n,k", [(1, 1000, 300), (3, 200, 64), (100, 300, 520), (130, 70, 40)])
def test_threads_give_identical_results(lib, m, n, k):
    """Each C element sums its K blocks in the same order whatever the partition of C among threads."""
    rng = np.random.default_rng(4)
    a, b, bias = rand(rng, m, k), rand(rng, k, n), rand(rng, n)
    results = []
    for threads in (1, 2, 3):
        lib.cuvil_set_num_threads(threads)
        results.append(kernels.sgemm(a, b, bias=bias, act="tanh", opt_level=OPT))
    lib.cuvil_set_num_threads(kernels.default_num_threads())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
    assert_close(results[0], reference(a, b, bias, "tanh"), k)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_activation_accuracy(act):
    x = np.concatenate([np.linspace(-20, 20, 4001), np.geomspace(1e-8, 10, 200), -np.geomspace(1e-8, 10, 200),
                        [0.0, -0.0, 88.0, -88.0, 100.0, -100.0]]).astype(np.float32)
    got, want = kernels.activation(x, act, opt_level=OPT).astype(np.float64), ACTS[act](x.astype(np.float64))
    assert np.isfinite(got).all()
    rel = {"sigmoid": 3e-7, "tanh": 3e-7, "silu": 4e-7, "hardswish": 3e-7}.get(act, 0.0)  # float roundings
    # gelu, and hardswish's x / 6 + 1/2 near x = -3, where it cancels: an ulp of 1/2 times |x|
    atol = 2e-7 * np.maximum(1, np.abs(x)) if act.startswith("gelu") or act == "hardswish" else 0.0
    excess = np.abs(got - want) - (rel * np.abs(want) + atol + 1e-38)
    worst = int(np.argmax(excess))
    assert excess[worst] <= 0, f"{act}({x[worst]}) = {got[worst]}, expected {want[worst]}"



@pytest.mark.parametrize("act", sorted(ACTS))
def test_activation_at_every_tail_in_place_or_not(act):
    """cuvil_activation runs the tile epilogue on whole rows and a padded tail; in place (how the int8 and 16-bit
    GEMMs call it) it gives the same bits as into a new array, and both match the reference, at every length up to
    two rows of a register block and past them."""
    lib, rng = kernels.load(OPT), np.random.default_rng(7)
    for n in [*range(1, 2 * 64 + 18), 1000]:
        x = (4 * rng.standard_normal(n)).astype(np.float32)
        out = kernels.activation(x, act, opt_level=OPT)
        inplace = x.copy()
        lib.cuvil_activation(kernels.ACTIVATIONS[act], n, inplace.ctypes.data, inplace.ctypes.data)
        np.testing.assert_array_equal(inplace, out)
        np.testing.assert_allclose(out, ACTS[act](x.astype(np.float64)), rtol=1e-6, atol=1e-6)


def test_errors():
    a, b = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)
    with pytest.raises(ShapeError, match="a is \\(2, 3\\) but b is \\(4, 5\\)"):
        kernels.sgemm(a, b, opt_level=OPT)
    with pytest.raises(ShapeError, match="out must be float32"):
        kernels.sgemm(a, b.T[:3, :4], np.ones((2, 4), np.float64), opt_level=OPT)
    with pytest.raises(ShapeError, match="bias must have shape"):
        kernels.sgemm(a, a.T, bias=np.ones(3), opt_level=OPT)
    with pytest.raises(ShapeError, match="not both"):
        kernels.sgemm(a, a.T, bias=np.ones(2), row_bias=np.ones(2), opt_level=OPT)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        kernels.sgemm(a, a.T, act="swish", opt_level=OPT)


def test_aligned_helpers():
    x = kernels.aligned_empty((3, 5))
    assert x.ctypes.data % 64 == 0 and x.shape == (3, 5) and x.dtype == np.float32 and x.flags.c_contiguous
    y = kernels.aligned_array(np.arange(6).reshape(2, 3), align=128)
    assert y.ctypes.data % 128 == 0 and y.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_header_declares_every_binding():
    header = (kernels.include_dir() / "cuvil_kernels.h").read_text()
    for name in kernels.SIGNATURES:
        assert f" {name}(" in header or f"*{name}(" in header, name
    for name, code in kernels.ACTIVATIONS.items():
        assert f"CUVIL_ACT_{name.upper()} = {code}" in header


def test_under_address_sanitizer(tmp_path):
    """Every entry point on odd shapes with exactly-sized heap buffers, one and two threads."""
    cc = toolchain.find_compiler()
    folder = kernels.include_dir()
    driver = os.path.join(os.path.dirname(__file__), "gemm_asan_driver.c")
    exe, unit = tmp_path / "driver", tmp_path / "kernels.c"
    unit.write_text("".join(f'#include "{name}"\n' for name in kernels.SOURCES))  # one unit, as the library
    cmd = [cc.path, "-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer", "-march=native", "-fopenmp",
           "-std=gnu11", f"-I{folder}", driver, str(unit), "-o", str(exe), "-lm"]
    built = subprocess.run(cmd, capture_output=True, text=True)
    if built.returncode != 0 and "asan" in built.stderr.lower():
        pytest.skip(f"the compiler cannot build with AddressSanitizer: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"))
    assert run.returncode == 0 and "OK" in run.stdout, run.stdout + run.stderr[-3000:]
