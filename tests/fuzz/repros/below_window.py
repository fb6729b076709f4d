"""Repro of the known window-check bug the fuzzer finds (fixed on another branch; the fuzz suite counts it as
`known-window` in mutants and xfails test_sizes_below_a_window_are_refused until then).

A Conv or pool over symbolic H and W, called with H, W smaller than its window: ONNX Runtime refuses the call;
the interpreter raises NumPy's bare ValueError ("window shape cannot be larger than input array shape") and the
compiled function returns an empty [1, 2, 0, 0] result instead of a ShapeError. Random graphs below a window
also crash compiled code (`python -m tests.fuzz.worker graph seed=1 index=24 below=1`).

Run: `python -m tests.fuzz.repros.below_window` (prints one line per op and path)."""
import numpy as np
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import cuvil

N = helper.make_node


def _model(node, w=None):
    inits = [numpy_helper.from_array(w, "w")] if w is not None else []
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, ["n", 2, "h", "w"])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = {"conv": _model(N("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3]), np.ones((2, 2, 3, 3), np.float32)),
         "depthwise": _model(N("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], group=2),
                             np.ones((2, 1, 3, 3), np.float32)),
         "maxpool": _model(N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3])),
         "avgpool": _model(N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3]))}


def main() -> None:
    small = np.ones((1, 2, 2, 2), np.float32)
    for name, proto in CASES.items():
        model = cuvil.load_onnx(proto)
        for path, fn in (("interpreted", model), ("compiled", model.optimize())):
            try:
                print(name, path, "returns", [o.shape for o in fn(small)], "(expected a ShapeError)")
            except cuvil.CuvilError as e:
                print(name, path, "refuses cleanly:", e)
            except Exception as e:  # noqa: BLE001 - the bug: a bare exception
                print(name, path, "raises", type(e).__name__, e)


if __name__ == "__main__":
    main()
