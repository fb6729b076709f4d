"""Indices outside their axis stop compiled code with the interpreter's IndexRangeError: the op, the index, the
axis and its size, and the ONNX node or Python line, on the C call path and on the ctypes one alike. Negative
indices count from the end where the op allows them, once: below -size is out of range too."""
import functools

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import codegen
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym


def _error(call) -> cuvil.IndexRangeError:
    with pytest.raises(cuvil.IndexRangeError) as info:
        call()
    assert isinstance(info.value, IndexError)
    return info.value


def _same_error(exe, module: Module, inputs: list, needle: str) -> str:
    """Both call paths of `exe` raise what the interpreter raises for `inputs`; returns the message."""
    want = _error(lambda: interpret(module, inputs))
    run = exe._run
    assert run.call_exact is not None, "the C call path is not built"
    for call in (lambda: run.call_exact(*inputs), lambda: run.call_ctypes(inputs)):
        got = _error(call)
        assert (str(got), got.message, str(got.loc)) == (str(want), want.message, str(want.loc))
    assert needle in str(want), str(want)
    return str(want)


def _embedding(vocab: int, dim: int, ids_shape, loc: str, ids_dtype: str = "i64") -> Module:
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (vocab, dim)), TensorType(ids_dtype, ids_shape)],
                             ["table", "ids"])
    b.ret(b.gather(*b.args, axis=0, loc=loc))
    return m


@pytest.fixture(scope="module")
def table():
    return np.random.default_rng(0).standard_normal((1000, 16)).astype(np.float32)


@pytest.mark.parametrize("ids_dtype", ["i64", "i32"])
def test_token_beyond_the_vocabulary(table, ids_dtype):
    m = _embedding(1000, 16, (2, 9), "model.onnx:Gather_3", ids_dtype)
    exe = compile_module(m)
    ids = np.arange(18).reshape(2, 9).astype(ids_dtype.replace("i", "int"))
    np.testing.assert_array_equal(exe(table, ids)[0], table[ids])
    ids[0, 4], ids[1, 2] = 5000, -4000  # the first in order is reported
    _same_error(exe, m, [table, ids],
                "'gather': index 5000 is out of bounds for axis 0 with size 1000 (at model.onnx:Gather_3)")


def test_negative_indices_count_from_the_end_once(table):
    m = _embedding(1000, 16, (4,), "lookup")
    exe = compile_module(m)
    ids = np.array([-1, -1000, 999, 0])
    np.testing.assert_array_equal(exe(table, ids)[0], table[ids])
    _same_error(exe, m, [table, np.array([3, -1001, 0, 0])], "index -1001 is out of bounds for axis 0 with size 1000")


def test_symbolic_axis_and_an_empty_table():
    """A size only known per call, down to 0: no element exists to read instead, so the in-order copy runs at once."""
    n, t = sym("n"), sym("t")
    m = _embedding(n, 4, (t,), "ids")
    exe = compile_module(m)
    table = np.ones((5, 4), np.float32)
    np.testing.assert_array_equal(exe(table, np.array([4, -5]))[0], table[[4, -5]])
    _same_error(exe, m, [table, np.array([1, 5])], "index 5 is out of bounds for axis 0 with size 5")
    _same_error(exe, m, [np.ones((0, 4), np.float32), np.array([0])], "index 0 is out of bounds for axis 0 with size 0")
    assert exe(np.ones((0, 4), np.float32), np.zeros(0, np.int64))[0].shape == (0, 4)


def test_a_gather_inside_a_reduction_and_a_fused_kernel():
    """The check inside a reduction's loops, with the kernel's other outputs: the first bad index still stops it."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (64, 4096)), TensorType("i64", (3,))], ["x", "rows"])
    g = b.gather(*b.args, axis=0, loc="pick")
    b.ret(b.reduce_sum(b.exp(g), axes=(0, 1), keepdims=False), b.mul(g, g))
    exe = compile_module(m)
    x = np.random.default_rng(1).standard_normal((64, 4096)).astype(np.float32)
    got = exe(x, np.array([1, -2, 7]))
    np.testing.assert_allclose(got[0], np.exp(x[[1, -2, 7]].astype(np.float64)).sum(), rtol=1e-5)
    _same_error(exe, m, [x, np.array([1, 64, 7])], "index 64 is out of bounds for axis 0 with size 64 (at pick)")


def test_library_index_ops():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4, 6)), TensorType("i64", (4, 3)),
                                         TensorType("f32", (4, 3))], ["x", "idx", "upd"])
    x, idx, upd = b.args
    b.ret(b.gather_elements(x, idx, axis=1, loc="ge"), b.scatter_elements(x, idx, upd, axis=1, reduction="add"))
    exe = compile_module(m)
    x, upd = np.arange(24, dtype=np.float32).reshape(4, 6), np.ones((4, 3), np.float32)
    ok = np.array([[0, -6, 5], [1, -1, 2], [3, 3, -2], [4, 0, 1]])
    for got, want in zip(exe(x, ok, upd), interpret(m, [x, ok, upd])):
        np.testing.assert_array_equal(got, want)
    bad = ok.copy()
    bad[2, 1], bad[3, 0] = 6, -100
    _same_error(exe, m, [x, bad, upd], "'gather_elements': index 6 is out of bounds for axis 1 with size 6 (at ge)")
    m2 = Module()
    b = Builder.new_function(m2, "main", [TensorType("f32", (4, 6)), TensorType("i64", (4, 3)),
                                          TensorType("f32", (4, 3))], ["x", "idx", "upd"])
    b.ret(b.scatter_elements(*b.args, axis=1, loc="sc"))
    bad[2, 1] = -7
    _same_error(compile_module(m2), m2, [x, bad, upd], "'scatter_elements': index -7 is out of bounds for axis 1")


def test_error_code_and_message_from_c(table):
    """The entry returns CUVIL_ERROR_INDEX and cuvil_last_error() holds the message: what a C host reads."""
    m = _embedding(1000, 16, (1,), "n")
    exe = compile_module(m)
    run = exe._run
    ids = np.array([1000])
    out = np.empty((1, 16), np.float32)
    state = run._thread_state()
    state.args[0], state.args[1], state.outs[0] = table.ctypes.data, ids.ctypes.data, out.ctypes.data
    assert run._entry(state.args, state.outs, state.dims, run._arena(state, ()), run._const_ptrs) == 1
    assert run._failure.args[0]() == b"'gather': index 1000 is out of bounds for axis 0 with size 1000 (at n)"
    assert "const char *cuvil_last_error(void)" in codegen.generate(exe.module).source


def _same_message(compiled, reference, *inputs) -> str:
    """`compiled(*inputs)` raises the IndexRangeError `reference(*inputs)` raises; returns its text."""
    want = _error(lambda: reference(*inputs))
    got = _error(lambda: compiled(*inputs))
    assert (str(got), got.message, str(got.loc)) == (str(want), want.message, str(want.loc))
    return str(got)


def test_onnx_gather_embedding_and_positions():
    """Word and learned position lookups as ONNX Gathers: a token id of 5000 in a 1000-word vocabulary, and 150
    positions into 128, raise as ONNX Runtime does, naming the node."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    words = numpy_helper.from_array(rng.standard_normal((1000, 8)).astype(np.float32), "words")
    positions = numpy_helper.from_array(rng.standard_normal((128, 8)).astype(np.float32), "positions")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["words", "ids"], ["w"], name="word_lookup"),
         helper.make_node("Gather", ["positions", "pos"], ["p"], name="position_lookup"),
         helper.make_node("Add", ["w", "p"], ["y"])], "emb",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "T"]),
         helper.make_tensor_value_info("pos", TensorProto.INT64, [1, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 8])], initializer=[words, positions])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    reference = cuvil.load_onnx(model)
    compiled = reference.optimize()
    ids, pos = np.array([[5, 7, -9]]), np.arange(3)[None]
    np.testing.assert_allclose(compiled(ids, pos)[0], reference(ids, pos)[0], rtol=1e-6)
    text = _same_message(compiled, reference, np.array([[1, 5000, 2]]), pos)
    assert "index 5000 is out of bounds for axis 0 with size 1000" in text and "word_lookup" in text
    text = _same_message(compiled, reference, np.zeros((1, 150), np.int64), np.arange(150)[None])
    assert "index 128 is out of bounds for axis 0 with size 128" in text and "position_lookup" in text


