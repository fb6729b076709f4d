"""The layout pass: convolution chains in the blocked layout, conversions only at their boundaries."""
import numpy as np
import pytest

from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.passes import DCE, BlockLayout, PassManager, Pipeline, Recompose
from cuvil.passes import layout

from .helpers import body, expect

RNG = np.random.default_rng(0)


def _const(b, *shape):
    return b.constant(RNG.standard_normal(shape).astype(np.float32))


def _run(m: Module, x: np.ndarray, block: int = 8) -> str:
    """Run the pass (verifying) and DCE (the replaced weights), check the interpreter's outputs are unchanged;
    return the new body."""
    want = interpret(m, [x])
    PassManager(verify=True).run(Pipeline("test", [BlockLayout(block), DCE()]), m)
    for got, w in zip(interpret(m, [x]), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4)
    return body(m)


@pytest.fixture
def free_conversions(monkeypatch):
    """Conversions cost nothing: every chain is blocked (the IR tests are about structure, not cost)."""
    monkeypatch.setitem(layout.COST, "convert", 0.0)


def _chain(shape=(1, 3, 6, 6)):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    y = b.relu(b.conv(b.args[0], _const(b, 12, shape[1], 3, 3), _const(b, 12), pads=(1, 1, 1, 1)))
    z = b.conv(y, _const(b, 12, 12, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    b.ret(b.avg_pool(b.relu(z), kernel=(2, 2)))  # not blocked: the last conv writes the plain layout
    return m


def test_conv_relu_conv_stays_blocked(free_conversions):
    got = _run(_chain(), RNG.standard_normal((1, 3, 6, 6)).astype(np.float32))
    ops = [line.split(" = ")[1].split()[0] for line in got.splitlines() if " = " in line]
    assert [o for o in ops if o != "constant"] == ["reshape", "transpose", "conv_nchwc", "conv_nchwc", "avg_pool"]
    assert got.count('activation = "relu"') == 2  # both relus became epilogues
    assert "f32[1,12,3,3] = conv_nchwc" in got and "channels = 12" in got  # the last conv writes the plain layout
    assert "f32[1,1,6,6,3] = transpose" in got  # 3 input channels: one block of 3, not padded to 8


def test_residual_block_adds_in_the_epilogue(free_conversions):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 8, 5, 5))], ["x"])
    x = b.args[0]
    y = b.relu(b.conv(x, _const(b, 8, 8, 3, 3), _const(b, 8), pads=(1, 1, 1, 1)))
    z = b.relu(b.add(b.conv(y, _const(b, 8, 8, 3, 3), _const(b, 8), pads=(1, 1, 1, 1)), x))
    b.ret(b.reduce_mean(z, axes=(2, 3)))
    got = _run(m, RNG.standard_normal((2, 8, 5, 5)).astype(np.float32))
    assert got == expect("""
        %0:f32[2,1,8,5,5] = reshape %x {shape = [2, 1, 8, 5, 5]}
        %1:f32[2,1,5,5,8] = transpose %0 {perm = [0, 1, 3, 4, 2]}
        %2:f32[1,1,3,3,8,8] = constant {name = "nchwc_w"}
        %3:f32[1,8] = constant {name = "nchwc_b"}
        %4:f32[2,1,5,5,8] = conv_nchwc %1, %2, %3 {strides = [1, 1], dilations = [1, 1], pads = [1, 1, 1, 1], \
activation = "relu", channels = 0, algorithm = "direct"}
        %5:f32[1,1,3,3,8,8] = constant {name = "nchwc_w_1"}
        %6:f32[1,8] = constant {name = "nchwc_b_1"}
        %7:f32[2,1,5,5,8] = conv_nchwc %4, %5, %6, %1 {strides = [1, 1], dilations = [1, 1], pads = [1, 1, 1, 1], \
activation = "relu", channels = 0, algorithm = "direct"}
        %8:f32[2,1,8,5,5] = transpose %7 {perm = [0, 1, 4, 2, 3]}
        %9:f32[2,8,5,5] = reshape %8 {shape = [2, 8, 5, 5]}
        %10:f32[2,8,1,1] = reduce_mean %9 {axes = [2, 3], keepdims = true}
        return %10""")
    # x is converted once for both its users (the first conv and the residual add)


