"""Models for the PyTorch frontend tests, built from code with random weights (torchvision is not
installable here, so ResNet-18 and MobileNetV2 are written out in plain torch, following their papers)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


# -- ResNet-18 -------------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000, width: int = 64):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            blocks += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


# -- MobileNetV2 -----------------------------------------------------------------------------------------
def conv_bn(cin, cout, k, stride, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6(inplace=True)) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn(cin, hidden, 1, 1)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, 1, act=False)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    # (expansion, channels, repeats, stride) per stage, as in the paper
    STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
              (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000, width: float = 1.0):
        super().__init__()
        c = int(32 * width)
        layers = [conv_bn(3, c, 3, 2)]
        for t, ch, n, s in self.STAGES:
            cout = int(ch * width)
            for i in range(n):
                layers.append(InvertedResidual(c, cout, s if i == 0 else 1, t))
                c = cout
        last = max(1280, int(1280 * width))
        layers.append(conv_bn(c, last, 1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def randomize_batch_norm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial running statistics, so batch norm is really tested (fresh ones are mean 0, var 1)."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


# -- transformers models from configs --------------------------------------------------------------------
def hf_model(kind: str, small: bool = True):
    """BERT, DistilBERT, GPT-2 or ViT from a config (random weights, no download)."""
    import pytest

    tf = pytest.importorskip("transformers")

    torch.manual_seed(0)
    tiny = dict(vocab_size=128)
    configs = {
        "bert": lambda: tf.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                      intermediate_size=128, **tiny) if small else tf.BertConfig(),
        "distilbert": lambda: tf.DistilBertConfig(n_layers=2, dim=64, n_heads=4, hidden_dim=128, **tiny)
        if small else tf.DistilBertConfig(),
        "gpt2": lambda: tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, use_cache=False,
                                      bos_token_id=0, eos_token_id=0, **tiny) if small
        else tf.GPT2Config(use_cache=False),
        "vit": lambda: tf.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                    image_size=32, patch_size=8) if small else tf.ViTConfig(),
    }
    models = {"bert": tf.BertModel, "distilbert": tf.DistilBertModel, "gpt2": tf.GPT2Model, "vit": tf.ViTModel}
    return models[kind](configs[kind]()).eval()


def text_inputs(batch: int = 2, seq: int = 8, vocab: int = 128, pad_from: int = 5) -> dict:
    """Token ids and an attention mask whose second row is right-padded from `pad_from`."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1:
        mask[1, pad_from:] = 0
    return {"input_ids": ids, "attention_mask": mask}
