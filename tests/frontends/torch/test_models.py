"""Whole models through torch.export -> Cuvil IR -> interpreter, compared with PyTorch (float32: rtol 1e-4,
atol 1e-5; see helpers.TOLERANCES). Transformers models are small configs except one at its default size."""
from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from .helpers import check
from .models import MobileNetV2, ResNet18, hf_model, randomize_batch_norm, text_inputs


def test_resnet18_imagenet_size():
    model = randomize_batch_norm(ResNet18())
    check(model, torch.randn(1, 3, 224, 224))


def test_resnet_dynamic_batch():
    model = randomize_batch_norm(ResNet18(num_classes=10, width=8))
    compiled = check(model, torch.randn(2, 3, 64, 64), dynamic_shapes={"x": {0: Dim("batch")}},
                     more=[((torch.randn(1, 3, 64, 64),), None), ((torch.randn(3, 3, 64, 64),), None)])
    assert str(compiled.module.main.args[0].type) == "f32[batch,3,64,64]"


def test_mobilenet_v2_imagenet_size():
    model = randomize_batch_norm(MobileNetV2())
    check(model, torch.randn(1, 3, 224, 224))


@pytest.mark.parametrize("kind", ["bert", "distilbert", "gpt2"])
def test_text_models_with_padding_masks(kind):
    model = hf_model(kind)
    compiled = check(model, kwargs=text_inputs())
    out = compiled(**text_inputs())
    assert type(out).__name__.startswith("BaseModelOutput") and "last_hidden_state" in out


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_text_models_with_dynamic_batch_and_sequence(kind):
    batch, seq = Dim("batch"), Dim("seq", max=64)
    dims = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    compiled = check(hf_model(kind), kwargs=text_inputs(2, 8), dynamic_shapes=dims,
                     more=[((), text_inputs(3, 13, pad_from=4)), ((), text_inputs(1, 5))])
    assert [str(a.type) for a in compiled.module.main.args] == ["i64[batch,seq]", "i64[batch,seq]"]


def test_gpt2_without_mask_uses_the_causal_mask():
    check(hf_model("gpt2"), kwargs={"input_ids": text_inputs()["input_ids"]})


def test_vit():
    check(hf_model("vit"), torch.randn(2, 3, 32, 32))


def test_distilbert_default_config():
    check(hf_model("distilbert", small=False), kwargs=text_inputs(1, 16, vocab=1000, pad_from=12))
