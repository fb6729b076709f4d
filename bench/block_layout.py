"""The block-layout pass on and off, against ONNX Runtime: `python -m bench.block_layout resnet|mnv2|mnv3|effb0
[rounds]`.

ResNet-18, MobileNetV2, MobileNetV3-small or EfficientNet-B0 (batch 1, 224x224, random weights) through Cuvil's
torch and ONNX routes with the `block-layout` pass on and off, the ONNX route also with the pass on but depthwise
convs left in the plain layout ("onnx-plaindw", the pass before `dwconv_nchwc`) and with squeeze-excite's means
read through an unblocking ("onnx-plainsum", the pass before `spatial_sum_nchwc`), and ONNX Runtime (all graph
optimisations, 2 intra-op threads), all timed interleaved in one process; prints medians and ratios to ONNX
Runtime. Run with CUVIL_ARTIFACT_CACHE=0 so that the pass switch is not answered from the artifact cache.
"""
import os
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch

import cuvil
from bench import workloads_extra as extra
from bench.workloads import MobileNetV2, ResNet18, vision_workload
from cuvil.passes import layout


def main(which: str = "resnet", rounds: int = 15) -> None:
    built = {"resnet": lambda: vision_workload(ResNet18), "mnv2": lambda: vision_workload(MobileNetV2),
             "mnv3": lambda: extra.cnn_workload(extra.MobileNetV3Small, 224),
             "effb0": lambda: extra.cnn_workload(extra.EfficientNetB0, 224)}[which]()
    model, (x,) = built.module, built.inputs
    path = os.path.join(tempfile.mkdtemp(prefix="cuvil-block-layout-"), f"{which}.onnx")
    torch.onnx.export(model, (x,), path, dynamo=False)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads, so.inter_op_num_threads = 2, 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    xn, name = x.numpy(), sess.get_inputs()[0].name
    fns = {"ort": lambda: sess.run(None, {name: xn})[0]}
    pass_on = layout.BlockLayout.run_on_operation
    for tag, on in (("off", False), ("on", True)):
        layout.BlockLayout.run_on_operation = pass_on if on else (lambda self, fn: False)
        t, o = cuvil.compile(model, (x,)), cuvil.load_onnx(path).optimize()
        fns[f"torch-{tag}"], fns[f"onnx-{tag}"] = (lambda t=t: t(x)), (lambda o=o: o(xn))
    layout.BlockLayout.run_on_operation = pass_on
    depthwise = layout.depthwise_conv
    layout.depthwise_conv = lambda op: False
    o = cuvil.load_onnx(path).optimize()
    fns["onnx-plaindw"] = lambda: o(xn)
    layout.depthwise_conv = depthwise
    spatial = layout._spatial_reduction
    layout._spatial_reduction = lambda op: False
    o_sum = cuvil.load_onnx(path).optimize()
    fns["onnx-plainsum"] = lambda: o_sum(xn)
    layout._spatial_reduction = spatial
    ref = fns["ort"]()
    for k, f in fns.items():
        out = f()
        out = out[0] if isinstance(out, (list, tuple)) else out
        print(f"{k:13s} max |diff| to ONNX Runtime {float(np.abs(np.asarray(out) - ref).max()):.2e}")
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    for k, v in med.items():
        print(f"{which} {k:13s} {v:7.2f} ms  ratio to ONNX Runtime {v / med['ort']:.2f}x")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main(sys.argv[1] if len(sys.argv) > 1 else "resnet", int(sys.argv[2]) if len(sys.argv) > 2 else 15)