@pytest.mark.parametrize("act, attrs, want", [("clip", {"min": 0.0, "max": 6.0}, "relu6"),
                                               ("sigmoid", {}, "sigmoid"), ("tanh", {}, "tanh"), ("silu", {}, "silu"),
                                               ("hardswish", {}, "hardswish"),
                                               ("clip", {"min": 0.0, "max": 5.0}, None)])
def test_activations_after_residual_become_the_epilogue(act, attrs, want, free_conversions):
    """conv -> + residual -> activation: the add and the activation (relu6 = clip to [0, 6]) join the conv; a clip
    to other bounds stays an op of its own."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 8, 5, 5))], ["x"])
    x = b.args[0]
    y = b.emit(act, b.add(b.conv(x, _const(b, 8, 8, 3, 3), _const(b, 8), pads=(1, 1, 1, 1)), x), **attrs)
    b.ret(b.conv(y, _const(b, 8, 8, 1, 1), _const(b, 8)))
    got = _run(m, RNG.standard_normal((2, 8, 5, 5)).astype(np.float32))
    convs = [line for line in got.splitlines() if "= conv_nchwc" in line]
    assert len(convs) == 2 and convs[0].count("%1") == 2  # the residual, x blocked, is the first conv's operand
    if want:
        assert f'activation = "{want}"' in convs[0] and f"= {act} " not in got
    else:
        assert 'activation = "none"' in convs[0] and f"= {act} " in got


def test_value_with_many_users_is_converted_once(free_conversions):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 4, 4, 4))], ["x"])
    x = b.args[0]
    y = b.conv(x, _const(b, 4, 4, 1, 1))
    b.ret(b.reduce_sum(y, axes=(1,)), b.reduce_max(y, axes=(1,)), b.conv(b.neg(y), _const(b, 4, 4, 3, 3)))
    got = _run(m, RNG.standard_normal((1, 4, 4, 4)).astype(np.float32), block=4)
    # x in once; y out once for both reductions; the last conv writes the plain layout itself
    assert got.count("perm = [0, 1, 3, 4, 2]") == 1 and got.count("perm = [0, 1, 4, 2, 3]") == 1
    assert "f32[1,4,2,2] = conv_nchwc" in got


def test_symbolic_batch_and_image(free_conversions):
    from cuvil.ir import sym
    m = Module()
    n, h = sym("n"), sym("h")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 5, h, 7))], ["x"])
    b.ret(b.relu(b.conv(b.args[0], _const(b, 6, 5, 3, 3), _const(b, 6), strides=(2, 1), pads=(1, 1, 1, 1))))
    got = _run(m, RNG.standard_normal((2, 5, 9, 7)).astype(np.float32))
    assert "f32[n,6,(h-1)//2+1,7] = conv_nchwc" in got and "channels = 6" in got


def test_cheap_convs_are_left_alone():
    """A 1x1 conv between two non-blocked ops (a grouped conv, not depthwise) saves less than its conversions cost."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 16, 14, 14))], ["x"])
    y = b.conv(b.args[0], _const(b, 16, 2, 3, 3), groups=8, pads=(1, 1, 1, 1))
    b.ret(b.conv(b.relu(y), _const(b, 24, 16, 1, 1)))
    got = _run(m, RNG.standard_normal((1, 16, 14, 14)).astype(np.float32))
    assert "conv_nchwc" not in got


def test_grouped_and_non_constant_convs_are_left_alone(free_conversions):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 4, 5, 5)), TensorType("f32", (4, 4, 3, 3))],
                             ["x", "w"])
    x, w = b.args
    b.ret(b.conv(x, _const(b, 4, 2, 3, 3), groups=2), b.conv(x, w))
    assert not BlockLayout(8).run_on_operation(m.main)