def _interpret_one(module: Module, *inputs: np.ndarray) -> list:
    return interpret(module, list(inputs))


def test_torch_embeddings():
    """nn.Embedding of words and of learned positions (arange over the sequence): eager PyTorch raises, and so
    does the compiled module, with the interpreter's message for the same program."""
    torch = pytest.importorskip("torch")

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.words, self.positions = torch.nn.Embedding(1000, 8), torch.nn.Embedding(128, 8)

        def forward(self, ids):
            return self.words(ids) + self.positions(torch.arange(ids.shape[1]))

    model = Embed().eval()
    for ids in (torch.zeros(1, 150, dtype=torch.int64), torch.tensor([[1, 2, 5000, 3, 4]])):
        with pytest.raises(IndexError):
            model(ids)
        compiled = cuvil.compile(model, example_inputs=(torch.zeros_like(ids),))
        text = _same_message(compiled.executable, functools.partial(_interpret_one, compiled.module), ids.numpy())
        assert ("index 128 is out of bounds for axis 0 with size 128" if ids.shape[1] == 150 else
                "index 5000 is out of bounds for axis 0 with size 1000") in text, text
        assert "test_index_errors.py:" in text, text  # the forward's line


def test_torch_refuses_negative_indices_where_eager_does():
    """Embedding, index_select and gather raise on index -1 in eager PyTorch (x[i] wraps it): so do the compiled
    module and its interpreter, in the fused gather, the C check of an input's indices and the library gather."""
    torch = pytest.importorskip("torch")

    class Lookups(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.words = torch.nn.Embedding(10, 4)

        def forward(self, ids, x, cols):
            return self.words(ids) * 2.0, torch.index_select(x, 0, ids[0]), torch.gather(x, 1, cols), x[ids[0]]

    model = Lookups().eval()
    ids, x, cols = torch.tensor([[1, 2, 3]]), torch.randn(10, 5), torch.tensor([[0, 4]] * 10)
    compiled = cuvil.compile(model, example_inputs=(ids, x, cols))
    for got, want in zip(compiled(torch.tensor([[0, 9, 4]]), x, cols), model(torch.tensor([[0, 9, 4]]), x, cols)):
        np.testing.assert_allclose(got, want.detach(), rtol=1e-6)
    reference = functools.partial(_interpret_one, compiled.module)
    for args, needle in (((torch.tensor([[1, -1, 2]]), x, cols), "'gather': index -1 is out of bounds for axis 0"),
                         ((ids, x, torch.tensor([[0, -5]] * 10)), "'gather_elements': index -5 is out of bounds")):
        with pytest.raises((IndexError, RuntimeError)):
            model(*args)
        assert needle in _same_message(compiled.executable, reference, *[a.numpy() for a in args])


def pick(x, idx):
    return x[idx] * 2.0


def test_jit_fancy_index():
    """`x[idx]` under @cuvil.jit: NumPy's IndexError as an IndexRangeError at the line, as the interpreter target's."""
    x = np.arange(10, dtype=np.float32)
    f, reference = cuvil.jit(pick), cuvil.jit(pick, target="interpreter")
    np.testing.assert_array_equal(f(x, np.array([1, -1, -10])), pick(x, np.array([1, -1, -10])))
    for idx, needle in ((np.array([3, 10]), "index 10 is out of bounds for axis 0 with size 10"),
                        (np.array([-11, 0]), "index -11 is out of bounds for axis 0 with size 10")):
        with pytest.raises(IndexError):
            pick(x, idx)
        text = _same_message(f, reference, x, idx)
        assert needle in text and "test_index_errors.py:" in text, text
