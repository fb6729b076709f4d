import numpy as np

from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.passes import DCE, FoldBatchNorm, PassManager, Pipeline


def conv_bn(with_bias: bool, extra_user: bool = False):
    rng = np.random.default_rng(0)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, 8, 8))], ["x"])
    w = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    params = [b.constant(rng.standard_normal(4).astype(np.float32), "c")] if with_bias else []
    y = b.conv(b.args[0], w, *params, pads=(1, 1, 1, 1))
    bn = [b.constant(v.astype(np.float32), k) for k, v in
          (("scale", rng.standard_normal(4)), ("bias", rng.standard_normal(4)), ("mean", rng.standard_normal(4)),
           ("var", rng.random(4) + 0.5))]
    out = b.batch_norm(y, *bn, epsilon=1e-3)
    b.ret(out, y) if extra_user else b.ret(out)
    return m


def test_batch_norm_folds_into_conv_with_and_without_bias():
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for with_bias in (True, False):
        m = conv_bn(with_bias)
        want = interpret(m, [x])
        PassManager().run(Pipeline("p", [FoldBatchNorm(), DCE()]), m)
        names = [op.name for op in m.main.walk()]
        assert "batch_norm" not in names and names.count("conv") == 1
        np.testing.assert_allclose(interpret(m, [x])[0], want[0], rtol=1e-5, atol=1e-5)


def test_conv_with_another_user_is_left_alone():
    m = conv_bn(True, extra_user=True)
    assert not FoldBatchNorm().run_on_operation(m.main)


def test_batch_norm_folds_into_a_linear_layer():
    rng = np.random.default_rng(0)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (5, 8))], ["x"])
    y = b.matmul(b.args[0], b.constant(rng.standard_normal((8, 3)).astype(np.float32), "w"))
    bn = [b.constant(v.astype(np.float32), k) for k, v in (("scale", rng.standard_normal(3)),
          ("bias", rng.standard_normal(3)), ("mean", rng.standard_normal(3)), ("var", rng.random(3) + 0.5))]
    b.ret(b.batch_norm(y, *bn))
    x = rng.standard_normal((5, 8)).astype(np.float32)
    want = interpret(m, [x])
    PassManager().run(Pipeline("p", [FoldBatchNorm(), DCE()]), m)
    assert "batch_norm" not in [op.name for op in m.main.walk()]
    np.testing.assert_allclose(interpret(m, [x])[0], want[0], rtol=1e-5, atol=1e-5)