@pytest.mark.parametrize("shape, kernel, attrs, want", [
    ((1, 8, 14, 14), (3, 3), {"pads": (1, 1, 1, 1)}, "winograd"),  # 16 tiles of 4x4
    ((1, 8, 7, 7), (3, 3), {"pads": (1, 1, 1, 1)}, "direct"),  # 4 tiles: too few to reuse the weights
    ((4, 8, 7, 7), (3, 3), {"pads": (1, 1, 1, 1)}, "winograd"),  # a batch brings the tiles
    (("n", 8, 8, 8), (3, 3), {"pads": (1, 1, 1, 1)}, "winograd"),  # a batch of 4 whole tiles, weights in cache
    ((1, 8, 8, 8), (3, 3), {"pads": (1, 1, 1, 1)}, "direct"),  # one image: 4 tiles, one group
    (("n", 4096, 8, 8), (3, 3), {"pads": (1, 1, 1, 1)}, "direct"),  # 4.7 MB of transformed weights per group
    (("n", 8, 7, 7), (3, 3), {"pads": (1, 1, 1, 1)}, "direct"),  # edge tiles
    ((1, 8, 28, 28), (3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 2)}, "direct"),
    ((1, 8, 28, 28), (3, 3), {"pads": (2, 2, 2, 2), "dilations": (2, 2)}, "direct"),
    ((1, 8, 28, 28), (5, 5), {"pads": (2, 2, 2, 2)}, "direct"),
    ((1, 5, 28, 28), (3, 3), {"pads": (1, 1, 1, 1)}, "direct"),  # fewer channels than one block
])
def test_winograd_where_it_pays(shape, kernel, attrs, want, free_conversions):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", tuple(sym(d) if isinstance(d, str) else d
                                                                 for d in shape))], ["x"])
    b.ret(b.relu(b.conv(b.args[0], _const(b, 8, shape[1], *kernel), _const(b, 8), **attrs)))
    got = _run(m, RNG.standard_normal((2, *shape[1:]) if shape[0] == "n" else shape).astype(np.float32))
    assert f'algorithm = "{want}"' in got


def test_max_pool_stays_blocked(free_conversions):
    """A stem's conv -> relu -> max_pool -> conv: the pool runs on the blocked tensor as a 3-D pool whose
    window is 1 wide over the block, so nothing is converted between the convolutions."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, 16, 16))], ["x"])
    y = b.relu(b.conv(b.args[0], _const(b, 8, 3, 3, 3), _const(b, 8), strides=(2, 2), pads=(1, 1, 1, 1)))
    z = b.max_pool(y, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    b.ret(b.relu(b.conv(z, _const(b, 8, 8, 3, 3), _const(b, 8), pads=(1, 1, 1, 1))))
    got = _run(m, RNG.standard_normal((1, 3, 16, 16)).astype(np.float32))
    ops = [line.split(" = ")[1].split()[0] for line in got.splitlines() if " = " in line]
    assert [o for o in ops if o != "constant"] == ["reshape", "transpose", "conv_nchwc", "max_pool", "conv_nchwc"]
    assert "f32[1,1,4,4,8] = max_pool" in got and "kernel = [3, 3, 1]" in got and "pads = [1, 1, 0, 1, 1, 0]" in got


@pytest.mark.parametrize("keepdims", [True, False])
def test_spatial_sum_reads_the_blocked_layout(keepdims, free_conversions):
    """Squeeze-excite's mean of a blocked conv's result sums the blocked tensor (`spatial_sum_nchwc`); only the
    [N, C/cb, 1, 1, cb] sums are unblocked (12 channels: the padding sliced off), never the map itself."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 3, 9, 7))], ["x"])
    y = b.relu(b.conv(b.args[0], _const(b, 12, 3, 3, 3), _const(b, 12), pads=(1, 1, 1, 1)))
    b.ret(b.reduce_sum(y, axes=(-1, 2), keepdims=keepdims))
    got = _run(m, RNG.standard_normal((2, 3, 9, 7)).astype(np.float32))
    ops = [line.split(" = ")[1].split()[0] for line in got.splitlines() if " = " in line]
    assert "f32[2,2,1,1,8] = spatial_sum_nchwc" in got and "reduce_sum" not in ops
    assert "f32[2,2,8,1,1] = transpose" in got and ops.count("transpose") == 2  # the input's and the sums'
    assert "slice" in ops and ("reshape" in ops[-1]) != keepdims


