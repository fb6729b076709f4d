"""One thread per element of a domain, in a grid-stride loop: the kernel form of the library ops that compute each
output element (or line) on its own (conv, pooling, conv_transpose, einsum, the direct GEMM, gather/scatter_elements,
argmax, topk, resize, trees, the quantized ops). The loop's coordinates are o0, o1, ... over the domain's shape."""
from __future__ import annotations

from ...ir.dtypes import DType
from ...ir.symbolic import free_symbols
from ..common.c_exprs import c_dim, load, store_value
from .kernels import BLOCK, CUDA_STORAGE, KernelLaunch


def prod(dims):
    n = 1
    for d in dims:
        n = n * d
    return n


def load_as(dtype: DType, ptr: str, index: str) -> str:
    """An element as its compute type (f16 travels as its bits on the device)."""
    return f"cuvil_f16_to_f32({ptr}[{index}])" if dtype is DType.f16 else load(dtype, ptr, index)


def store_as(dtype: DType, expr: str) -> str:
    return f"cuvil_f32_to_f16({expr})" if dtype is DType.f16 else store_value(dtype, expr)


def device_helper(name: str, text: str) -> str:
    """`text` (device functions) once per translation unit, also where programs are joined (the tests' op suite)."""
    guard = name.upper()
    return f"#ifndef {guard}\n#define {guard}\n{text}#endif\n"


def grid_loop(shape, body: list) -> str:
    """The kernel body: a grid-stride loop over the elements of `shape`, split into coordinates o0.., then `body`."""
    split, rest = [], "o"
    for d in range(len(shape) - 1, 0, -1):
        split.append(f"        const int64_t o{d} = {rest} % {c_dim(shape[d])};")
        rest = f"({rest} / {c_dim(shape[d])})"
    if shape:
        split.append(f"        const int64_t o0 = {rest};")
    return ("{\n" + f"    const int64_t n_out = {c_dim(prod(shape))};\n"
            "    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; "
            "o += (int64_t)gridDim.x * blockDim.x) {\n" + "\n".join(split) + "\n" +
            "\n".join("        " + line for line in body) + "\n    }\n}\n")


def element_kernel(gen, op, tag: str, domain, body: list, ins: dict, outs: dict, err: bool = False) -> None:
    """Emit and launch a kernel running `body` once per element of `domain` (a shape); `ins` and `outs` map the C
    names of its pointers to Values, `err` passes the run's error word as `cuvil_err`."""
    values = [*ins.values(), *outs.values()]
    syms = sorted(set().union(*(v.type.free_symbols for v in values),
                              *(free_symbols(d) for d in domain)))
    params = [f"const {CUDA_STORAGE[v.type.dtype]} *__restrict__ {name}" for name, v in ins.items()]
    params += [f"{CUDA_STORAGE[v.type.dtype]} *__restrict__ {name}" for name, v in outs.items()]
    kinds = ["in"] * len(ins) + ["out"] * len(outs)
    if err:
        params.append("int *__restrict__ cuvil_err")
        kinds.append("err")
    params += [f"int64_t s_{n}" for n in syms]
    kinds += [("sym", n) for n in syms]
    kname = f"k{len(gen.kernels)}_{tag}"
    text = (f'extern "C" __global__ void __launch_bounds__({BLOCK}) {kname}({", ".join(params)})\n'
            + grid_loop(domain, body))
    loc = f" at {op.loc}" if str(op.loc) else ""
    launch = gen.add_kernel(text, KernelLaunch(kname, prod(domain), BLOCK, kinds), kname, f"/* {op.name}{loc} */\n")
    gen.launch(launch, list(ins.values()), list(outs.values()), kinds)
