"""Make the demo's inputs (`python examples/web/make_demo.py OUT_FOLDER`): a small image classifier (a CNN with
random weights from a fixed seed, ending in a softmax) exported as `classifier.cuv` for wasm32, and a 32 x 32
`image.png`. `preprocess` is the page's demo.js toInput in NumPy, so Python computes what the page must show."""
from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

import numpy as np

MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # float64, as JavaScript computes
SIZE, CLASSES = 32, 10


def classifier():
    """The demo model, as a cuvil.compile'd torch module."""
    import torch

    import cuvil

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(32, CLASSES), torch.nn.Softmax(dim=1)).eval()
    return cuvil.compile(net, (torch.zeros(1, 3, SIZE, SIZE),))


def image(seed: int = 0) -> np.ndarray:
    """A test picture (uint8 RGB, SIZE x SIZE): smooth colour gradients and a disc."""
    y, x = np.mgrid[0:SIZE, 0:SIZE] / (SIZE - 1)
    disc = ((x - 0.6) ** 2 + (y - 0.4) ** 2 < 0.08).astype(float)
    rgb = np.stack([x, y * (1 - disc) + disc, (1 - x) * 0.5 + 0.5 * disc * np.sin(7 * y + seed)], -1)
    return np.clip(rgb * 255 + 0.5, 0, 255).astype(np.uint8)


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """uint8 H x W x 3 -> f32[1, 3, H, W], as demo.js does it (in float64, rounded once to float32)."""
    x = (rgb / 255.0 - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], np.float32)


def write_png(path: Path, rgb: np.ndarray) -> None:
    """An 8-bit RGB PNG, no colour profile (browsers read it as sRGB, unconverted)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\0" + rgb[r].tobytes() for r in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    path.write_bytes(png + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def make(folder: Path) -> dict:
    """Write classifier.cuv and image.png into `folder`; returns their paths and the model's input."""
    import cuvil

    folder.mkdir(parents=True, exist_ok=True)
    model, rgb = classifier(), image()
    cuvil.export(model, folder / "classifier.cuv", "wasm32")
    write_png(folder / "image.png", rgb)
    return {"model": folder / "classifier.cuv", "image": folder / "image.png", "input": preprocess(rgb),
            "compiled": model}


if __name__ == "__main__":
    out = make(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    print(f"wrote {out['model']} and {out['image']}")
