"""The benchmark workloads (W1-W6 of shared/PEERS.md, MobileNetV2, GPT-2; newer ones in workloads_extra): fp32,
random weights from fixed seeds.

Each workload builds a `Built`: the PyTorch module every peer's output is checked against, its inputs, and
the forms the other peers and Cuvil's routes take (NumPy, JAX, a `cuvil.jit` Python function, the module
`torch.export` and ONNX export should see). A missing form means the peer or route does not apply.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Built:
    module: nn.Module  # eager PyTorch: the reference output and the torch peers
    inputs: tuple  # torch tensors
    numpy_fn: Optional[Callable] = None  # NumPy arrays in, array out
    jax_fn: Optional[Callable] = None  # built lazily: (jitted function, converter of the inputs)
    jit_fn: Optional[Callable] = None  # plain Python source for cuvil.jit, called with `jit_inputs`
    jit_inputs: Optional[tuple] = None
    export_module: Optional[nn.Module] = None  # what torch.export / ONNX export get (default: module)

    def __post_init__(self):
        for m in (self.module, self.export_module):
            if m is not None:
                m.eval()

    @property
    def exported(self) -> nn.Module:
        return self.export_module if self.export_module is not None else self.module

    @property
    def numpy_inputs(self) -> tuple:
        return tuple(t.numpy() for t in self.inputs)


@dataclass
class Workload:
    key: str  # what --only selects (W1 ... W6, MNV2, GPT2)
    name: str
    build: Callable[[], Built]
    heavy: bool = False  # minutes of export and compilation: run in the background


def _rng(seed: int) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


# -- W1: (M x K) @ (K x N), the right operand a constant weight -------------------------------------------------
class MatMul(nn.Module):
    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.register_buffer("w", w)

    def forward(self, a):
        return a @ self.w


def matmul_workload(m=1024, k=512, n=256) -> Built:
    g = _rng(1)
    a, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    wn = w.numpy()

    def matmul_inference(A):
        return A @ wn

    return Built(MatMul(w), (a,), numpy_fn=matmul_inference, jax_fn=lambda: _jax(lambda a: a @ wn),
                 jit_fn=matmul_inference, jit_inputs=(a.numpy(),))


# -- W2: MLP 784-1024-1024-10 with ReLU --------------------------------------------------------------------------
def mlp_workload(batch=1, sizes=(784, 1024, 1024, 10)) -> Built:
    _rng(2)
    d0, d1, d2, d3 = sizes
    model = nn.Sequential(nn.Linear(d0, d1), nn.ReLU(), nn.Linear(d1, d2), nn.ReLU(), nn.Linear(d2, d3)).eval()
    (w1, b1), (w2, b2), (w3, b3) = [(m.weight.detach().t().contiguous(), m.bias.detach()) for m in model[::2]]
    x = torch.randn(batch, d0, generator=torch.Generator().manual_seed(20))

    def mlp(x):
        h = torch.relu(x @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        return h @ w3 + b3

    wn = [(w.numpy(), b.numpy()) for w, b in [(w1, b1), (w2, b2), (w3, b3)]]

    def mlp_numpy(x, maximum=np.maximum):
        h = maximum(x @ wn[0][0] + wn[0][1], 0)
        h = maximum(h @ wn[1][0] + wn[1][1], 0)
        return h @ wn[2][0] + wn[2][1]

    def mlp_jax():
        import jax.numpy as jnp

        return _jax(lambda x: mlp_numpy(x, jnp.maximum))

    return Built(model, (x,), numpy_fn=mlp_numpy, jax_fn=mlp_jax, jit_fn=mlp, jit_inputs=(x,))


# -- W5: the seed's dynamic_inference, on each branch -------------------------------------------------------------
def dynamic_inference(x: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    if x.mean() > threshold:
        return torch.nn.functional.relu(x)
    else:
        return torch.sigmoid(x)


class DynamicInference(nn.Module):
    """The seed's function as a module: eager PyTorch runs the Python `if`."""

    def forward(self, x):
        return dynamic_inference(x)


