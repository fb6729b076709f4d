"""Cases for nn ops, against ONNX's reference implementation (run in float64) or PyTorch where ONNX's
reference is known to differ from the spec."""
import numpy as np

from .cases import Case, onnx_node, rand


def onnx(op_type, attrs=None, opset=18):
    """ONNX's reference on float64 copies of float inputs, rounded to the inputs' type as our references are."""
    def expected(xs):
        wide = [x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs]
        return [y.astype(xs[0].dtype) for y in onnx_node(op_type, wide, attrs, opset=opset)]
    return expected


def torch_fn(name, **kwargs):
    """torch.nn.functional.<name> on float64 copies, rounded back (torch loads only when a case runs)."""
    def expected(xs):
        import torch

        fn = getattr(torch.nn.functional, name)
        return [fn(*(torch.from_numpy(x.astype(np.float64)) for x in xs), **kwargs).numpy().astype(xs[0].dtype)]
    return expected


def resize_oracle(sizes=None, scales=None, opset=19, **attrs):
    """ONNX Resize with the sizes (or the scales) input, roi left out."""
    def expected(xs):
        import onnx as onnx_lib
        from onnx import helper, numpy_helper
        from onnx.reference import ReferenceEvaluator

        x = xs[0].astype(np.float64) if xs[0].dtype.kind == "f" else xs[0]
        given = ("sizes", np.array(sizes, np.int64)) if scales is None else ("scales", np.array(scales, np.float32))
        inputs = ["x", "", given[0] if scales is not None else "", "sizes" if scales is None else ""]
        node = helper.make_node("Resize", inputs[:4] if scales is None else inputs[:3], ["y"], **attrs)
        graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info(
            "x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)], [helper.make_tensor_value_info(
                "y", onnx_lib.TensorProto.UNDEFINED, None)], [numpy_helper.from_array(given[1], given[0])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return [ReferenceEvaluator(model).run(None, {"x": x})[0].astype(xs[0].dtype)]
    return expected


def zeros(shape):
    return lambda xs: [np.zeros(shape, xs[0].dtype)]


def as16(xs):
    return [x.astype(np.float16) for x in xs]


def as64(xs):
    return [x.astype(np.float64) for x in xs]


N = {0: {0: "n"}}  # symbolic batch
X4 = rand(2, 3, 7, 7)
W3 = rand(4, 3, 3, 3, seed=1)
B4 = rand(4, seed=2)

MATMUL = [
    Case("matmul", [rand(3, 4), rand(4, 5, seed=1)], expected=onnx("MatMul")),
    Case("matmul", [rand(2, 3, 4), rand(2, 4, 5, seed=1)], expected=onnx("MatMul"), id="batched"),
    Case("matmul", [rand(2, 3, 3, 4), rand(2, 3, 4, 2, seed=1)], expected=onnx("MatMul"), id="batch2"),
    Case("matmul", [rand(2, 3, 4), rand(4, 5, seed=1)], expected=onnx("MatMul"), id="shared-weight"),
    Case("matmul", [rand(3, 4), rand(2, 4, 5, seed=1)], expected=onnx("MatMul"), id="shared-input"),
    Case("matmul", [rand(2, 3, 4), rand(4, 5, seed=1)], expected=onnx("MatMul"), dims={0: {0: "n", 1: "s"}},
         id="symbolic"),
    Case("matmul", [rand(2, 3, 4), rand(2, 4, 5, seed=1)], expected=onnx("MatMul"), dims={0: {0: "n"}, 1: {0: "n"}},
         id="symbolic-batched"),
    Case("matmul", [rand(3, 4, dtype="int32", low=-9, high=9), rand(4, 2, dtype="int32", low=-9, high=9)],
         expected=onnx("MatMul"), id="i32"),
    Case("matmul", [rand(2, 3, 4, dtype="int64", low=-9, high=9), rand(4, 2, dtype="int64", low=-9, high=9)],
         expected=onnx("MatMul"), id="i64"),
    Case("matmul", as16([rand(4, 16), rand(16, 3, seed=1)]), expected=onnx("MatMul"), id="f16"),
    Case("matmul", as64([rand(4, 6), rand(6, 3, seed=1)]), expected=onnx("MatMul"), id="f64"),
    Case("matmul", [rand(3, 0), rand(0, 2)], expected=zeros((3, 2)), id="empty-k"),
]

CONV = [
    Case("conv", [X4, W3, B4], {"pads": (1, 1, 1, 1)}, expected=onnx("Conv", {"pads": [1, 1, 1, 1]})),
    Case("conv", [X4, W3], {"strides": (2, 2)}, expected=onnx("Conv", {"strides": [2, 2]}), id="strides"),
    Case("conv", [X4, W3], {"dilations": (2, 1), "pads": (2, 0, 1, 1)}, id="dilations-asym-pads",
         expected=onnx("Conv", {"dilations": [2, 1], "pads": [2, 0, 1, 1]})),
    Case("conv", [rand(1, 4, 6, 5), rand(6, 2, 3, 3, seed=1)], {"groups": 2, "strides": (2, 1), "pads": (1,) * 4},
         expected=onnx("Conv", {"group": 2, "strides": [2, 1], "pads": [1] * 4}), id="groups"),
    Case("conv", [rand(2, 4, 5, 5), rand(6, 2, 1, 1, seed=1), rand(6, seed=2)], {"groups": 2},
         expected=onnx("Conv", {"group": 2}), id="groups-1x1-bias-batch2"),  # each group's rows take its bias
    Case("conv", [rand(2, 4, 6, 6), rand(4, 1, 3, 3, seed=1), rand(4, seed=2)], {"groups": 4, "pads": (1,) * 4},
         expected=onnx("Conv", {"group": 4, "pads": [1] * 4}), id="depthwise"),
    Case("conv", [rand(2, 3, 10), rand(5, 3, 3, seed=1)], {"strides": (2,), "pads": (1, 2)},
         expected=onnx("Conv", {"strides": [2], "pads": [1, 2]}), id="1d"),
    Case("conv", [rand(1, 2, 5, 6, 4), rand(3, 2, 2, 3, 2, seed=1), rand(3, seed=2)],
         {"strides": (1, 2, 1), "pads": (1, 0, 1, 0, 1, 1), "dilations": (2, 1, 1)}, id="3d",
         expected=onnx("Conv", {"strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1], "dilations": [2, 1, 1]})),
    Case("conv", [rand(1, 8, 5, 5), rand(6, 8, 1, 1, seed=1)], expected=onnx("Conv"), id="1x1"),
    Case("conv", as16([X4, W3, B4]), {"pads": (1,) * 4}, expected=onnx("Conv", {"pads": [1] * 4}), id="f16"),
    Case("conv", as64([X4, W3]), {"strides": (2, 2)}, expected=onnx("Conv", {"strides": [2, 2]}), id="f64"),
    Case("conv", [X4, W3, B4], {"pads": (1,) * 4}, expected=onnx("Conv", {"pads": [1] * 4}), dims=N,
         id="symbolic-batch"),
    Case("conv", [X4, W3], {"strides": (2, 2), "pads": (1,) * 4}, expected=onnx("Conv", {"strides": [2, 2],
         "pads": [1] * 4}), dims={0: {0: "n", 2: "h", 3: "w"}}, id="symbolic-spatial"),
    Case("conv", [rand(0, 3, 5, 5), W3, B4], {"pads": (1,) * 4}, expected=zeros((0, 4, 5, 5)), id="empty-batch"),
]

CONV_T = [
    Case("conv_transpose", [rand(1, 3, 4, 4), rand(3, 2, 3, 3, seed=1)], expected=onnx("ConvTranspose")),
    Case("conv_transpose", [rand(2, 3, 4, 5), rand(3, 2, 3, 3, seed=1), rand(2, seed=2)],
         {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 0)}, id="strides-outpad",
         expected=onnx("ConvTranspose", {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]})),
    Case("conv_transpose", [rand(1, 4, 3, 3), rand(4, 3, 2, 3, seed=1)], {"groups": 2, "strides": (2, 1)},
         expected=torch_fn("conv_transpose2d", groups=2, stride=(2, 1)), id="groups"),  # ONNX's slices w wrongly
    Case("conv_transpose", [rand(1, 2, 4, 4), rand(2, 3, 3, 3, seed=1)], {"dilations": (2, 2), "pads": (0, 1, 2, 0)},
         expected=onnx("ConvTranspose", {"dilations": [2, 2], "pads": [0, 1, 2, 0]}), id="dilations"),
    Case("conv_transpose", [rand(2, 3, 6), rand(3, 4, 4, seed=1)], {"strides": (3,), "pads": (1, 1)},
         expected=onnx("ConvTranspose", {"strides": [3], "pads": [1, 1]}), id="1d"),
    Case("conv_transpose", [rand(1, 2, 3, 4, 3), rand(2, 2, 2, 2, 3, seed=1), rand(2, seed=2)],
         {"strides": (2, 1, 2)}, expected=onnx("ConvTranspose", {"strides": [2, 1, 2]}), id="3d"),
    Case("conv_transpose", as16([rand(1, 3, 4, 4), rand(3, 2, 3, 3, seed=1)]), {"strides": (2, 2)},
         expected=onnx("ConvTranspose", {"strides": [2, 2]}), id="f16"),
    Case("conv_transpose", as64([rand(1, 3, 4, 4), rand(3, 2, 3, 3, seed=1)]), expected=onnx("ConvTranspose"),
         id="f64"),
    Case("conv_transpose", [rand(2, 3, 4, 4), rand(3, 2, 3, 3, seed=1)], {"strides": (2, 2), "pads": (1,) * 4},
         expected=onnx("ConvTranspose", {"strides": [2, 2], "pads": [1] * 4}), dims={0: {0: "n", 2: "h"}},
         id="symbolic"),
    Case("conv_transpose", [rand(0, 3, 4, 4), rand(3, 2, 3, 3, seed=1)], expected=zeros((0, 2, 6, 6)),
         id="empty-batch"),
]

X5 = rand(2, 3, 9, 8)
POOL = [
    Case("max_pool", [X5], {"kernel": (3, 3), "strides": (2, 2), "pads": (1,) * 4},
         expected=onnx("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4})),
    Case("max_pool", [X5], {"kernel": (2, 3), "strides": (2, 2), "ceil_mode": True}, id="ceil",
         expected=onnx("MaxPool", {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1})),
    Case("max_pool", [rand(1, 2, 10, 7)], {"kernel": (3, 3), "strides": (3, 3), "pads": (1,) * 4, "ceil_mode": True},
         expected=torch_fn("max_pool2d", kernel_size=3, stride=3, padding=1,
                           ceil_mode=True), id="ceil-drops-last"),
    Case("max_pool", [X5], {"kernel": (2, 2), "dilations": (2, 3), "pads": (1, 0, 1, 2)}, id="dilations",
         expected=onnx("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 3], "pads": [1, 0, 1, 2]})),
    Case("max_pool", [rand(2, 3, 11)], {"kernel": (3,), "strides": (2,)}, id="1d",
         expected=onnx("MaxPool", {"kernel_shape": [3], "strides": [2]})),
    Case("max_pool", [rand(1, 2, 5, 6, 4)], {"kernel": (2, 3, 2), "pads": (1, 1, 0, 0, 1, 1), "strides": (2, 2, 2)},
         expected=onnx("MaxPool", {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1], "strides": [2, 2, 2]}),
         id="3d"),
    Case("max_pool", [rand(1, 2, 6, 6, dtype="int8", low=-100, high=100)], {"kernel": (2, 2), "pads": (1,) * 4},
         expected=lambda xs: [onnx("MaxPool", {"kernel_shape": [2, 2], "pads": [1] * 4})([xs[0].astype(np.float32)])[0]
                              .astype(np.int8)], id="i8"),  # ONNX's pads ints with NaN; max is exact in floats
    Case("max_pool", [rand(1, 3, 9, 70, dtype="uint8", low=0, high=255)], {"kernel": (3, 3), "strides": (2, 2),
         "pads": (1,) * 4}, expected=lambda xs: [onnx("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [
             1] * 4})([xs[0].astype(np.float32)])[0].astype(np.uint8)], id="u8"),  # on conv_int8.c's uint8 pool
    Case("max_pool", as16([X5]), {"kernel": (3, 3), "strides": (2, 2)}, id="f16",
         expected=onnx("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2]})),
    Case("max_pool", [X5], {"kernel": (3, 3), "strides": (2, 2), "pads": (1,) * 4, "ceil_mode": True},
         expected=onnx("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4, "ceil_mode": 1}),
         dims={0: {0: "n", 2: "h", 3: "w"}}, id="symbolic-ceil"),
    Case("avg_pool", [X5], {"kernel": (3, 3), "pads": (1,) * 4},
         expected=onnx("AveragePool", {"kernel_shape": [3, 3], "pads": [1] * 4})),
    Case("avg_pool", [X5], {"kernel": (3, 3), "pads": (1,) * 4, "count_include_pad": True}, id="count-pad",
         expected=onnx("AveragePool", {"kernel_shape": [3, 3], "pads": [1] * 4, "count_include_pad": 1})),
    Case("avg_pool", [X5], {"kernel": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 0), "ceil_mode": True,
                            "count_include_pad": True}, id="ceil-count-pad",
         expected=onnx("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0],
                                       "ceil_mode": 1, "count_include_pad": 1})),
    Case("avg_pool", [rand(1, 2, 10, 7)], {"kernel": (3, 3), "strides": (3, 3), "pads": (1,) * 4, "ceil_mode": True},
         expected=torch_fn("avg_pool2d", kernel_size=3, stride=3, padding=1,
                           ceil_mode=True, count_include_pad=False), id="ceil-torch"),
    Case("avg_pool", [rand(2, 3, 11)], {"kernel": (4,), "strides": (3,), "pads": (2, 1)}, id="1d",
         expected=onnx("AveragePool", {"kernel_shape": [4], "strides": [3], "pads": [2, 1]})),
    Case("avg_pool", [rand(1, 2, 5, 6, 4)], {"kernel": (2, 2, 2), "strides": (2, 2, 2)}, id="3d",
         expected=onnx("AveragePool", {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]})),
    Case("avg_pool", as64([X5]), {"kernel": (2, 2), "strides": (2, 2)}, id="f64",
         expected=onnx("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]})),
    Case("avg_pool", as16([X5]), {"kernel": (3, 3), "pads": (1,) * 4}, id="f16",
         expected=onnx("AveragePool", {"kernel_shape": [3, 3], "pads": [1] * 4})),
    Case("avg_pool", [X5], {"kernel": (2, 2), "strides": (2, 2)}, dims={0: {0: "n", 3: "w"}}, id="symbolic",
         expected=onnx("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]})),
    Case("global_avg_pool", [X5], expected=onnx("GlobalAveragePool")),
    Case("global_avg_pool", [rand(2, 3, 5)], expected=onnx("GlobalAveragePool"), id="1d"),
    Case("global_avg_pool", [X5], expected=onnx("GlobalAveragePool"), dims={0: {0: "n", 2: "h"}}, id="symbolic"),
    Case("global_avg_pool", as16([X5]), expected=onnx("GlobalAveragePool"), id="f16"),
    Case("global_max_pool", [X5], expected=onnx("GlobalMaxPool")),
    Case("global_max_pool", [rand(1, 2, 3, 4, 5)], expected=lambda xs: [xs[0].max(axis=(2, 3, 4), keepdims=True)],
         dims=N, id="3d-symbolic"),  # ONNX's keeps only the last spatial dim
]

S = rand(3, 4, 5, low=-30, high=30)
SOFTMAX = [
    Case(op, [S], attrs, expected=onnx(onnx_op, {"axis": attrs["axis"]} if attrs else None), dims=dims,
         id=f"{i}-{op}") for op, onnx_op in (("softmax", "Softmax"), ("log_softmax", "LogSoftmax"))
    for i, (attrs, dims) in enumerate([({}, None), ({"axis": 1}, None), ({"axis": -3}, N), ({"axis": -1}, N)])
] + [
    Case("softmax", [rand(4, 7, low=-500, high=500)], expected=onnx("Softmax"), id="large"),
    Case("softmax", as16([S]), expected=onnx("Softmax"), id="f16"),
    Case("softmax", as64([S]), {"axis": 0}, expected=onnx("Softmax", {"axis": 0}), id="f64"),
    Case("log_softmax", as16([S]), expected=onnx("LogSoftmax"), id="f16"),
    *[Case(op, [np.zeros((2, 0, 3), np.float32)], {"axis": 1}, expected=lambda xs: [xs[0]], id="empty-axis")
      for op in ("softmax", "log_softmax")],
]

NORM = [
    Case("layer_norm", [S, rand(5, seed=1), rand(5, seed=2)], expected=onnx("LayerNormalization"), id="last"),
    Case("layer_norm", [S, rand(4, 5, seed=1), rand(4, 5, seed=2)], {"axis": 1, "epsilon": 1e-3}, id="two-dims",
         expected=onnx("LayerNormalization", {"axis": 1, "epsilon": 1e-3})),
    Case("layer_norm", [S, rand(5, seed=1)], expected=onnx("LayerNormalization"), dims={0: {0: "n", 1: "s"}},
         id="no-bias-symbolic"),
    Case("layer_norm", as16([S, rand(5, seed=1), rand(5, seed=2)]), expected=onnx("LayerNormalization"), id="f16"),
    Case("layer_norm", as64([S, rand(4, 5, seed=1), rand(4, 5, seed=2)]), {"axis": -2}, id="f64",
         expected=onnx("LayerNormalization", {"axis": -2})),
    Case("batch_norm", [X5, rand(3, seed=1), rand(3, seed=2), rand(3, seed=3), rand(3, seed=4, low=0.1, high=2)],
         expected=onnx("BatchNormalization")),
    Case("batch_norm", [rand(4, 3), rand(3, seed=1), rand(3, seed=2), rand(3, seed=3), rand(3, seed=4, low=0.1)],
         {"epsilon": 1e-3}, expected=onnx("BatchNormalization", {"epsilon": 1e-3}), dims=N, id="2d-symbolic"),
    Case("batch_norm", as64([X5, rand(3, seed=1), rand(3, seed=2), rand(3, seed=3), rand(3, seed=4, low=0.1)]),
         expected=onnx("BatchNormalization"), id="f64"),
    Case("instance_norm", [X5, rand(3, seed=1), rand(3, seed=2)], expected=onnx("InstanceNormalization")),
    Case("instance_norm", [rand(2, 3, 6), rand(3, seed=1), rand(3, seed=2)], {"epsilon": 1e-2},
         expected=onnx("InstanceNormalization", {"epsilon": 1e-2}), dims={0: {0: "n", 2: "l"}}, id="1d-symbolic"),
    Case("instance_norm", as16([X5, rand(3, seed=1), rand(3, seed=2)]), expected=onnx("InstanceNormalization"),
         id="f16"),
    Case("group_norm", [rand(2, 6, 4, 5), rand(6, seed=1), rand(6, seed=2)], {"num_groups": 3},
         expected=onnx("GroupNormalization", {"num_groups": 3}, opset=21)),
    Case("group_norm", [rand(2, 4, 3, 3), rand(4, seed=1), rand(4, seed=2)], {"num_groups": 4, "epsilon": 1e-3},
         expected=onnx("GroupNormalization", {"num_groups": 4, "epsilon": 1e-3}, opset=21), id="per-channel"),
    Case("group_norm", [rand(2, 6, 4, 5), rand(6, seed=1), rand(6, seed=2)], {"num_groups": 1},
         expected=onnx("GroupNormalization", {"num_groups": 1}, opset=21), dims={0: {0: "n", 2: "h", 3: "w"}},
         id="symbolic"),
    Case("group_norm", as64([rand(1, 4, 7), rand(4, seed=1), rand(4, seed=2)]), {"num_groups": 2}, id="1d-f64",
         rtol=1e-5, atol=1e-6, expected=onnx("GroupNormalization", {"num_groups": 2}, opset=21)),  # ONNX: in f32
]

R = rand(2, 3, 4, 5)
RESIZE = [
    Case("resize", [R], {"sizes": (2, 3, 8, 10)}, expected=resize_oracle((2, 3, 8, 10))),
    Case("resize", [R], {"sizes": (2, 3, 8, 10), "coordinate_transformation_mode": "asymmetric",
                         "nearest_mode": "floor"}, id="nearest-asymmetric-floor",
         expected=resize_oracle((2, 3, 8, 10), coordinate_transformation_mode="asymmetric", nearest_mode="floor")),
    Case("resize", [R], {"sizes": (2, 3, 7, 3), "nearest_mode": "round_prefer_ceil"}, id="nearest-prefer-ceil",
         expected=resize_oracle((2, 3, 7, 3), nearest_mode="round_prefer_ceil")),
    Case("resize", [R], {"sizes": (2, 3, 6, 7), "nearest_mode": "ceil", "coordinate_transformation_mode":
                         "align_corners"}, id="nearest-ceil-align",
         expected=resize_oracle((2, 3, 6, 7), nearest_mode="ceil", coordinate_transformation_mode="align_corners")),
    Case("resize", [rand(1, 2, 3, 3, dtype="int32", low=-9, high=9)], {"sizes": (1, 2, 6, 5)}, id="nearest-i32",
         expected=resize_oracle((1, 2, 6, 5))),
    Case("resize", [R], {"sizes": (2, 3, 8, 3), "mode": "linear"}, expected=resize_oracle((2, 3, 8, 3), mode="linear"),
         id="linear"),
    *[Case("resize", [R], {"sizes": (2, 3, 7, 9), "mode": "linear", "coordinate_transformation_mode": m},
           expected=resize_oracle((2, 3, 7, 9), mode="linear", coordinate_transformation_mode=m), id=f"linear-{m}")
      for m in ("align_corners", "asymmetric", "pytorch_half_pixel", "half_pixel_symmetric")],
    Case("resize", [R], {"sizes": (2, 3, 1, 1), "mode": "linear", "coordinate_transformation_mode":
                         "pytorch_half_pixel"}, id="linear-to-one",
         expected=resize_oracle((2, 3, 1, 1), mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
    Case("resize", [R], {"sizes": (2, 3, 6, 7), "scales": (1.0, 1.0, 1.5, 1.5), "mode": "linear"},
         expected=resize_oracle(scales=(1.0, 1.0, 1.5, 1.5), mode="linear"), id="linear-scales"),
    Case("resize", [R], {"sizes": (2, 3, 6, 7), "scales": (1.0, 1.0, 1.5, 1.5),
                         "coordinate_transformation_mode": "half_pixel_symmetric"}, id="nearest-scales-symmetric",
         expected=resize_oracle(scales=(1.0, 1.0, 1.5, 1.5), coordinate_transformation_mode="half_pixel_symmetric")),
    Case("resize", [rand(1, 2, 3, 4, 5)], {"sizes": (1, 2, 5, 3, 8), "mode": "linear"}, id="trilinear",
         expected=resize_oracle((1, 2, 5, 3, 8), mode="linear")),
    Case("resize", [R], {"sizes": (2, 3, 9, 11), "mode": "cubic"}, expected=resize_oracle((2, 3, 9, 11), mode="cubic"),
         id="cubic"),
    Case("resize", [R], {"sizes": (2, 3, 3, 8), "mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": True},
         expected=resize_oracle((2, 3, 3, 8), mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1),
         id="cubic-exclude-outside"),
    Case("resize", as16([R]), {"sizes": (2, 3, 8, 10), "mode": "linear"}, id="f16",
         expected=resize_oracle((2, 3, 8, 10), mode="linear")),
    # ONNX computes cubic weights in float32, the type of its cubic_coeff_a attribute
    Case("resize", as64([R]), {"sizes": (2, 3, 5, 5), "mode": "cubic"}, id="f64", rtol=1e-4, atol=1e-6,
         expected=resize_oracle((2, 3, 5, 5), mode="cubic")),
    Case("resize", [R], {"sizes": ("n", 3, 8, 10), "mode": "linear"}, dims=N, id="symbolic",
         expected=resize_oracle((2, 3, 8, 10), mode="linear")),
]

def einsum(inputs, equation, **kwargs):
    oracle = onnx("Einsum", {"equation": equation.replace(" ", "")})
    return Case("einsum", inputs, {"equation": equation}, expected=oracle, **kwargs)


E = rand(3, 4)
EINSUM = [
    einsum([E, rand(4, 5, seed=1)], "ij,jk->ik"),
    einsum([E, rand(4, 5, seed=1)], "ij, jk", id="implicit"),
    einsum([rand(2, 3, 4), rand(2, 4, 5, seed=1)], "bij,bjk->bik", dims={0: {0: "n"}, 1: {0: "n"}}, id="batched"),
    einsum([rand(2, 1, 3, 4), rand(5, 4, 2, seed=1)], "...ij,...jk->...ik", id="ellipsis-broadcast"),
    einsum([rand(2, 3, 4)], "...ij", id="ellipsis-implicit"),
    einsum([rand(4, 4)], "ii", id="trace"),
    einsum([rand(4, 4)], "ii->i", id="diag"),
    einsum([E], "ij->ji", id="transpose"),
    einsum([E], "ij->", id="sum"),
    einsum([rand(3), rand(4, seed=1)], "i,j->ij", id="outer"),
    einsum([E, rand(4, 5, seed=1), rand(5, 2, seed=2)], "ij,jk,kl->il", id="three"),
    einsum([rand(2, 3, dtype="int64", low=-5, high=5), rand(3, dtype="int64", low=-5, high=5)], "ij,j->i", id="i64"),
    einsum(as16([E, rand(4, 5, seed=1)]), "ij,jk->ki", id="f16"),
    einsum(as64([rand(2, 3, 4), rand(3, 4, seed=1)]), "bhd,hd->bh", id="f64"),
    einsum([rand(2, 3, 4), rand(2, 5, 4, seed=1)], "bqd,bkd->bqk", dims={0: {0: "n", 1: "q"}, 1: {0: "n", 1: "k"}},
           id="attention-symbolic"),
]

CASES = MATMUL + CONV + CONV_T + POOL + SOFTMAX + NORM + RESIZE + EINSUM
