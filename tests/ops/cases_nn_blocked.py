"""Cases for the blocked convolution `conv_nchwc`: ONNX's Conv on the unblocked tensors, blocked again."""
import numpy as np

from tests.ops.cases import Case, onnx_node, rand


def _blocked(x, size):
    n, c, h, w = x.shape
    x = np.pad(x, [(0, 0), (0, -c % size), (0, 0), (0, 0)])
    return np.ascontiguousarray(x.reshape(n, -1, size, h, w).transpose(0, 1, 3, 4, 2))


def _packed(w, cb, ob):
    o, c, kh, kw = w.shape
    w = np.pad(w, [(0, -o % ob), (0, -c % cb), (0, 0), (0, 0)])
    return np.ascontiguousarray(w.reshape(-1, ob, w.shape[1] // cb, cb, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def conv_case(x, w, bias, cb, ob, residual=False, activation="none", case_id="", dims=None, channels=0,
              algorithm="direct", **attrs):
    """A case from plain NCHW tensors: blocked inputs, and the expected result from ONNX's Conv (Winograd's
    tolerance: tests/backends/cpu/test_winograd.py)."""
    o = w.shape[0]
    bias_b = np.pad(bias, (0, -o % ob)).reshape(-1, ob).astype(np.float32)
    inputs = [_blocked(x, cb), _packed(w, cb, ob), bias_b]
    res = rand(x.shape[0], -(-o // ob), *_out(x.shape[2:], w.shape[2:], attrs), ob, seed=5) if residual else None
    if residual:
        inputs.append(res)
    onnx_attrs = {k: list(v) for k, v in attrs.items()}

    def expected(_):
        (y,) = onnx_node("Conv", [x, w, bias], onnx_attrs)
        y = _blocked(y, ob).astype(np.float64)
        y = y + res if residual else y
        y = np.maximum(y, 0) if activation == "relu" else y
        if channels:  # the plain layout, first `channels` channels
            y = y.transpose(0, 1, 4, 2, 3).reshape(y.shape[0], -1, *y.shape[2:4])[:, :channels]
        return [y.astype(np.float32)]
    tol = 1e-5 if algorithm == "direct" else 1e-4
    return Case("conv_nchwc", inputs, {**attrs, "activation": activation, "channels": channels, "algorithm": algorithm},
                expected=expected, id=case_id, dims=dims, rtol=tol, atol=tol)


def _out(sizes, kernel, a):
    strides, dil, pads = a.get("strides", (1, 1)), a.get("dilations", (1, 1)), a.get("pads", (0,) * 4)
    return [(n + pads[i] + pads[i + 2] - dil[i] * (k - 1) - 1) // strides[i] + 1
            for i, (n, k) in enumerate(zip(sizes, kernel))]


CASES = [
    conv_case(rand(1, 3, 6, 6), rand(5, 3, 3, 3, seed=1), rand(5, seed=2), 4, 4, pads=(1, 1, 1, 1), case_id="3x3"),
    conv_case(rand(2, 8, 5, 7), rand(8, 8, 1, 1, seed=1), rand(8, seed=2), 8, 8, case_id="1x1"),
    conv_case(rand(1, 4, 9, 8), rand(6, 4, 3, 3, seed=1), rand(6, seed=2), 4, 2, strides=(2, 2), pads=(1, 0, 1, 2),
              case_id="strides-asym-pads"),
    conv_case(rand(1, 2, 8, 8), rand(3, 2, 3, 2, seed=1), rand(3, seed=2), 2, 4, dilations=(2, 1), pads=(2, 1, 2, 1),
              case_id="dilations"),
    conv_case(rand(1, 4, 5, 5), rand(4, 4, 3, 3, seed=1), rand(4, seed=2), 4, 4, residual=True, activation="relu",
              pads=(1, 1, 1, 1), case_id="residual-relu"),
    conv_case(rand(2, 3, 6, 5), rand(4, 3, 3, 3, seed=1), rand(4, seed=2), 4, 4, activation="relu", pads=(1, 1, 1, 1),
              dims={0: {0: "n", 2: "h", 3: "w"}}, case_id="symbolic"),
    conv_case(rand(2, 16, 9, 6), rand(20, 16, 3, 3, seed=1), rand(20, seed=2), 16, 16, residual=True,
              activation="relu", pads=(1, 0, 2, 1), algorithm="winograd", case_id="winograd"),
    conv_case(rand(2, 5, 7, 9), rand(21, 5, 3, 3, seed=1), rand(21, seed=2), 8, 8, activation="relu", channels=19,
              pads=(1, 1, 1, 1), strides=(1, 2), case_id="plain-output"),
]


def dw_case(x, w, bias, size, activation="none", case_id="", dims=None, **attrs):
    """A depthwise case from plain NCHW tensors (w [C, 1, kh, kw]): blocked inputs, the expected result from ONNX's
    Conv with one group per channel."""
    c = x.shape[1]
    wb = np.pad(w[:, 0], [(0, -c % size), (0, 0), (0, 0)]).reshape(-1, size, *w.shape[2:]).transpose(0, 2, 3, 1)
    inputs = [_blocked(x, size), np.ascontiguousarray(wb), np.pad(bias, (0, -c % size)).reshape(-1, size)]

    def expected(_):
        (y,) = onnx_node("Conv", [x, w, bias], {"group": c, **{k: list(v) for k, v in attrs.items()}})
        y = _blocked(y, size).astype(np.float64)
        return [(np.clip(y, 0, 6) if activation == "relu6" else y).astype(np.float32)]
    return Case("dwconv_nchwc", inputs, {**attrs, "activation": activation}, expected=expected, id=case_id, dims=dims)


CASES += [
    dw_case(rand(1, 6, 7, 8), rand(6, 1, 3, 3, seed=1), rand(6, seed=2), 4, pads=(1, 1, 1, 1), case_id="dw-3x3"),
    dw_case(rand(2, 8, 9, 6), rand(8, 1, 5, 3, seed=1), rand(8, seed=2), 8, strides=(2, 1), dilations=(1, 2),
            pads=(2, 0, 1, 2), activation="relu6", case_id="dw-strides-dilations-relu6"),
    dw_case(rand(2, 4, 6, 5), rand(4, 1, 3, 3, seed=1), rand(4, seed=2), 4, strides=(2, 2), pads=(1, 1, 1, 1),
            dims={0: {0: "n", 2: "h", 3: "w"}}, case_id="dw-symbolic"),
]


def spatial_sum_case(x, size, case_id="", dims=None):
    """A blocked sum over H and W from a plain NCHW tensor, the expected result from ONNX's ReduceSum, blocked."""
    def expected(_):
        (y,) = onnx_node("ReduceSum", [x, np.array([2, 3], np.int64)], {"keepdims": 1})
        return [_blocked(y, size).astype(np.float32)]
    return Case("spatial_sum_nchwc", [_blocked(x, size)], {}, expected=expected, id=case_id, dims=dims)


CASES += [
    spatial_sum_case(rand(1, 6, 7, 8), 4, case_id="sum-padded-channels"),
    spatial_sum_case(rand(2, 8, 1, 1), 8, case_id="sum-one-pixel"),
    spatial_sum_case(rand(2, 4, 6, 5), 4, dims={0: {0: "n", 2: "h", 3: "w"}}, case_id="sum-symbolic"),
]
