"""cuvil.runtime.Runtime and cuvil.nd (the seed's and TVM's names) over a real exported `.cuv`: calls, zero-copy
bind_input / bind_output, async futures, the memory pool's reuse and cap, eight threads at once, thread counts."""
from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cuvil
from cuvil.runtime.pool import MemoryPool

W = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
B = np.linspace(-1, 1, 8, dtype=np.float32)
W2 = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mlp(x):
    return np.maximum(x @ W + B, 0.0)


def reference(x):
    return np.maximum(x @ W + B, 0.0)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """An MLP with a symbolic batch, exported from @cuvil.jit."""
    path = tmp_path_factory.mktemp("runtime") / "mlp.cuv"
    fn = cuvil.jit(mlp, dynamic_dims={"x": {0: "batch"}})
    cuvil.export(fn, path, example_inputs=(np.ones((2, 16), np.float32),))
    return str(path)


def two_layers(x):
    return np.maximum(x @ W + B, 0.0) @ W2


@pytest.fixture(scope="module")
def layered(tmp_path_factory):
    """Two layers: the hidden activations live in the call's workspace (32 bytes a row)."""
    path = tmp_path_factory.mktemp("runtime") / "two.cuv"
    fn = cuvil.jit(two_layers, dynamic_dims={"x": {0: "batch"}})
    cuvil.export(fn, path, example_inputs=(np.ones((2, 16), np.float32),))
    return str(path)


def batch(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)


# -- cuvil.nd ------------------------------------------------------------------------------------------------------
def test_nd_array_is_a_zero_copy_view():
    x = batch(3)
    a = cuvil.nd.array(x)
    assert a.numpy() is x and a.shape == (3, 16) and a.dtype == "float32" and a.ndim == 2
    assert np.asarray(a) is x
    strided = cuvil.nd.array(x[:, ::2])  # not contiguous: the one case that copies
    assert strided.numpy().flags.c_contiguous and not np.shares_memory(strided.numpy(), x)
    assert cuvil.nd.array(x, "cpu").numpy() is x  # TVM's order: tvm.nd.array(x, dev)
    assert cuvil.nd.array(x, dtype="f64").dtype == np.float64


def test_nd_empty_is_aligned_and_takes_cuvil_dtype_names():
    e = cuvil.nd.empty((5, 3), "f32")
    assert e.dtype == np.float32 and e.shape == (5, 3) and e.numpy().ctypes.data % 64 == 0
    with pytest.raises(cuvil.UnsupportedError, match="device 'cuda'"):
        cuvil.nd.empty((2,), device="cuda")


