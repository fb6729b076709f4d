"""DeformConv against ONNX's reference: groups, offset groups, strides, dilations, pads, a mask and a bias, and
offsets that move taps off the map (they read zeros), interpreted and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import cuvil

from .helpers import F32, helper, model

CASES = {"plain": dict(x=(1, 2, 5, 5), w=(3, 2, 3, 3), attrs={}),
         "groups-strides-pads": dict(x=(2, 4, 6, 5), w=(4, 2, 2, 2), attrs=dict(group=2, offset_group=2,
                                                                                 strides=[2, 1], pads=[1, 0, 1, 1])),
         "dilated-mask-bias": dict(x=(1, 3, 7, 6), w=(2, 3, 2, 3), attrs=dict(dilations=[2, 1], pads=[1, 1, 1, 1]),
                                   mask=True, bias=True)}


def _out(size, k, s, d, p0, p1):
    return (size + p0 + p1 - (k - 1) * d - 1) // s + 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx_reference(name):
    case, rng = CASES[name], np.random.default_rng(len(name))
    attrs = case["attrs"]
    (n, _, h, wd), (oc, _, kh, kw) = case["x"], case["w"]
    s, d, p = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]), attrs.get("pads", [0, 0, 0, 0])
    oh, ow = _out(h, kh, s[0], d[0], p[0], p[2]), _out(wd, kw, s[1], d[1], p[1], p[3])
    og = attrs.get("offset_group", 1)
    feeds = {"x": rng.standard_normal(case["x"]).astype(np.float32),
             "w": rng.standard_normal(case["w"]).astype(np.float32),
             "offset": (3 * rng.standard_normal((n, og * kh * kw * 2, oh, ow))).astype(np.float32)}
    names = ["x", "w", "offset", "", ""]
    if case.get("bias"):
        feeds["b"], names[3] = rng.standard_normal(oc).astype(np.float32), "b"
    if case.get("mask"):
        feeds["mask"], names[4] = rng.uniform(0, 1, (n, og * kh * kw, oh, ow)).astype(np.float32), "mask"
    names = names[:max(i for i, v in enumerate(names) if v) + 1]
    node = helper.make_node("DeformConv", names, ["y"], kernel_shape=[kh, kw], **attrs)
    proto = model([node], [(k, F32, list(v.shape)) for k, v in feeds.items()], [("y", F32, None)], opset=19)
    want = ReferenceEvaluator(proto).run(None, feeds)[0]
    loaded = cuvil.load_onnx(proto)
    for (got,) in (loaded(**feeds), loaded.optimize()(**feeds)):
        assert got.shape == want.shape == (n, oc, oh, ow)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
