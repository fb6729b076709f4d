"""The same models compiled to native code by the CPU backend, compared with PyTorch. Compiled kernels sum
in other orders and use vectorised exp/tanh/erf, so float32 is held to rtol 1e-3, atol 1e-4."""
from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import cuvil

from .helpers import assert_close, compile_torch, run_both
from .models import MobileNetV2, ResNet18, hf_model, randomize_batch_norm, text_inputs

TOL = dict(rtol=1e-3, atol=1e-4)


def check_cpu(obj, *args, kwargs=None, dynamic_shapes=None, more=()):
    compiled = compile_torch(obj, kwargs if kwargs else args, target="cpu", dynamic_shapes=dynamic_shapes)
    for a, k in [(args, kwargs)] + list(more):
        assert_close(*run_both(obj, compiled, a, k), tol=TOL)
    return compiled


def test_resnet18_imagenet_size():
    check_cpu(randomize_batch_norm(ResNet18()), torch.randn(1, 3, 224, 224))


def test_mobilenet_v2_dynamic_batch():
    check_cpu(randomize_batch_norm(MobileNetV2()), torch.randn(2, 3, 96, 96), dynamic_shapes={"x": {0: Dim("batch")}},
              more=[((torch.randn(1, 3, 96, 96),), None)])


@pytest.mark.parametrize("kind", ["bert", "distilbert", "gpt2", "vit"])
def test_transformers(kind):
    if kind == "vit":
        check_cpu(hf_model(kind), torch.randn(2, 3, 32, 32))
    else:
        check_cpu(hf_model(kind), kwargs=text_inputs())


def test_gpt2_dynamic_batch_and_sequence():
    batch, seq = Dim("batch"), Dim("seq", max=64)
    dims = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    check_cpu(hf_model("gpt2"), kwargs=text_inputs(2, 8), dynamic_shapes=dims,
              more=[((), text_inputs(3, 13, pad_from=4)), ((), text_inputs(1, 5))])


def test_hardswish_and_hardsigmoid_reach_the_ir_whole_so_they_fuse_into_the_conv():
    """torch's core-ATen table decomposes them (x * clamp(x + 3, 0, 6) / 6), which left the conv's epilogue unfused:
    MobileNetV3's torch route ran three times the kernels of its ONNX route."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, 2, 1), torch.nn.Hardswish(), torch.nn.Conv2d(16, 8, 1),
                              torch.nn.Hardsigmoid(), torch.nn.Conv2d(8, 8, 1), torch.nn.SiLU()).eval()
    compiled = check_cpu(net, torch.randn(1, 3, 19, 21))
    text = cuvil.inspect_ir(compiled)
    assert "conv_hardswish" in text and "conv_silu" in text and "hardsigmoid" in text
    assert " clip " not in text
