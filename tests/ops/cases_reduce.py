"""Cases for reduce ops, with ONNX oracles (opset 18 takes reduction axes as an int64 input)."""
import numpy as np

from .cases import Case, onnx_node, rand

X = rand(3, 4, 5)
I32 = rand(3, 4, dtype="int32", low=-9, high=9)
TIES = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [5, 5, 5, 5]], np.float32)
SYM = {0: {0: "n"}}


def onnx_reduce(op, axes=None, keepdims=True):
    """ReduceX with the axes as an int64 input; no axes reduces everything."""
    extra = [] if axes is None else [np.array(axes, np.int64)]
    return lambda xs: onnx_node(op, [xs[0], *extra], {"keepdims": int(keepdims)})


def reduce_cases(name, onnx_op, data=X):
    return [
        Case(name, [data], {"axes": (1,)}, expected=onnx_reduce(onnx_op, [1])),
        Case(name, [data], {"axes": (-1, 0), "keepdims": False}, expected=onnx_reduce(onnx_op, [-1, 0], False),
             id="neg-axes"),
        Case(name, [data], expected=onnx_reduce(onnx_op), id="all"),
        Case(name, [data], {"axes": (0,), "keepdims": False}, expected=onnx_reduce(onnx_op, [0], False), dims=SYM,
             id="symbolic"),
    ]


def arg_case(name, onnx_op, x, attrs, id=""):
    onnx_attrs = {k: int(v) for k, v in attrs.items()}
    return Case(name, [x], attrs, expected=lambda xs: onnx_node(onnx_op, xs, onnx_attrs), id=id)


def cumsum_case(x, attrs, id="", dims=None):
    onnx_attrs = {k: int(v) for k, v in attrs.items() if k != "axis"}
    return Case("cumsum", [x], attrs, id=id, dims=dims,
                expected=lambda xs: onnx_node("CumSum", [xs[0], np.array(attrs["axis"], np.int64)], onnx_attrs))


def cumprod_case(x, attrs, id=""):
    """Oracle: a running product written as a loop over the axis."""
    def expected(xs):
        v = np.moveaxis(xs[0].astype(np.float64), attrs["axis"], 0)
        order = range(len(v) - 1, -1, -1) if attrs.get("reverse") else range(len(v))
        out, acc = np.empty_like(v), np.ones_like(v[0]) if len(v) else None
        for i in order:
            if attrs.get("exclusive"):
                out[i], acc = acc, acc * v[i]
            else:
                acc = acc * v[i]
                out[i] = acc
        return [np.moveaxis(out, 0, attrs["axis"]).astype(xs[0].dtype)]
    return Case("cumprod", [x], attrs, id=id, expected=expected)


def topk_case(x, attrs, id="", dims=None):
    onnx_attrs = {k: int(v) for k, v in attrs.items() if k != "k"}
    return Case("topk", [x], attrs, id=id, dims=dims,
                expected=lambda xs: onnx_node("TopK", [xs[0], np.array([attrs["k"]], np.int64)], onnx_attrs, 2))


def _np_logsumexp(x, axes, keepdims):
    w = x.astype(np.float64)
    with np.errstate(divide="ignore"):
            return np.log(np.sum(np.exp(w), axis=axes, keepdims=keepdims)).astype(x.dtype)


