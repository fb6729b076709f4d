"""Shape rules of the nn ops on symbolic dimensions, the errors they raise, and the pooling size rule."""
import itertools
import math
import re

import pytest

from cuvil.errors import ShapeError
from cuvil.ir import Builder, Module
from cuvil.ir.types import parse_type
from cuvil.ops.nn import window_out


def emit(op: str, types, **attrs) -> list:
    b = Builder.new_function(Module(), "main", [parse_type(t) for t in types])
    out = b.emit(op, *b.args, **attrs)
    return [str(v.type) for v in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("op, types, attrs, want", [
    ("matmul", ["f32[n,s,64]", "f32[64,10]"], {}, "f32[n,s,10]"),
    ("matmul", ["f32[s,k]", "f32[b,k,4]"], {}, "f32[b,s,4]"),
    ("conv", ["f32[n,3,h,w]", "f32[8,3,3,3]"], {"strides": [2, 2], "pads": [1, 1, 1, 1]},
     "f32[n,8,(h-1)//2+1,(w-1)//2+1]"),
    ("conv", ["f32[n,4,l]", "f32[4,1,5]"], {"groups": 4, "dilations": [2]}, "f32[n,4,l-8]"),
    ("conv_transpose", ["f32[n,3,h,w]", "f32[3,4,3,3]"], {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                           "output_padding": [1, 1]}, "f32[n,4,2*h,2*w]"),
    ("max_pool", ["f32[n,3,h,w]"], {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     "f32[n,3,(h-1)//2+1,(w-1)//2+1]"),
    ("max_pool", ["f32[n,3,h,w]"], {"kernel": [2, 2], "strides": [3, 3], "ceil_mode": True},
     "f32[n,3,(h-1)//3+1,(w-1)//3+1]"),
    ("avg_pool", ["f32[n,3,h]"], {"kernel": [3], "strides": [2], "ceil_mode": True}, "f32[n,3,(h-2)//2+1]"),
    ("global_avg_pool", ["f32[n,3,h,w]"], {}, "f32[n,3,1,1]"),
    ("group_norm", ["f32[n,6,h,w]", "f32[6]", "f32[6]"], {"num_groups": 3}, "f32[n,6,h,w]"),
    ("resize", ["f32[n,3,h,w]"], {"sizes": ["n", 3, "2*h", "2*w"]}, "f32[n,3,2*h,2*w]"),
    ("einsum", ["f32[b,s,d]", "f32[d,e]"], {"equation": "...d,de"}, "f32[b,s,e]"),
    ("einsum", ["f32[b,1,d]", "f32[s,d]"], {"equation": "...d,...d->..."}, "f32[b,s]"),
])
def test_symbolic_result_types(op, types, attrs, want):
    assert emit(op, types, **attrs) == [want]


@pytest.mark.parametrize("op, types, attrs, message", [
    ("conv", ["f32[1,4,5,5]", "f32[2,3,3,3]"], {}, "'conv' weight has 3 input channels per group, x has 4"),
    ("conv", ["f32[1,4,5,5]", "f32[3,2,3,3]"], {"groups": 2}, "output channel count (3) is not divisible"),
    ("conv", ["f32[1,3,5,5]", "f32[2,3,3,3]", "f32[3]"], {}, "bias has 3 entries, the output has 2"),
    ("conv", ["f32[1,3,2,2]", "f32[2,3,3,3]"], {}, "'conv': the 3x3 window spans 3 rows but the padded input has 2"),
    ("conv", ["f32[1,3,5,5]", "f32[2,3,3,3]"], {"strides": [1, 1, 1]}, "strides needs 2 entries"),
    ("conv", ["f32[1,3,5,5]", "f32[2,3,3,3]"], {"pads": [1, -1, 0, 0]}, "pads must be >= 0"),
    ("conv", ["i32[1,3,5,5]", "i32[2,3,3,3]"], {}, "does not accept operand of element type i32"),
    ("conv", ["f32[1,3,5,5,5,5]", "f32[2,3,3,3,3,3]"], {}, "needs x of rank 3 to 5"),
    ("conv_transpose", ["f32[1,3,5,5]", "f32[4,2,3,3]"], {}, "weight has 4 input channels, x has 3"),
    ("conv_transpose", ["f32[1,3,5,5]", "f32[3,2,3,3]"], {"output_padding": [1, 1]}, "smaller than the stride"),
    ("matmul", ["f32[3]", "f32[3,2]"], {}, "rank 2 or more"),
    ("matmul", ["f32[2,3,4]", "f32[3,4,5]"], {}, "batch dim 0"),
    ("matmul", ["f32[2,2,3,4]", "f32[2,4,5]"], {}, "differ in rank"),
    ("matmul", ["f32[2,3]", "f32[4,2]"], {}, "contraction size"),
    ("max_pool", ["f32[1,3,5,5]"], {"kernel": [3]}, "kernel needs 2 sizes"),
    ("avg_pool", ["i8[1,3,5,5]"], {"kernel": [3, 3]}, "does not accept"),
    ("layer_norm", ["f32[2,3]", "f32[2]"], {}, "scale dim 0 and x dim 1"),
    ("softmax", ["f32[2,3]"], {"axis": 2}, "axis 2 is out of range"),
    ("batch_norm", ["f32[1,3,5]", "f32[3]", "f32[3]", "f32[4]", "f32[3]"], {}, "mean size"),
    ("group_norm", ["f32[1,6,2]", "f32[6]", "f32[6]"], {"num_groups": 4}, "divide the channel count"),
    ("group_norm", ["f32[1,c,2]", "f32[c]", "f32[c]"], {"num_groups": 2}, "static channel count"),
    ("resize", ["f32[2,3]"], {"sizes": [4]}, "one size per dim"),
    ("resize", ["i32[2,3]"], {"sizes": [4, 6], "mode": "linear"}, "needs a float x"),
    ("einsum", ["f32[2,3]"], {"equation": "ijk"}, "does not fit operand"),
    ("einsum", ["f32[2,3]", "f32[4,3]"], {"equation": "ij,ij"}, "label 'i'"),
    ("einsum", ["f32[2,3]"], {"equation": "ij->k"}, "names one no input has"),
    ("einsum", ["f32[2,3]"], {"equation": "i.j"}, "at most one '...'"),
    ("einsum", ["f32[2,3]"], {"equation": "ij,jk"}, "2 operand terms, got 1"),
    ("einsum", ["f32[5,2,3]"], {"equation": "...ij->ij"}, "must keep the '...' dims"),
])
def test_errors_name_the_problem(op, types, attrs, message):
    with pytest.raises(ShapeError, match=re.escape(message)):
        emit(op, types, **attrs)


def test_einsum_equation_normal_form():
    b = Builder.new_function(Module(), "main", [parse_type("f32[2,3]"), parse_type("f32[3,4]")])
    out = b.einsum(*b.args, equation="ij, jk")
    assert out.owner.attrs["equation"] == "ij,jk->ik"


def _torch_rule(n, k, s, d, pb, pe, ceil):
    """The PyTorch/ONNX pooling size rule, written as they state it."""
    span = d * (k - 1) + 1
    out = (math.ceil if ceil else math.floor)((n + pb + pe - span) / s) + 1
    return out - 1 if ceil and (out - 1) * s >= n + pb else out


def test_window_size_rule_matches_pytorch_and_stays_closed_form():
    for n, k, s, d, pb, pe, ceil in itertools.product(range(3, 12), (1, 2, 3), (1, 2, 3, 4), (1, 2), (0, 1, 2),
                                                       (0, 1, 2), (False, True)):
        if n + pb + pe >= d * (k - 1) + 1:
            assert window_out(n, k, s, d, pb, pe, ceil) == _torch_rule(n, k, s, d, pb, pe, ceil), (n, k, s, d, pb, pe)
