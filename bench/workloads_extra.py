"""The suite's newer workloads (#20): mobile CNNs, a small UNet, ViTs, the Whisper-tiny encoder, a Llama decode step.

Plain PyTorch (torchvision is not installable here) or transformers configs, random weights from fixed seeds, eval
mode. Each builder takes its sizes as arguments so that the harness's smoke tests can build tiny versions of the same
code paths.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .workloads import Built, _randomize_batch_norms, _rng


def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: to a multiple of `divisor`, never below 90% of `v`."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


def _conv_bn_act(cin, cout, k, stride=1, groups=1, act=nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act is not None else nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        return x * self.gate(self.expand(self.act(self.reduce(F.adaptive_avg_pool2d(x, 1)))))


class MobileBlock(nn.Module):
    """MobileNetV3's bneck and EfficientNet's MBConv: expand 1x1, depthwise kxk, squeeze-excite, project 1x1."""

    def __init__(self, cin, hidden, cout, k, stride, act, se_channels, se_act=nn.ReLU, se_gate=nn.Hardsigmoid):
        super().__init__()
        layers = [_conv_bn_act(cin, hidden, 1, act=act)] if hidden != cin else []
        layers.append(_conv_bn_act(hidden, hidden, k, stride, groups=hidden, act=act))
        if se_channels:
            layers.append(SqueezeExcite(hidden, se_channels, se_act, se_gate))
        layers.append(_conv_bn_act(hidden, cout, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV3Small(nn.Module):
    # kernel, expanded channels, out channels, squeeze-excite, hardswish (else ReLU), stride
    SETTINGS = [(3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2), (3, 88, 24, False, False, 1),
                (5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1),
                (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1), (5, 288, 96, True, True, 2),
                (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1)]

    def __init__(self, classes=1000):
        super().__init__()
        layers, cin = [_conv_bn_act(3, 16, 3, 2, act=nn.Hardswish)], 16
        for k, hidden, cout, se, hs, stride in self.SETTINGS:
            layers.append(MobileBlock(cin, hidden, cout, k, stride, nn.Hardswish if hs else nn.ReLU,
                                      _divisible(hidden / 4) if se else 0))
            cin = cout
        layers.append(_conv_bn_act(cin, 576, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class EfficientNetB0(nn.Module):
    # expansion, kernel, stride, in channels, out channels, repeats
    SETTINGS = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    def __init__(self, classes=1000):
        super().__init__()
        layers = [_conv_bn_act(3, 32, 3, 2, act=nn.SiLU)]
        for expand, k, stride, cin, cout, repeats in self.SETTINGS:
            for i in range(repeats):
                block_in = cin if i == 0 else cout
                layers.append(MobileBlock(block_in, block_in * expand, cout, k, stride if i == 0 else 1, nn.SiLU,
                                          max(1, block_in // 4), nn.SiLU, nn.Sigmoid))
        layers.append(_conv_bn_act(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def _double_conv(cin, cout):
    return nn.Sequential(_conv_bn_act(cin, cout, 3, act=nn.SiLU), _conv_bn_act(cout, cout, 3, act=nn.SiLU))


class SmallUNet(nn.Module):
    """Three levels down by max-pool, up by ConvTranspose (two) and nearest upsampling (one), skips by concat."""

    def __init__(self, width=16, classes=2):
        super().__init__()
        w = [width, 2 * width, 4 * width, 8 * width]
        self.down = nn.ModuleList([_double_conv(3, w[0]), _double_conv(w[0], w[1]), _double_conv(w[1], w[2]),
                                   _double_conv(w[2], w[3])])
        self.up3, self.up2 = nn.ConvTranspose2d(w[3], w[2], 2, 2), nn.ConvTranspose2d(w[2], w[1], 2, 2)
        self.up1 = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(w[1], w[0], 3, padding=1))
        self.merge = nn.ModuleList([_double_conv(2 * w[2], w[2]), _double_conv(2 * w[1], w[1]),
                                    _double_conv(2 * w[0], w[0])])
        self.head = nn.Conv2d(w[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, level in enumerate(self.down):
            x = level(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for up, merge, skip in zip((self.up3, self.up2, self.up1), self.merge, reversed(skips[:-1])):
            x = merge(torch.cat([up(x), skip], dim=1))
        return torch.sigmoid(self.head(x))


def cnn_workload(cls, size: int, batch: int = 1, **kwargs) -> Built:
    _rng(7)
    model = _randomize_batch_norms(cls(**kwargs))
    return Built(model, (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(70)),))


class Pooled(nn.Module):
    """A transformers encoder's last hidden state, from pixel values or input features."""

    def __init__(self, model, argument: str):
        super().__init__()
        self.model, self.argument = model, argument

    def forward(self, x):
        return self.model(**{self.argument: x}).last_hidden_state


def vit_workload(hidden: int, layers: int, heads: int, batch: int, image: int = 224, patch: int = 16) -> Built:
    import transformers as tf

    _rng(8)
    config = tf.ViTConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                          intermediate_size=4 * hidden, image_size=image, patch_size=patch)
    model = Pooled(tf.ViTModel(config, add_pooling_layer=False), "pixel_values").eval()
    return Built(model, (torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(80)),))


def whisper_encoder_workload(d: int = 384, layers: int = 4, heads: int = 6, mels: int = 80,
                             frames: int = 3000) -> Built:
    import transformers as tf
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    _rng(9)
    config = tf.WhisperConfig(d_model=d, encoder_layers=layers, encoder_attention_heads=heads, encoder_ffn_dim=4 * d,
                              num_mel_bins=mels, max_source_positions=frames // 2)
    model = Pooled(WhisperEncoder(config), "input_features").eval()
    return Built(model, (torch.randn(1, mels, frames, generator=torch.Generator().manual_seed(90)),))


class RMSNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class LlamaBlock(nn.Module):
    """Pre-norm block: RMSNorm, rotary grouped-query attention over the cache, RMSNorm, SwiGLU."""

    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d // heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x, past_k, past_v, cos, sin):
        b, t, d = x.shape
        h = self.norm1(x)
        q = _rotate(self.q(h).reshape(b, t, self.heads, self.head_dim).transpose(1, 2), cos, sin)
        k, v = self.kv(h).reshape(b, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k, v = torch.cat([past_k, _rotate(k, cos, sin)], dim=2), torch.cat([past_v, v], dim=2)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.head_dim), dim=-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LlamaDecodeStep(nn.Module):
    def __init__(self, layers: int, d: int, heads: int, kv_heads: int, hidden: int, position: int):
        super().__init__()
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(d)
        half = d // heads // 2
        angle = position / 10000 ** (torch.arange(half, dtype=torch.float32) / half)
        self.register_buffer("cos", torch.cat([angle.cos(), angle.cos()]))
        self.register_buffer("sin", torch.cat([angle.sin(), angle.sin()]))

    def forward(self, x, past_k, past_v):
        for i, block in enumerate(self.blocks):
            x = block(x, past_k[i], past_v[i], self.cos, self.sin)
        return self.norm(x)


def llama_decode_workload(layers: int = 12, d: int = 768, heads: int = 12, kv_heads: int = 4, hidden: int = 2048,
                          past: int = 128) -> Built:
    g = _rng(10)
    model = LlamaDecodeStep(layers, d, heads, kv_heads, hidden, past)
    x = torch.randn(1, 1, d, generator=g)
    cache = [torch.randn(layers, 1, kv_heads, past, d // heads, generator=g) for _ in range(2)]
    return Built(model, (x, *cache))