CASES = [
    *reduce_cases("reduce_sum", "ReduceSum"),
    *reduce_cases("reduce_mean", "ReduceMean"),
    *reduce_cases("reduce_max", "ReduceMax"),
    *reduce_cases("reduce_min", "ReduceMin"),
    *reduce_cases("reduce_prod", "ReduceProd", rand(3, 4, 5, low=0.5, high=1.5)),
    Case("reduce_sum", [I32], {"axes": (0,)}, expected=onnx_reduce("ReduceSum", [0]), id="i32"),
    Case("reduce_sum", [X.astype(np.float16)], {"axes": (2,)}, expected=onnx_reduce("ReduceSum", [2]), id="f16"),
    Case("reduce_sum", [X.astype(np.float64)], {"axes": (0, 2)}, expected=onnx_reduce("ReduceSum", [0, 2]),
         id="f64"),
    Case("reduce_sum", [np.zeros((2, 0), np.float32)], {"axes": (1,)}, expected=onnx_reduce("ReduceSum", [1]),
         id="empty"),
    Case("reduce_max", [I32], {"axes": (1,), "keepdims": False}, expected=onnx_reduce("ReduceMax", [1], False),
         id="i32"),
    Case("reduce_max", [np.zeros((2, 0), np.float32)], {"axes": (1,)}, id="empty",
         expected=lambda xs: [np.full((2, 1), -np.inf, np.float32)]),
    Case("reduce_min", [rand(4, 3, dtype="uint8", low=0, high=200)], {"axes": (0,)}, id="u8",
         expected=onnx_reduce("ReduceMin", [0])),
    Case("reduce_prod", [rand(2, 3, dtype="int64", low=-3, high=3)], {"axes": (1,)}, id="i64",
         expected=onnx_reduce("ReduceProd", [1])),
    Case("reduce_mean", [X.astype(np.float16)], {"axes": (1, 2)}, expected=onnx_reduce("ReduceMean", [1, 2]),
         id="f16"),
    Case("reduce_mean", [X], {"axes": (0, 1)}, expected=onnx_reduce("ReduceMean", [0, 1]),
         dims={0: {0: "n", 1: "m"}}, id="two-symbols"),
    Case("reduce_mean", [np.float32(3.5).reshape(())], expected=lambda xs: [xs[0]], id="scalar"),
    *reduce_cases("logsumexp", "ReduceLogSumExp"),
    Case("logsumexp", [rand(2, 6, low=-500, high=500)], {"axes": (1,)}, id="large",
         expected=onnx_reduce("ReduceLogSumExp", [1])),
    Case("logsumexp", [np.array([[-np.inf, -np.inf], [0.0, -np.inf]], np.float32)], {"axes": (1,)}, id="neg-inf",
         expected=lambda xs: [_np_logsumexp(xs[0], (1,), True)]),
    Case("logsumexp", [X.astype(np.float64)], {"axes": (0, 2), "keepdims": False}, id="f64",
         expected=lambda xs: [_np_logsumexp(xs[0], (0, 2), False)]),
    arg_case("argmax", "ArgMax", X, {"axis": 1}),
    arg_case("argmax", "ArgMax", TIES, {"axis": -1, "keepdims": False}, id="ties-first"),
    arg_case("argmax", "ArgMax", TIES, {"axis": 1, "select_last_index": True}, id="ties-last"),
    arg_case("argmax", "ArgMax", I32, {"axis": 0, "keepdims": False}, id="i32"),
    Case("argmax", [X], {"axis": 0}, expected=lambda xs: onnx_node("ArgMax", xs, {"axis": 0}), dims={0: {2: "n"}},
         id="symbolic"),
    arg_case("argmin", "ArgMin", X, {"axis": 2}),
    arg_case("argmin", "ArgMin", TIES, {"axis": 1, "keepdims": False, "select_last_index": True}, id="ties-last"),
    arg_case("argmin", "ArgMin", TIES, {"axis": 0}, id="ties-first"),
    cumsum_case(X, {"axis": 1}),
    cumsum_case(X, {"axis": -1, "exclusive": True}, id="exclusive"),
    cumsum_case(X, {"axis": 0, "reverse": True}, id="reverse"),
    cumsum_case(X, {"axis": 2, "exclusive": True, "reverse": True}, id="exclusive-reverse"),
    cumsum_case(I32, {"axis": 1, "exclusive": True}, id="i32"),
    cumsum_case(X.astype(np.float64), {"axis": 0}, id="symbolic", dims=SYM),
    cumsum_case(np.zeros((0, 3), np.float32), {"axis": 0, "exclusive": True}, id="empty"),
    cumprod_case(rand(2, 70, 3, low=0.5, high=1.5), {"axis": 1}),
    cumprod_case(X, {"axis": 2, "exclusive": True, "reverse": True}, id="exclusive-reverse"),
    cumprod_case(rand(3, 4, dtype="int64", low=-3, high=3), {"axis": 0, "reverse": True}, id="i64"),
    topk_case(X, {"k": 3}),
    topk_case(X, {"k": 2, "axis": 0, "largest": False}, id="smallest"),
    topk_case(TIES, {"k": 3, "axis": 1}, id="ties"),
    topk_case(TIES, {"k": 4, "axis": -1, "largest": False}, id="ties-smallest"),
    topk_case(rand(4, 6, dtype="int64", low=-3, high=3), {"k": 6, "axis": 1}, id="i64-ties"),
    topk_case(X, {"k": 0, "axis": 1}, id="k0"),
    topk_case(X, {"k": 2, "axis": 2}, id="symbolic", dims=SYM),
]


def torch_scan(name, axis):
    """The oracle: torch.<name> (cummax, cummin: values and indices; logcumsumexp) along `axis`."""
    def expected(xs):
        import torch
        out = getattr(torch, name)(torch.from_numpy(xs[0]), axis)
        return [t.numpy() for t in out] if isinstance(out, tuple) else [out.numpy()]
    return expected


# Ties (the later index wins), NaN (it propagates, the index of the latest NaN), +-inf, lines of 1 and 9 (four
# shift steps of the decomposition, one of them partial); logcumsumexp over a range exp would overflow or lose.
_SCAN = np.array([[1, 3, 3, np.nan, 2, 5, np.nan, 0, 7], [-1, -2, -2, -5, 4, 4, 1, -9, -9],
                  [np.inf, 0, -np.inf, 2, 2, 2, 1, 3, 3]], np.float32)
_WIDE = np.array([[-1000, 0, 1, -np.inf, np.inf, 3, 2, 1, 0], [-np.inf, -np.inf, 2, 2, 80, 90, 0, -3, 1e4]],
                 np.float32)
CASES += [Case(op, [x], {"axis": axis}, expected=torch_scan(op, axis), id=id)
          for op in ("cummax", "cummin")
          for x, axis, id in ((_SCAN, 1, ""), (_SCAN, 0, "axis0"), (X, -1, "3d"), (I32, 1, "i32"),
                              (X[:, :1], 1, "line1"), (X.astype(np.float64), 2, "f64"))]
CASES += [Case("cummax", [X], {"axis": 1}, expected=torch_scan("cummax", 1), dims=SYM, id="symbolic"),
          Case("logcumsumexp", [_WIDE], {"axis": 1}, expected=torch_scan("logcumsumexp", 1)),
          Case("logcumsumexp", [X], {"axis": 0}, expected=torch_scan("logcumsumexp", 0), id="axis0"),
          Case("logcumsumexp", [_WIDE.astype(np.float64)], {"axis": 1}, expected=torch_scan("logcumsumexp", 1),
               id="f64")]