def test_narrow_outputs_are_not_padded_to_a_block(free_conversions):
    """A UNet's last conv (8 -> 2 channels) and its sigmoid stay plain: a 16-lane block would compute 8x the results
    and unblock them after; the conv before it, whose 16 channels fill a block, stays blocked."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 16, 8, 8))], ["x"])
    y = b.relu(b.conv(b.args[0], _const(b, 16, 16, 3, 3), _const(b, 16), pads=(1, 1, 1, 1)))
    b.ret(b.sigmoid(b.conv(y, _const(b, 2, 16, 3, 3), _const(b, 2), pads=(1, 1, 1, 1))))
    got = _run(m, RNG.standard_normal((1, 16, 8, 8)).astype(np.float32), block=16)
    assert got.count("conv_nchwc") == 1 and "f32[1,2,8,8] = conv " in got, got


def test_padding_counts_in_the_cost():
    conv = Builder.new_function(Module(), "main", [TensorType("f32", (1, 20, 8, 8))], ["x"])
    op = conv.conv(conv.args[0], _const(conv, 10, 20, 3, 3)).owner
    assert layout._pad_factor(op, 8) == pytest.approx(16 / 10 * 24 / 20)  # outputs and wide inputs padded
    assert layout._pad_factor(op, 32) == pytest.approx(32 / 10)  # 20 inputs: one narrow block
    assert layout.fills_blocks(op, 16) and not layout.fills_blocks(op, 32)


def _inverted_residual(b, x, channels, hidden, stride=1):
    """MobileNetV2's block: 1x1 expand -> relu6 -> 3x3 depthwise -> relu6 -> 1x1 project (-> + x)."""
    y = b.clip(b.conv(x, _const(b, hidden, channels, 1, 1), _const(b, hidden)), min=0.0, max=6.0)
    y = b.clip(b.conv(y, _const(b, hidden, 1, 3, 3), _const(b, hidden), groups=hidden, pads=(1, 1, 1, 1),
                      strides=(stride, stride)), min=0.0, max=6.0)
    y = b.conv(y, _const(b, channels, hidden, 1, 1), _const(b, channels))
    return b.add(y, x) if stride == 1 else y


def test_mobile_blocks_stay_blocked_through_depthwise_convs():
    """Inverted residual blocks are blocked end to end at the real cost model: the depthwise convs join the chain, so
    the 1x1 convs between them need no conversions; relu6 and the residual add become epilogues."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 16, 28, 28))], ["x"])
    y = _inverted_residual(b, _inverted_residual(b, b.args[0], 16, 96), 16, 96, stride=2)
    b.ret(b.reduce_mean(y, axes=(2, 3)))
    got = _run(m, RNG.standard_normal((1, 16, 28, 28)).astype(np.float32))
    ops = [line.split(" = ")[1].split()[0] for line in got.splitlines() if " = " in line]
    assert [o for o in ops if o not in ("constant", "reshape", "transpose")] == \
        ["conv_nchwc", "dwconv_nchwc", "conv_nchwc", "conv_nchwc", "dwconv_nchwc", "conv_nchwc", "reduce_mean"]
    assert got.count('activation = "relu6"') == 4 and got.count("= transpose") == 1  # converted once, in
    assert "f32[1,16,14,14] = conv_nchwc" in got  # the last conv writes the plain layout


def test_depthwise_convs_of_few_channels_are_left_alone(free_conversions):
    """3 channels padded to a block would compute 16/3 the work: the plain depthwise kernel keeps them."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, 9, 9))], ["x"])
    b.ret(b.relu(b.conv(b.args[0], _const(b, 3, 1, 3, 3), groups=3, pads=(1, 1, 1, 1))))
    assert not BlockLayout(16).run_on_operation(m.main)


