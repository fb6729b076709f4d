"""The flash-style fused attention kernel: O = softmax(Q K^T * scale + mask) V without the scores ever reaching memory
(FuseAttention, passes/attention.py, outlines the pattern).

A block holds WARPS query rows of one batch item (a warp a row); K and V go through shared memory in tiles of a
warp's width of keys (32). For each tile, lane j scores key j, the warp keeps the running max and sum of the online
softmax (shuffles), and each lane accumulates its D/32 share of the output row, rescaled whenever the max grows.
f32 throughout. The mask, when there is one, is a tensor of the scores' shape: f32 added to the scores ("add": BERT's
additive mask), or bool keeping the keys where it holds ("keep": where(mask, s, -inf), as torch's SDPA writes BERT's
padding and GPT-2's causal mask). A row with no key left is NaN, as its softmax; or 0 where the model guards it
(`where(max(s) == -inf, 0, softmax(s))`, torch's SDPA). Written for any warp width CUVIL_WARP, so the host emulation
(a warp of one lane, one thread a block) runs the same algorithm.
"""
from __future__ import annotations

from ...ir.core import Op
from ...passes.attention import attention_parts
from .kernels import KernelLaunch

WARPS = 8  # warps (query rows) a block on a GPU

_KERNEL = """extern "C" __global__ void __launch_bounds__({threads}) {name}(int64_t batch, int64_t rows, int64_t keys,
    const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v, {mask_param}float scale,
    float *__restrict__ o)
{{
    __shared__ float ks[CUVIL_WARP][{d}], vs[CUVIL_WARP][{dv}], qs[{warps}][{d}];
    const int warps = blockDim.x / CUVIL_WARP, warp = threadIdx.x / CUVIL_WARP, lane = threadIdx.x % CUVIL_WARP;
    const int64_t tiles_per_item = (rows + warps - 1) / warps;
    for (int64_t t = blockIdx.x; t < batch * tiles_per_item; t += gridDim.x) {{
        const int64_t b = t / tiles_per_item, row = (t % tiles_per_item) * warps + warp;
        const bool live = row < rows;
        const int64_t at = b * rows + (live ? row : 0);
        const float *qb = q + at * {d};
        for (int c = lane; c < {d}; c += CUVIL_WARP) qs[warp][c] = live ? qb[c] * scale : 0.0f;
        float m = -INFINITY, l = 0.0f, acc[({dv} + CUVIL_WARP - 1) / CUVIL_WARP];
        for (int i = 0; i < ({dv} + CUVIL_WARP - 1) / CUVIL_WARP; i++) acc[i] = 0.0f;
        for (int64_t k0 = 0; k0 < keys; k0 += CUVIL_WARP) {{
            __syncthreads();
            for (int e = threadIdx.x; e < CUVIL_WARP * {d}; e += blockDim.x) {{
                const int64_t key = k0 + e / {d};
                ks[e / {d}][e % {d}] = key < keys ? k[{k_at}] : 0.0f;
            }}
            for (int e = threadIdx.x; e < CUVIL_WARP * {dv}; e += blockDim.x) {{
                const int64_t key = k0 + e / {dv};
                vs[e / {dv}][e % {dv}] = key < keys ? v[(b * keys + key) * {dv} + e % {dv}] : 0.0f;
            }}
            __syncthreads();
            float s = -INFINITY;
            if (k0 + lane < keys) {{
                s = 0.0f;
                for (int c = 0; c < {d}; c++) s += qs[warp][c] * ks[lane][c];
{mask}            }}
            float tile_max = s;
            for (int off = CUVIL_WARP / 2; off > 0; off >>= 1)
                tile_max = CUVIL_MAX(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
            const float m_new = CUVIL_MAX(m, tile_max);
            const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
            const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
            float p_sum = p;
            for (int off = CUVIL_WARP / 2; off > 0; off >>= 1) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, off);
            l = l * alpha + p_sum;
            for (int i = 0; i < ({dv} + CUVIL_WARP - 1) / CUVIL_WARP; i++) acc[i] *= alpha;
            for (int j = 0; j < CUVIL_WARP; j++) {{
                const float pj = __shfl_sync(0xffffffffu, p, j);
                for (int i = 0; i < ({dv} + CUVIL_WARP - 1) / CUVIL_WARP; i++) {{
                    const int c = lane + CUVIL_WARP * i;
                    if (c < {dv}) acc[i] += pj * vs[j][c];
                }}
            }}
            m = m_new;
        }}
        if (live) {{
            float *ob = o + at * {dv};
            for (int i = 0; i < ({dv} + CUVIL_WARP - 1) / CUVIL_WARP; i++) {{
                const int c = lane + CUVIL_WARP * i;
                if (c < {dv}) ob[c] = {empty_row} ? {empty} : acc[i] / l; /* no key left: the row's softmax */
            }}
        }}
    }}
}}
"""


def _prod(dims):
    n = 1
    for d in dims:
        n = n * d
    return n


MASKS = {"add": ("const float *__restrict__ mask, ", "                s += mask[at * keys + k0 + lane];\n"),
         "keep": ("const uint8_t *__restrict__ mask, ",
                  "                if (!mask[at * keys + k0 + lane]) s = -INFINITY;\n"),
         None: ("", "")}


def emit_attention(gen, op: Op) -> None:
    p = attention_parts(op)
    q, k, v, kind = p.q, p.k, p.v, p.mask_kind
    d, dv = q.type.shape[-1], v.type.shape[-1]
    guard = ("", "_guarded", "_nan_guarded")[p.guarded]
    name = f"cuvil_attention_d{d}_dv{dv}" + (f"_{kind}" if kind else "") + guard + ("_kt" if p.k_transposed else "")
    k_at = f"(b * {d} + e % {d}) * keys + key" if p.k_transposed else f"(b * keys + key) * {d} + e % {d}"
    mask_param, mask_code = MASKS[kind]
    gen.helpers[name] = _KERNEL.format(name=name, threads=WARPS * 32, warps=WARPS, d=d, dv=dv, mask_param=mask_param,
                                       mask=mask_code, empty="0.0f" if p.guarded else "NAN", k_at=k_at,
                                       empty_row="(l == 0.0f || l != l)" if p.guarded == 2 else "l == 0.0f")
    batch, rows, keys = _prod(q.type.shape[:-2]), q.type.shape[-2], k.type.shape[-1 if p.k_transposed else -2]
    ins = [q, k, v] + ([p.mask] if kind else [])
    kinds = [("dim", batch), ("dim", rows), ("dim", keys), "in", "in", "in", *(["in"] if kind else []),
             ("f32", p.scale), "out"]
    work = batch * ((rows + WARPS - 1) // WARPS)
    gen.launch(KernelLaunch(name, work, 1, kinds, threads=WARPS * 32), ins, op.results, kinds)
