"""Library ops of the CPU backend (conv, pools, resize, einsum, topk, scans, element gathers) on model-sized
shapes, compiled against the reference interpreter (out-of-range indices: test_index_errors.py), and a run under
AddressSanitizer (library_asan_programs.py). Tolerances as in test_ops_compiled.py; a conv's f32 sums over
C*k*k products in another order, so it gets 1e-4 relative to the output's scale."""

import numpy as np
import pytest

from cuvil.backends.cpu import codegen
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.ir.dtypes import DType

from .test_ops_compiled import assert_matches


def single_op(op: str, inputs: list, constants: tuple = (), dims: dict | None = None, **attrs) -> Module:
    """A module computing `op` on `inputs` (function arguments) and `constants` (module constants, as weights
    are in models); `dims` names symbolic sizes: {input index: {axis: name}}."""
    m = Module()
    types = []
    for i, x in enumerate(inputs):
        shape = list(x.shape)
        for axis, name in (dims or {}).get(i, {}).items():
            shape[axis] = sym(name)
        types.append(TensorType(DType.from_numpy(x.dtype), tuple(shape)))
    b = Builder.new_function(m, "main", types)
    operands = list(b.args) + [b.constant(c, f"c{k}") for k, c in enumerate(constants)]
    out = b.emit(op, *operands, **attrs)
    b.ret(*(out if isinstance(out, tuple) else (out,)))
    return m


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


def check(m: Module, inputs: list, scale_tol: float = 0.0) -> None:
    """Compiled vs interpreter; `scale_tol` adds an absolute tolerance relative to the largest output."""
    got, want = compile_module(m)(*inputs), interpret(m, inputs)
    if scale_tol:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=scale_tol * float(np.abs(w).max(initial=1.0)))
    else:
        assert_matches(got, want)


