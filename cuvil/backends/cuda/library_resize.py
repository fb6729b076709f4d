"""resize on the device (ONNX Resize: nearest, linear, cubic; every coordinate transform): a thread per output
element computes each resized axis's taps with the CPU's `cuvil_resize_taps` (in double, as the reference), then
copies the nearest source element or sums the taps' weighted elements in double and rounds once."""
from __future__ import annotations

from ..common.c_exprs import c_dim
from ..cpu.library_resize import COORDS, NEAREST, TAPS, TAPS_FN, _resized_axes
from .elements import device_helper, element_kernel, load_as, prod, store_as


def _resize(gen, op) -> None:
    x, y = op.operands[0], op.results[0]
    attrs, dt, rank = op.attrs, x.type.dtype, x.type.rank
    taps = TAPS[attrs["mode"]]
    axes = _resized_axes(x, attrs)
    gen.helpers["cuvil_resize_taps"] = device_helper("cuvil_resize_taps",
                                                     TAPS_FN.format(qualifiers="static __device__ inline"))
    body, transform = [], COORDS[attrs["coordinate_transformation_mode"]]
    for a in axes:
        n_in, n_out = c_dim(x.type.shape[a]), c_dim(attrs["sizes"][a])
        scale = repr(float(attrs["scales"][a])) if attrs["scales"] else f"(double){n_out} / (double){n_in}"
        body += [f"int64_t ix{a}[{taps}]; double w{a}[{taps}];",
                 f"cuvil_resize_taps(o{a}, {n_in}, {n_out}, {scale}, {transform}, "
                 f"{NEAREST[attrs['nearest_mode']]}, {taps}, {float(attrs['cubic_coeff_a'])!r}, "
                 f"{int(attrs['exclude_outside'])}, ix{a}, w{a});"]
    coords = {a: f"ix{a}[t{a}]" if taps > 1 else f"ix{a}[0]" for a in axes}
    strides = [prod(x.type.shape[k + 1:]) for k in range(rank)]
    at = " + ".join(f"{coords.get(k, f'o{k}')} * {c_dim(s)}" for k, s in enumerate(strides)) or "0"
    if taps == 1 or not axes:
        body.append(f"y[o] = x[{at}];")
    else:
        body.append("double acc = 0;")
        body += [f"for (int t{a} = 0; t{a} < {taps}; t{a}++)" for a in axes]
        weight = " * ".join(f"w{a}[t{a}]" for a in axes)
        body.append(f"    acc += {weight} * (double){load_as(dt, 'x', at)};")
        body.append(f"y[o] = {store_as(dt, 'acc')};")
    element_kernel(gen, op, f"resize_{attrs['mode']}", y.type.shape, body, {"x": x}, {"y": y})


EMITTERS = {"resize": _resize}