class DynamicInferenceCond(nn.Module):
    """The same with `torch.cond`, so that torch.export and ONNX export keep both branches."""

    def forward(self, x):
        return torch.cond(x.mean() > 0.5, lambda x: torch.relu(x), lambda x: torch.sigmoid(x), (x,))


def gate_workload(shift: float, shape=(512, 1024)) -> Built:
    x = torch.rand(*shape, generator=torch.Generator().manual_seed(5)) + shift

    def gate_numpy(x):
        return np.maximum(x, 0) if x.mean() > 0.5 else 1 / (1 + np.exp(-x))

    def gate_jax():
        import jax

        return _jax(lambda x: jax.lax.cond(x.mean() > 0.5, jax.nn.relu, jax.nn.sigmoid, x))

    return Built(DynamicInference(), (x,), numpy_fn=gate_numpy, jax_fn=gate_jax, jit_fn=dynamic_inference,
                 jit_inputs=(x,), export_module=DynamicInferenceCond())


# -- W6: gelu(layer_norm(x @ W + b)) ------------------------------------------------------------------------------
class LinearNormGelu(nn.Module):
    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.linear, self.norm = nn.Linear(d_in, d_out), nn.LayerNorm(d_out)

    def forward(self, x):
        return F.gelu(self.norm(self.linear(x)))


def linear_norm_gelu_workload(rows=128, d_in=768, d_out=3072) -> Built:
    _rng(6)
    model = LinearNormGelu(d_in, d_out).eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.2, 0.2)
    w, b = model.linear.weight.detach().t().contiguous(), model.linear.bias.detach()
    gamma, beta = model.norm.weight.detach(), model.norm.bias.detach()
    x = torch.randn(rows, d_in, generator=torch.Generator().manual_seed(60))

    def linear_norm_gelu(x):
        return F.gelu(F.layer_norm(x @ w + b, (d_out,), gamma, beta))

    def jax_form():
        import jax

        wn, bn, gn, tn = (t.numpy() for t in (w, b, gamma, beta))

        def f(x):
            h = x @ wn + bn
            mu = h.mean(-1, keepdims=True)
            var = ((h - mu) ** 2).mean(-1, keepdims=True)
            return jax.nn.gelu((h - mu) / jax.numpy.sqrt(var + 1e-5) * gn + tn, approximate=False)
        return _jax(f)

    return Built(model, (x,), jax_fn=jax_form, jit_fn=linear_norm_gelu, jit_inputs=(x,))


