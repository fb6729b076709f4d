"""A fast subset of the OpInfo sweep (bench/opinfo.py): ops that once gave wrong values or internal errors, and a
spread of families, compiled for the CPU; none may answer wrong or fail with a non-Cuvil error."""
from __future__ import annotations

import pytest

pytest.importorskip("expecttest")
torch = pytest.importorskip("torch")

from bench import opinfo  # noqa: E402

SUBSET = ("nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_avg_pool3d", "norm", "linalg.vector_norm",
          "bfloat16", "logsumexp", "amax", "nn.functional.batch_norm", "nn.functional.instance_norm",
          "nn.functional.scaled_dot_product_attention", "add", "softmax", "cumsum", "where", "nn.functional.conv2d",
          "linalg.solve", "linalg.det", "linalg.lu", "nn.functional.max_pool2d", "scatter_reduce", "linalg.eigh",
          "linalg.qr", "linalg.pinv", "special.chebyshev_polynomial_u", "special.bessel_y0", "special.airy_ai",
          "cummax", "logcumsumexp", "index_reduce", "nanmedian")


def test_subset_has_no_wrong_values_or_internal_errors():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [o for o in op_db if o.name in SUBSET]
    assert {o.name for o in ops} == set(SUBSET)
    results = opinfo.sweep(ops, n=2, target="cpu", verbose=False)
    bad = {name: r for name, r in results.items() if r[0] in ("wrong", "internal")}
    assert not bad, bad
    assert sum(r[0] == "pass" for r in results.values()) >= len(results) // 2


def test_eigenvectors_are_compared_as_the_sample_defines():
    """eigh's vectors are unique up to sign: the raw outputs differ from LAPACK's, the sample's output_process_fn_grad
    (eigenvalues, |vectors|) agrees, and the pass says so."""
    from torch.testing._internal.common_methods_invocations import op_db

    eigh = next(o for o in op_db if o.name == "linalg.eigh")
    assert opinfo.op_outcome(eigh, 1, target="interpreter") == ("pass", opinfo.SIGN_FREE)