# -- calls -------------------------------------------------------------------------------------------------------
def test_get_function_and_call(model):
    rt = cuvil.runtime.Runtime(device="cpu")
    exe = rt.load_executable(model)
    fn = exe.get_function("main")
    assert exe.entries == ["main"] and fn is exe["main"]
    assert [p.name for p in fn.inputs] == ["x"] and fn.inputs[0].shape == ("batch", 16)
    for n in (1, 3, 7):
        x = batch(n)
        y = fn(cuvil.nd.array(x))
        assert isinstance(y, cuvil.nd.NDArray) and y.shape == (n, 8)
        np.testing.assert_allclose(y.numpy(), reference(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fn(x=batch(2)).numpy(), reference(batch(2)), rtol=1e-5, atol=1e-5)  # by name
    with pytest.raises(cuvil.ShapeError, match="missing input"):
        fn()
    rt.close()


def test_unknown_device_and_bad_thread_count_are_clear():
    with pytest.raises(cuvil.UnsupportedError, match="device 'rocm' is not supported yet"):
        cuvil.runtime.Runtime(device="rocm")
    with pytest.raises(ValueError, match="num_threads must be a positive int"):
        cuvil.runtime.Runtime(num_threads=0)


def test_bind_input_and_output_work_in_place(model):
    rt = cuvil.runtime.Runtime()
    rt.load_executable(model)
    x = batch(4)
    out = cuvil.nd.empty((4, 8), "float32")
    rt.bind_input("x", cuvil.nd.array(x))
    rt.bind_output(rt._main().outputs[0].name, out)
    rt.run()
    assert rt.get_output(0).numpy() is out.numpy()  # the bound array itself, written in place
    np.testing.assert_allclose(out.numpy(), reference(x), rtol=1e-5, atol=1e-5)
    x[:] = batch(4, seed=9)  # the input was bound, not copied: the next run reads the new values
    rt.run()
    np.testing.assert_allclose(out.numpy(), reference(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(cuvil.ShapeError, match="no input named 'nope'"):
        rt.bind_input("nope", x)


def test_run_needs_every_input_bound(model):
    rt = cuvil.runtime.Runtime()
    with pytest.raises(cuvil.CuvilError, match="load_executable"):
        rt.run()
    rt.load_executable(model)
    with pytest.raises(cuvil.ShapeError, match="bind the input"):
        rt.run()


def test_a_wrong_output_buffer_is_refused(model):
    rt = cuvil.runtime.Runtime()
    rt.load_executable(model)
    rt.bind_input("x", batch(4))
    rt.bind_output(rt._main().outputs[0].name, cuvil.nd.empty((3, 8)))
    with pytest.raises(cuvil.ShapeError):
        rt.run()


def test_async_calls_return_futures(model):
    with cuvil.runtime.Runtime(enable_async=True) as rt:
        fn = rt.load_executable(model).get_function()
        xs = [batch(n, seed=n) for n in (1, 2, 5, 3)]
        futures = [fn(x) for x in xs]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        for f, x in zip(futures, xs):
            np.testing.assert_allclose(f.result(timeout=60).numpy(), reference(x), rtol=1e-5, atol=1e-5)
        rt.bind_input("x", xs[2])
        done = rt.run()
        assert isinstance(done, concurrent.futures.Future)
        np.testing.assert_allclose(done.result(timeout=60).numpy(), reference(xs[2]), rtol=1e-5, atol=1e-5)
        assert rt.get_output(0) is done.result()


# -- the memory pool ---------------------------------------------------------------------------------------------
def test_pool_reuses_an_output_only_once_it_is_dropped(model):
    rt = cuvil.runtime.Runtime(memory_pool_size_mb=16)
    fn = rt.load_executable(model).get_function()
    first = fn(batch(6))
    address = first.numpy().ctypes.data
    kept = first.numpy().copy()
    second = fn(batch(6, seed=2))  # `first` is still held: a new block
    assert second.numpy().ctypes.data != address
    np.testing.assert_array_equal(first.numpy(), kept)
    del first
    third = fn(batch(6, seed=3))
    assert third.numpy().ctypes.data == address and rt.pool.reused >= 1
    np.testing.assert_allclose(third.numpy(), reference(batch(6, seed=3)), rtol=1e-5, atol=1e-5)


def test_pool_honours_its_cap(model):
    cap_mb = 1 / 1024  # 1 KiB: one (8, 8) f32 output is 256 bytes; a (64, 8) one is 2 KiB
    rt = cuvil.runtime.Runtime(memory_pool_size_mb=cap_mb)
    fn = rt.load_executable(model).get_function()
    held = [fn(batch(8, seed=s)) for s in range(6)]  # all alive at once: only 4 fit
    big = fn(batch(64))
    assert rt.pool.held_bytes <= rt.pool.cap_bytes == 1024 and rt.pool.unpooled >= 2
    for s, y in enumerate(held):
        np.testing.assert_allclose(y.numpy(), reference(batch(8, seed=s)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(big.numpy(), reference(batch(64)), rtol=1e-5, atol=1e-5)


def test_workspaces_come_from_the_pool_and_are_reused(layered):
    rt = cuvil.runtime.Runtime(memory_pool_size_mb=1)
    fn = rt.load_executable(layered).get_function()
    assert cuvil.load(layered).metadata["entries"]["main"]["arena_bytes"] != "0"
    for seed in range(6):
        x = batch(100, seed)
        np.testing.assert_allclose(fn(x).numpy(), two_layers(x), rtol=1e-4, atol=1e-4)
    assert rt.pool.made == 2 and rt.pool.reused == 10  # one output block and one workspace, reused 5 times each
    assert sorted(b.nbytes for b in rt.pool._blocks) == [100 * 4 * 4 + 64, 100 * 32 + 64]  # (+ alignment slack)
    held = [fn(batch(100, s)) for s in range(3)]  # outputs held: new output blocks, the one workspace reused
    assert rt.pool.made == 4 and len(held) == 3


def test_a_workspace_over_the_cap_is_not_kept(layered):
    rt = cuvil.runtime.Runtime(memory_pool_size_mb=2 / 1024)  # 2 KiB: the (100, 4) output fits, its workspace not
    fn = rt.load_executable(layered).get_function()
    for seed in range(3):
        x = batch(100, seed)
        np.testing.assert_allclose(fn(x).numpy(), two_layers(x), rtol=1e-4, atol=1e-4)
    assert rt.pool.held_bytes <= 2048 and rt.pool.unpooled == 3


def test_pool_drops_idle_blocks_to_make_room():
    pool = MemoryPool(cap_bytes=4096)
    a = pool.take((512,), np.float32)  # 2 KiB
    del a
    b = pool.take((1000,), np.float32)  # 4000 bytes: the idle 2 KiB block goes to make room
    assert pool.held_bytes == 4000 and pool.made == 2 and pool.unpooled == 0
    view = b[10:20]
    del b
    c = pool.take((1000,), np.float32)  # a view still refers to the block: not reused
    assert pool.unpooled == 1 and not np.shares_memory(c, view)
    with pytest.raises(ValueError, match="at least 0"):
        MemoryPool(-1)


# -- threads -----------------------------------------------------------------------------------------------------
def test_eight_threads_calling_one_function(model):
    rt = cuvil.runtime.Runtime(memory_pool_size_mb=4)
    fn = rt.load_executable(model).get_function()

    def work(t: int) -> bool:
        for i in range(25):
            x = batch(1 + (t + i) % 9, seed=100 * t + i)
            y = fn(cuvil.nd.array(x))
            np.testing.assert_allclose(y.numpy(), reference(x), rtol=1e-5, atol=1e-5)
        return True

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(8)))


def test_num_threads_per_runtime_and_per_function_bound_the_threads_used(model):
    """In a fresh process (OpenMP keeps its threads): 1 thread from one runtime starts no worker thread; 2 from
    another runtime, then from one function, starts one."""
    code = textwrap.dedent(f"""
        import os, numpy as np, cuvil
        threads = lambda: len(os.listdir("/proc/self/task"))
        x = np.random.default_rng(0).standard_normal((40000, 16)).astype(np.float32)
        base = threads()
        one = cuvil.runtime.Runtime(num_threads=1).load_executable({model!r}).get_function()
        one(x); one(x)
        after_one = threads()
        two = cuvil.runtime.Runtime(num_threads=2).load_executable({model!r}).get_function()
        two(x)
        after_two = threads()
        fn = cuvil.runtime.Runtime().load_executable({model!r}).get_function()
        fn.set_num_threads(1)
        fn(x)
        print(base, after_one, after_two, threads())
    """)
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_WAIT_POLICY": "passive"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    base, after_one, after_two, after_fn = map(int, out.stdout.split())
    assert after_one == base
    assert after_two == base + 1
    assert after_fn == after_two  # one thread from now on: no new workers


def test_set_num_threads_applies_to_functions_loaded_before(model, monkeypatch):
    rt = cuvil.runtime.Runtime(num_threads=3)
    fn = rt.load_executable(model).get_function()
    seen = []
    monkeypatch.setattr(type(fn.function), "set_num_threads", lambda self, n: seen.append(n))
    rt.set_num_threads(2)
    fn.set_num_threads(1)
    rt.set_num_threads(4)  # the function's own count wins over the runtime's
    assert seen == [2, 1, 1]


def test_runtime_and_nd_are_attributes_of_cuvil_imported_on_first_use():
    code = ("import sys, cuvil; light = 'cuvil.runtime' not in sys.modules; cuvil.nd.array, cuvil.runtime.Runtime; "
            "print(light, [m for m in ('torch', 'onnx', 'jax') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0 and out.stdout.split() == ["True", "[]"], out.stderr