def test_clip_as_max_then_min_becomes_relu6(free_conversions):
    """ONNX's Clip(x, 0, 6) converts to max(x, 0) then min(., 6): after a blocked conv, its relu6 epilogue."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 16, 9, 9))], ["x"])
    y = b.conv(b.args[0], _const(b, 16, 1, 3, 3), _const(b, 16), groups=16, pads=(1, 1, 1, 1))
    y = b.min(b.max(y, b.full(0.0, y.type.shape, y.type.dtype)), b.full(6.0, y.type.shape, y.type.dtype))
    z = b.max(b.conv(y, _const(b, 16, 16, 1, 1)), b.full(0.0, y.type.shape, y.type.dtype))
    b.ret(b.conv(z, _const(b, 16, 16, 1, 1)))
    got = _run(m, RNG.standard_normal((1, 16, 9, 9)).astype(np.float32) * 4)
    assert 'activation = "relu6"' in got and 'activation = "relu"' in got and "= min" not in got and "= max" not in got


def test_x_times_sigmoid_x_becomes_silu(free_conversions):
    """torch.onnx exports SiLU as x * sigmoid(x): Recompose makes it silu, which after a blocked conv (plain or
    depthwise) becomes its epilogue."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 16, 9, 9))], ["x"])
    y = b.conv(b.args[0], _const(b, 16, 16, 1, 1), _const(b, 16))
    y = b.mul(b.sigmoid(y), y)
    z = b.conv(y, _const(b, 16, 1, 3, 3), _const(b, 16), groups=16, pads=(1, 1, 1, 1))
    z = b.mul(z, b.sigmoid(z))
    b.ret(b.conv(z, _const(b, 16, 16, 1, 1)))
    PassManager(verify=True).run(Pipeline("recompose", [Recompose(), DCE()]), m)
    got = _run(m, RNG.standard_normal((1, 16, 9, 9)).astype(np.float32) * 4)
    assert got.count('activation = "silu"') == 2 and "sigmoid" not in got and "= mul" not in got


@pytest.mark.parametrize("skip_channels,blocked", [(16, True), (12, False)])
def test_channel_concat_of_whole_blocks_stays_blocked(free_conversions, skip_channels, blocked):
    """A skip connection (conv -> concat with another conv's output -> conv) concatenates the block axis when every
    operand fills its blocks; 12 channels in blocks of 8 would leave padding in the middle, so that concat is plain."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 8, 5, 7))], ["x"])
    skip = b.relu(b.conv(b.args[0], _const(b, skip_channels, 8, 3, 3), pads=(1, 1, 1, 1)))
    up = b.conv(b.args[0], _const(b, 8, 8, 1, 1), _const(b, 8))
    b.ret(b.conv(b.concat(up, skip, axis=1), _const(b, 8, 8 + skip_channels, 3, 3), pads=(1, 1, 1, 1)))
    got = _run(m, RNG.standard_normal((2, 8, 5, 7)).astype(np.float32))
    assert ("= concat" in got and f"f32[2,{1 + skip_channels // 8},5,7,8] = concat" in got) is blocked, got
    assert got.count("conv_nchwc") == 3


@pytest.mark.parametrize("outs,bias,blocked", [(16, True, True), (8, False, True), (12, True, False)])
def test_tiling_conv_transpose_is_a_pointwise_conv_and_a_block_shuffle(free_conversions, outs, bias, blocked):
    """A conv_transpose with kernel == stride (2x3 here, on an odd 5 x 7 map) joins the chain as a 1x1 blocked conv to
    taps * O channels and a depth-to-space shuffle of whole blocks; 12 output channels (not whole blocks of 8) keep
    the library's conv_transpose."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 8, 5, 7))], ["x"])
    y = b.relu(b.conv(b.args[0], _const(b, 16, 8, 3, 3), pads=(1, 1, 1, 1)))
    up = b.conv_transpose(y, _const(b, 16, outs, 2, 3), *([_const(b, outs)] if bias else []), strides=(2, 3))
    b.ret(b.conv(b.relu(up), _const(b, 8, outs, 3, 3), pads=(1, 1, 1, 1)))
    got = _run(m, RNG.standard_normal((2, 8, 5, 7)).astype(np.float32))
    assert ("conv_transpose" not in got and f"f32[2,{6 * outs // 8},5,7,8] = conv_nchwc" in got) is blocked, got