# -- W3 ResNet-18 and MobileNetV2 in plain PyTorch (torchvision's layout; eval mode) --------------------------------
def _conv_bn(cin, cout, k, stride=1, groups=1):
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(cin, cout, 3, stride), nn.ReLU(), *_conv_bn(cout, cout, 3))
        self.skip = nn.Sequential(*_conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return F.relu(self.body(x) + self.skip(x))


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        blocks, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.stem = nn.Sequential(*_conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [*_conv_bn(cin, hidden, 1), nn.ReLU6()] if expand != 1 else []
        layers += [*_conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.ReLU6(), *_conv_bn(hidden, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]  # expansion, channels, repeats, first stride

    def __init__(self, classes=1000):
        super().__init__()
        layers, cin = [*_conv_bn(3, 32, 3, 2), nn.ReLU6()], 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [*_conv_bn(cin, 1280, 1), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def _randomize_batch_norms(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics and affine parameters, so that folding them is really exercised."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.eval()


def vision_workload(cls, size=224) -> Built:
    _rng(3)
    model = _randomize_batch_norms(cls())
    return Built(model, (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(30)),))


# -- W4 BERT-base and DistilBERT, GPT-2 small: transformers configs, random weights --------------------------------
class LastHiddenState(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).last_hidden_state


def transformer_workload(family: str, seq: int) -> Built:
    import transformers as tf

    _rng(4)
    config = {"bert": tf.BertConfig, "distilbert": tf.DistilBertConfig, "gpt2": tf.GPT2Config}[family]()
    if family == "gpt2":
        config.use_cache = False
    model_cls = {"bert": tf.BertModel, "distilbert": tf.DistilBertModel, "gpt2": tf.GPT2Model}[family]
    model = LastHiddenState(model_cls(config)).eval()
    ids = torch.randint(0, config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(40))
    return Built(model, (ids,))


def _decode():
    from . import workloads_decode  # it imports this module (Built, _rng)

    return workloads_decode


def _extra():
    from . import workloads_extra  # it imports this module (Built, _rng)

    return workloads_extra


def _jax(fn):
    """`fn` jitted, and the converter of a call's NumPy inputs to device arrays."""
    import jax
    import jax.numpy as jnp

    return jax.jit(fn), lambda arrays: [jnp.asarray(a) for a in arrays]


STANDARD = [
    Workload("W1", "W1 matmul 1024x512x256", matmul_workload),
    Workload("W2", "W2 MLP b1", lambda: mlp_workload(1)),
    Workload("W2", "W2 MLP b64", lambda: mlp_workload(64)),
    Workload("W3", "W3 ResNet-18", lambda: vision_workload(ResNet18), heavy=True),
    Workload("W4", "W4 BERT-base", lambda: transformer_workload("bert", 128), heavy=True),
    Workload("W4", "W4 DistilBERT", lambda: transformer_workload("distilbert", 128), heavy=True),
    Workload("W5", "W5 relu branch", lambda: gate_workload(0.25)),
    Workload("W5", "W5 sigmoid branch", lambda: gate_workload(-0.25)),
    Workload("W6", "W6 gelu(LN(xW+b))", linear_norm_gelu_workload),
    Workload("MNV2", "MobileNetV2", lambda: vision_workload(MobileNetV2), heavy=True),
    Workload("GPT2", "GPT-2 small s64", lambda: transformer_workload("gpt2", 64), heavy=True),
    Workload("GPT2D", "GPT-2 decode step (64 cached)", lambda: _decode().decode_workload(), heavy=True),
    Workload("MNV3", "MobileNetV3-small", lambda: _extra().cnn_workload(_extra().MobileNetV3Small, 224), heavy=True),
    Workload("EFFB0", "EfficientNet-B0", lambda: _extra().cnn_workload(_extra().EfficientNetB0, 224), heavy=True),
    Workload("UNET", "UNet-small 128x128", lambda: _extra().cnn_workload(_extra().SmallUNet, 128), heavy=True),
    Workload("UNET", "UNet-small 32x32", lambda: _extra().cnn_workload(_extra().SmallUNet, 32, width=8), heavy=True),
    Workload("VITB", "ViT-B/16", lambda: _extra().vit_workload(768, 12, 12, 1), heavy=True),
    Workload("VITT", "ViT-tiny b2", lambda: _extra().vit_workload(192, 12, 3, 2), heavy=True),
    Workload("WHSP", "Whisper-tiny encoder", lambda: _extra().whisper_encoder_workload(), heavy=True),
    Workload("LLAMA", "Llama decode step (128 cached)", lambda: _extra().llama_decode_workload(), heavy=True),
]

# Tiny versions of the same code paths: the harness's smoke tests and a quick sanity run.
QUICK = [
    Workload("W1", "W1 matmul 64x32x16", lambda: matmul_workload(64, 32, 16)),
    Workload("W2", "W2 MLP b4 (small)", lambda: mlp_workload(4, (32, 64, 64, 10))),
    Workload("W5", "W5 relu branch (small)", lambda: gate_workload(0.25, (16, 32))),
    Workload("W5", "W5 sigmoid branch (small)", lambda: gate_workload(-0.25, (16, 32))),
    Workload("W6", "W6 gelu(LN(xW+b)) (small)", lambda: linear_norm_gelu_workload(8, 32, 64)),
    Workload("GPT2D", "GPT-2 decode step (small)", lambda: _decode().decode_workload(2, 64, 2, 8)),
]

SUITES = {"standard": STANDARD, "quick": QUICK}


def select(suite: str, only: Optional[str] = None) -> list:
    """The suite's workloads, or those whose key or name is in the comma-separated `only`."""
    workloads = SUITES[suite]
    if not only:
        return list(workloads)
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    return [w for w in workloads if w.key in wanted or w.name in wanted]