CONVS = {
    "resnet-3x3-s2-64-128": ((1, 64, 56, 56), (128, 64, 3, 3), True, {"strides": (2, 2), "pads": (1, 1, 1, 1)}),
    "1x1-64-128-batch2": ((2, 64, 14, 14), (128, 64, 1, 1), True, {}),
    "1x1-stride2": ((1, 32, 15, 15), (48, 32, 1, 1), False, {"strides": (2, 2)}),
    "depthwise-3x3": ((2, 32, 28, 28), (32, 1, 3, 3), True, {"groups": 32, "pads": (1, 1, 1, 1)}),
    "depthwise-s2-multiplier2": ((1, 16, 29, 29), (32, 1, 5, 5), False,
                                 {"groups": 16, "strides": (2, 2), "pads": (2, 1, 2, 1)}),
    "grouped-4": ((2, 32, 14, 14), (64, 8, 3, 3), True, {"groups": 4, "pads": (1, 1, 1, 1)}),
    "stem-7x7-s2-dilated": ((1, 3, 40, 36), (16, 3, 7, 7), True,
                            {"strides": (2, 2), "pads": (3, 2, 3, 4), "dilations": (1, 2)}),
    "3d": ((1, 4, 6, 9, 8), (8, 4, 3, 3, 3), True, {"pads": (1, 1, 1, 1, 1, 1), "strides": (1, 2, 2)}),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv_f32(name):
    x_shape, w_shape, bias, attrs = CONVS[name]
    consts = (rand(*w_shape, seed=1) * 0.1,) + ((rand(w_shape[0], seed=2),) if bias else ())
    check(single_op("conv", [rand(*x_shape)], consts, **attrs), [rand(*x_shape)], 1e-5)


@pytest.mark.parametrize("dtype,groups", [("float64", 2), ("float16", 1), ("bfloat16", 3), ("float16", 6)])
def test_conv_other_dtypes(dtype, groups):
    import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)

    dt = np.dtype(dtype)
    x, w = rand(2, 6, 11, 10).astype(dt), (rand(12, 6 // groups, 3, 3, seed=1) * 0.3).astype(dt)
    m = single_op("conv", [x, w, rand(12, seed=3).astype(dt)], groups=groups, strides=(2, 1), pads=(1, 0, 1, 2))
    check(m, [x, w, rand(12, seed=3).astype(dt)])


def test_conv_symbolic_sizes_at_several_values():
    w, b = rand(8, 3, 3, 3, seed=1), rand(8, seed=2)
    m = single_op("conv", [rand(1, 3, 9, 9)], (w, b), dims={0: {0: "n", 2: "h", 3: "w"}}, strides=(2, 2),
                  pads=(1, 1, 1, 1))
    exe = compile_module(m)
    for shape in [(1, 3, 9, 9), (3, 3, 17, 6), (2, 3, 1, 1)]:
        x = rand(*shape)
        np.testing.assert_allclose(exe(x)[0], interpret(m, [x])[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [{"strides": (2, 2)}, {}, {"groups": 4, "dilations": (2, 1), "strides": (1, 3)},
                                   {"strides": (2, 2), "pads": (1, 0, 0, 1), "output_padding": (1, 1)}])
def test_conv_transpose(attrs):
    x, w = rand(2, 32, 14, 13), rand(32, 4, 2 if "groups" not in attrs else 3, 3, seed=1) * 0.2
    check(single_op("conv_transpose", [x], (w, rand(4 * attrs.get("groups", 1), seed=2)), **attrs), [x], 1e-5)


@pytest.mark.parametrize("shape,kernel,groups,bias", [((2, 32, 14, 13), (2, 2), 1, True),
                                                      ((1, 12, 5, 7), (3, 2), 3, False), ((2, 8, 9), (3,), 2, True)])
def test_conv_transpose_tiling_its_output(shape, kernel, groups, bias):
    """kernel == stride: every output element is written once by the tiling col2im, its bias added there."""
    x, w = rand(*shape), rand(shape[1], 5, *kernel, seed=1) * 0.2
    m = single_op("conv_transpose", [x], (w, rand(5 * groups, seed=2)) if bias else (w,), strides=kernel,
                  groups=groups)
    assert "cuvil_col2im_tiles_float" in codegen.generate(compile_module(m).module).source
    check(m, [x], 1e-5)


def test_conv_transpose_f64_symbolic():
    x, w = rand(1, 6, 5, 7, dtype=np.float64), rand(6, 2, 3, 3, seed=1, dtype=np.float64)
    m = single_op("conv_transpose", [x, w], dims={0: {2: "h"}}, groups=3, strides=(2, 2), pads=(1, 1, 0, 0))
    check(m, [x, w])


POOLS = [("max_pool", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
         ("avg_pool", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
         ("avg_pool", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "count_include_pad": True}),
         ("max_pool", {"kernel": (2, 3), "strides": (2, 2), "ceil_mode": True, "dilations": (2, 1)}),
         ("avg_pool", {"kernel": (3, 2), "strides": (3, 2), "pads": (1, 0, 1, 1), "ceil_mode": True,
                       "count_include_pad": True})]


@pytest.mark.parametrize("op,attrs", POOLS)
def test_pools(op, attrs):
    x = rand(1, 64, 56, 55)
    check(single_op(op, [x], **attrs), [x])


def test_pools_unroll_only_the_square_windows_they_use():
    """One helper serves every max pool of a model: it unrolls the 2x2/3x3 windows (per stride class) that the
    model has, and only those (each costs gcc time)."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (1, 8, 23, 22))])
    x = b.args[0]
    outs = [b.max_pool(x, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
            b.max_pool(x, kernel=(2, 2), strides=(1, 1)), b.max_pool(x, kernel=(5, 5), strides=(1, 1))]
    b.ret(*outs)
    source = codegen.generate(compile_module(m).module).source
    calls = "max_pool_f32_cols(xr, yr, lo, hi, "
    assert calls + "3, 3, s," in source and calls + "2, 2, 1," in source
    assert "3, 3, 1," not in source and "2, 2, s," not in source and ", 5, 5," not in source
    xv = rand(1, 8, 23, 22)
    check(m, [xv])


def test_pools_run_on_cuvils_pool():
    """Every threaded loop of the pool helpers (plain and blocked) runs on Cuvil's thread pool, not OpenMP's: an
    OpenMP region after the library's pooled kernels waited for its late workers (a ResNet-18 max pool profiled
    at 10-15 ms under load instead of about 0.1)."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (1, 8, 23, 22))])
    x = b.args[0]
    b.ret(b.max_pool(x, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)), b.avg_pool(x, kernel=(2, 2), strides=(1, 1)),
          b.max_pool(b.reshape(x, shape=(1, 1, 23, 22, 8)), kernel=(3, 3, 1), strides=(2, 2, 1)))
    source = codegen.generate(compile_module(m).module).source
    pools = source[source.index("max_pool_f32_at"):]
    assert "omp parallel" not in pools
    for helper in ("max_pool_f32_plain", "max_pool_f32_blocked", "avg_pool_f32_plain"):
        assert f"{helper}_range, &a_);" in pools
    check(m, [rand(1, 8, 23, 22)])


@pytest.mark.parametrize("rows, n, act", [(64, 10, None), (7, 15, "relu"), (3, 1, "gelu"), (1, 10, None)])
def test_narrow_weight_stored_transposed(rows, n, act):
    """A Linear's narrow weight (W[N, K], N < 16) at more than one row: N dot products along K per row, not a
    64-wide packed panel; one row keeps the matrix-vector path."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (rows, 300)), TensorType(DType.f32, (n, 300))])
    y = b.matmul(b.args[0], b.transpose(b.args[1], perm=(1, 0)))
    bias = b.constant(np.random.default_rng(n).standard_normal(n).astype(np.float32), "bias")
    y = b.add(y, b.broadcast_to(bias, shape=y.type.shape))
    b.ret(getattr(b, act)(y) if act else y)
    source = codegen.generate(compile_module(m).module).source
    assert ("cuvil_sgemm_narrow(" in source) == (rows > 1)
    check(m, [rand(rows, 300), rand(n, 300, seed=1)], scale_tol=1e-5)


def test_max_pool_int8_and_nan():
    x = np.random.default_rng(0).integers(-128, 128, (2, 3, 17, 17)).astype(np.int8)
    check(single_op("max_pool", [x], kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)), [x])
    f = rand(1, 2, 8, 8)
    f[0, 1, 3, 4] = np.nan
    check(single_op("max_pool", [f], kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)), [f])


@pytest.mark.parametrize("mode,transform", [("linear", "half_pixel"), ("nearest", "asymmetric"),
                                            ("cubic", "align_corners"), ("linear", "pytorch_half_pixel")])
def test_resize_2x(mode, transform):
    x = rand(1, 16, 28, 27)
    m = single_op("resize", [x], sizes=(1, 16, 56, 54), mode=mode, coordinate_transformation_mode=transform,
                  nearest_mode="floor")
    check(m, [x])


@pytest.mark.parametrize("transform,nearest", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                                               ("pytorch_half_pixel", "round_prefer_ceil")])
def test_nearest_upscaling_by_whole_factors_is_read_through_its_consumer(transform, nearest):
    """Integer factors (3 on an odd 5-row axis, 2 on 7 columns) repeat each element: no resize kernel, the add reads
    the input through the repeated index; a factor of 9/5 keeps the library kernel. Any dtype: int8 here."""
    x = np.random.default_rng(1).integers(-100, 100, (2, 3, 5, 7)).astype(np.int8)
    for sizes, kernel in (((2, 3, 15, 14), False), ((2, 3, 9, 14), True)):
        m = Module()
        b = Builder.new_function(m, "main", [TensorType(DType.i8, x.shape)])
        y = b.resize(b.args[0], sizes=sizes, mode="nearest", coordinate_transformation_mode=transform,
                     nearest_mode=nearest)
        b.ret(b.add(y, y))
        assert ("cuvil_resize_table" in codegen.generate(compile_module(m).module).source) is kernel
        check(m, [x])


def test_resize_downscale_symbolic_batch():
    x = rand(2, 3, 31, 40)
    m = single_op("resize", [x], dims={0: {0: "n"}}, sizes=(sym("n"), 3, 12, 17), mode="cubic",
                  exclude_outside=True)
    check(m, [x])


@pytest.mark.parametrize("k,largest", [(10, True), (1000, False), (1, False)])
def test_topk_1000(k, largest):
    x = np.random.default_rng(k).integers(-50, 50, (3, 1000)).astype(np.float32)  # many ties
    x[1, 17] = np.nan
    check(single_op("topk", [x], k=k, axis=1, largest=largest), [x])


def test_topk_middle_axis_i64():
    x = np.random.default_rng(0).integers(-5, 5, (4, 300, 7)).astype(np.int64)
    check(single_op("topk", [x], k=20, axis=1), [x])


@pytest.mark.parametrize("equation,shapes", [("bhqd,bhkd->bhqk", [(2, 4, 33, 16), (2, 4, 40, 16)]),
                                             ("bhqk,bhkd->bhqd", [(2, 4, 33, 40), (2, 4, 40, 16)]),
                                             ("bqhd,bkhd->bhqk", [(2, 9, 3, 8), (2, 7, 3, 8)]),
                                             ("ij,jk,kl->il", [(20, 30), (30, 10), (10, 5)])])
def test_einsum(equation, shapes):
    xs = [rand(*s, seed=i) for i, s in enumerate(shapes)]
    check(single_op("einsum", xs, equation=equation), xs)


@pytest.mark.parametrize("axis,exclusive,reverse", [(1, False, False), (2, True, True), (0, True, False)])
def test_cumsum_and_arg(axis, exclusive, reverse):
    x = rand(5, 200, 130)
    check(single_op("cumsum", [x], axis=axis, exclusive=exclusive, reverse=reverse), [x])
    check(single_op("argmax", [x], axis=axis, select_last_index=reverse), [x])


@pytest.mark.parametrize("channels, outs, batch, act", [(576, 144, 1, "relu"), (96, 24, 3, None), (20, 72, "n", "clip"),
                                                        (16, 8, "n", None)])
def test_pointwise_conv_of_single_pixels_is_one_gemm(channels, outs, batch, act):
    """A squeeze-excite's 1x1 convs on 1x1 maps: one GEMM over the images with the weight packed once at load where
    it is a panel wide (64 outputs), not a GEMM per image that packs it on every call; the fused relu/relu6 too."""
    shape = (sym("n") if batch == "n" else batch, channels, 1, 1)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, shape)], ["x"])
    w = b.constant(rand(outs, channels, 1, 1, seed=1) * 0.1)
    y = b.conv(b.args[0], w, b.constant(rand(outs, seed=2)))
    b.ret(b.relu(y) if act == "relu" else b.clip(y, min=0.0, max=6.0) if act == "clip" else y)
    source = codegen.generate(compile_module(m).module).source
    assert "cuvil_sgemm_row_bias(" not in source
    assert ("cuvil_sgemm_packed(" in source) == (outs >= 64)
    for n in ([1] if batch == 1 else [3] if batch == 3 else [1, 5]):
        check(m, [rand(n, channels, 1, 1, seed=n)], 1e-5)
