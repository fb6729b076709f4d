"""The optimizer steps of ONNX's training domain (ai.onnx.preview.training): Adagrad, Momentum and Adam.

Each is a pure function of its inputs (a learning rate R, a step count T, then per optimized tensor X its
gradient G and its accumulators), so it converts to elementwise IR like any other op. The scalar factors that
depend on T are computed in f64, as ONNX's reference does, then cast to X's type.
"""
from __future__ import annotations

from ...ir.dtypes import DType
from .registry import converter

TRAINING = "ai.onnx.preview.training"


def _groups(ctx, per_tensor: int) -> list:
    """The inputs after R and T as per-tensor tuples: (X1..Xn, G1..Gn, ...) -> [(X1, G1, ...), ...]."""
    count = len(ctx.inputs) - 2
    if count <= 0 or count % per_tensor:
        raise ctx.error(f"needs R, T and {per_tensor} inputs per optimized tensor, got {len(ctx.inputs)} inputs")
    n = count // per_tensor
    return [tuple(ctx.x(2 + k * n + i) for k in range(per_tensor)) for i in range(n)]


class _Step:
    """Elementwise arithmetic on one optimized tensor X, with scalars (numbers or 0-d f64 values) spread to X."""

    def __init__(self, ctx, x):
        self.ctx, self.b, self.x = ctx, ctx.b, x

    def s(self, value):
        """A number, or a 0-d value, as X's type and shape."""
        if isinstance(value, (int, float)):
            return self.ctx.scalar_like(value, self.x)
        return self.ctx.expand(self.ctx.cast(value, self.x.type.dtype), self.x.type.shape)

    def axpy(self, a, x, y):
        """a * x + y, with a a scalar."""
        return self.b.add(self.b.mul(self.s(a), x), y)


def _scalars(ctx):
    """R and T as 0-d f64 values, and a helper for f64 constants."""
    b = ctx.b
    r, t = (ctx.cast(ctx.reshape(ctx.x(i), ()), DType.f64) for i in (0, 1))
    return b, r, t, lambda value: ctx.scalar(value, DType.f64)


@converter("Adagrad", domain=TRAINING)
def adagrad(ctx):
    """H += g^2; X -= r g / (sqrt(H) + epsilon), with g = G + norm_coefficient X and r = R / (1 + T decay)."""
    b, r, t, f64 = _scalars(ctx)
    rate = b.div(r, b.add(f64(1.0), b.mul(t, f64(ctx.attr("decay_factor", 0.0)))))
    xs, hs = [], []
    for x, g, h in _groups(ctx, 3):
        s = _Step(ctx, x)
        g = s.axpy(ctx.attr("norm_coefficient", 0.0), x, g)
        h_new = b.add(h, b.mul(g, g))
        scale = b.add(b.sqrt(h_new), s.s(ctx.attr("epsilon", 1e-6)))
        xs.append(b.sub(x, b.div(b.mul(s.s(rate), g), scale)))
        hs.append(h_new)
    return xs + hs


@converter("Momentum", domain=TRAINING)
def momentum(ctx):
    """V = alpha V + beta' g (beta' = 1 at T = 0); X -= R V, or R (g + alpha V) in Nesterov's mode."""
    b, r, t, f64 = _scalars(ctx)
    alpha, mode = ctx.attr("alpha"), ctx.attr("mode", "standard")
    if mode not in ("standard", "nesterov"):
        raise ctx.unsupported(f"mode {mode!r} is not 'standard' or 'nesterov'")
    beta = b.where(b.gt(t, f64(0.0)), f64(ctx.attr("beta")), f64(1.0))
    xs, vs = [], []
    for x, g, v in _groups(ctx, 3):
        s = _Step(ctx, x)
        g = s.axpy(ctx.attr("norm_coefficient", 0.0), x, g)
        v_new = b.add(b.mul(s.s(alpha), v), b.mul(s.s(beta), g))
        step = v_new if mode == "standard" else s.axpy(alpha, v_new, g)
        xs.append(b.sub(x, b.mul(s.s(r), step)))
        vs.append(v_new)
    return xs + vs


@converter("Adam", domain=TRAINING)
def adam(ctx):
    """V and H as decaying averages of g and g^2; X -= r V / (sqrt(H) + epsilon) with the bias-corrected rate
    r = R sqrt(1 - beta^T) / (1 - alpha^T) for T > 0; then X *= 1 - norm_coefficient_post."""
    b, r, t, f64 = _scalars(ctx)
    alpha, beta = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999)
    corrected = b.div(b.mul(r, b.sqrt(b.sub(f64(1.0), b.pow(f64(beta), t)))), b.sub(f64(1.0), b.pow(f64(alpha), t)))
    rate = b.where(b.gt(t, f64(0.0)), corrected, r)
    xs, vs, hs = [], [], []
    for x, g, v, h in _groups(ctx, 4):
        s = _Step(ctx, x)
        g = s.axpy(ctx.attr("norm_coefficient", 0.0), x, g)
        v_new = s.axpy(alpha, v, b.mul(s.s(1.0 - alpha), g))
        h_new = s.axpy(beta, h, b.mul(s.s(1.0 - beta), b.mul(g, g)))
        x_new = b.sub(x, b.mul(s.s(rate), b.div(v_new, b.add(b.sqrt(h_new), s.s(ctx.attr("epsilon", 1e-6))))))
        xs.append(b.mul(s.s(1.0 - ctx.attr("norm_coefficient_post", 0.0)), x_new))
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs
