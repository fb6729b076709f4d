"""The flash-style fused attention kernel: O = softmax(Q K^T * scale) V without the scores ever reaching memory
(FuseAttention, passes/attention.py, outlines the pattern).

A block holds WARPS query rows of one batch item (a warp a row); K and V go through shared memory in tiles of 32 keys.
For each tile, lane j scores key j, the warp keeps the running max and sum of the online softmax (shuffles), and each
lane accumulates its D/32 share of the output row, rescaled whenever the max grows. f32 throughout.
"""
from __future__ import annotations

from ...ir.core import Op
from .kernels import KernelLaunch

WARPS = 8
TILE = 32

_KERNEL = """extern "C" __global__ void __launch_bounds__({threads}) {name}(int64_t batch, int64_t rows, int64_t keys,
    const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v, float scale,
    float *__restrict__ o)
{{
    __shared__ float ks[{tile}][{d}], vs[{tile}][{dv}], qs[{warps}][{d}];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t tiles_per_item = (rows + {warps} - 1) / {warps};
    for (int64_t t = blockIdx.x; t < batch * tiles_per_item; t += gridDim.x) {{
        const int64_t b = t / tiles_per_item, row = (t % tiles_per_item) * {warps} + warp;
        const bool live = row < rows;
        const float *qb = q + (b * rows + (live ? row : 0)) * {d};
        for (int c = lane; c < {d}; c += 32) qs[warp][c] = live ? qb[c] * scale : 0.0f;
        float m = -INFINITY, l = 0.0f, acc[{per_lane}];
        for (int i = 0; i < {per_lane}; i++) acc[i] = 0.0f;
        for (int64_t k0 = 0; k0 < keys; k0 += {tile}) {{
            __syncthreads();
            for (int e = threadIdx.x; e < {tile} * {d}; e += blockDim.x) {{
                const int64_t key = k0 + e / {d};
                ks[e / {d}][e % {d}] = key < keys ? k[(b * keys + key) * {d} + e % {d}] : 0.0f;
            }}
            for (int e = threadIdx.x; e < {tile} * {dv}; e += blockDim.x) {{
                const int64_t key = k0 + e / {dv};
                vs[e / {dv}][e % {dv}] = key < keys ? v[(b * keys + key) * {dv} + e % {dv}] : 0.0f;
            }}
            __syncthreads();
            float s = -INFINITY;
            if (k0 + lane < keys) {{
                s = 0.0f;
                for (int c = 0; c < {d}; c++) s += qs[warp][c] * ks[lane][c];
            }}
            float tile_max = s;
            for (int off = 16; off > 0; off >>= 1)
                tile_max = CUVIL_MAX(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
            const float m_new = CUVIL_MAX(m, tile_max);
            const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
            const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
            float p_sum = p;
            for (int off = 16; off > 0; off >>= 1) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, off);
            l = l * alpha + p_sum;
            for (int i = 0; i < {per_lane}; i++) acc[i] *= alpha;
            for (int j = 0; j < {tile}; j++) {{
                const float pj = __shfl_sync(0xffffffffu, p, j);
                for (int i = 0; i < {per_lane}; i++) {{
                    const int c = lane + 32 * i;
                    if (c < {dv}) acc[i] += pj * vs[j][c];
                }}
            }}
            m = m_new;
        }}
        if (live) {{
            float *ob = o + (b * rows + row) * {dv};
            for (int i = 0; i < {per_lane}; i++) {{
                const int c = lane + 32 * i;
                if (c < {dv}) ob[c] = acc[i] / l;
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


def emit_attention(gen, op: Op) -> None:
    body = op.regions[0].ops
    source = dict(zip((id(a) for a in op.regions[0].args), op.operands))
    tr = next(o for o in body if o.name == "transpose")
    mm = next(o for o in body if o.name == "matmul")
    pv = [o for o in body if o.name == "matmul"][-1]
    q, k, v = source[id(mm.operands[0])], source[id(tr.operands[0])], source[id(pv.operands[1])]
    scale = 1.0
    for o in body:
        if o.name in ("div", "mul"):
            c = float(o.operands[1].owner.operands[0].owner.attrs["value"])
            scale = 1.0 / c if o.name == "div" else c
    d, dv = q.type.shape[-1], v.type.shape[-1]
    name = f"cuvil_attention_d{d}_dv{dv}"
    gen.helpers[name] = _KERNEL.format(name=name, threads=WARPS * 32, tile=TILE, warps=WARPS, d=d, dv=dv,
                                       per_lane=max(1, -(-dv // 32)))
    batch, rows, keys = _prod(q.type.shape[:-2]), q.type.shape[-2], k.type.shape[-2]
    kinds = [("dim", batch), ("dim", rows), ("dim", keys), "in", "in", "in", ("f32", scale), "out"]
    work = batch * ((rows + WARPS - 1) // WARPS)
    gen.launch(KernelLaunch(name, work, 1, kinds, threads=WARPS * 32), [q, k, v], op.results, kinds)
