import numpy as np
import pytest

from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.ir.parser import parse_module
from cuvil.passes import CSE, DCE, Canonicalize, FoldConstants, PassManager, Pipeline, Simplify

from .helpers import expect, run_passes

X = [np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)]


def test_algebraic_identities():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4]) -> (f32[2,4]) {
            %0:f32[2,4] = full {value = 1.0, shape = [2, 4], dtype = f32}
            %1:f32[2,4] = mul %0, %x
            %2:f32[2,4] = full {value = 0.0, shape = [2, 4], dtype = f32}
            %3:f32[2,4] = add %1, %2
            %4:f32[2,4] = neg %3
            %5:f32[2,4] = neg %4
            return %5
          }
        }""", Canonicalize(), Simplify(), DCE(), inputs=X)
    assert got == "return %x"


def test_constants_are_moved_second():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4]) -> (f32[2,4]) {
            %0:f32[2,4] = full {value = 3.0, shape = [2, 4], dtype = f32}
            %1:f32[2,4] = mul %0, %x
            return %1
          }
        }""", Canonicalize(), inputs=X)
    assert got.splitlines()[1].strip() == "%1:f32[2,4] = mul %x, %0"


def test_cse_merges_equal_ops_and_dce_drops_dead_ones():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4]) -> (f32[2,4]) {
            %0:f32[2,4] = exp %x
            %1:f32[2,4] = exp %x
            %2:f32[2,4] = tanh %x
            %3:f32[2,4] = add %0, %1
            return %3
          }
        }""", CSE(), DCE(), inputs=X)
    assert got == expect("""
        %0:f32[2,4] = exp %x
        %1:f32[2,4] = add %0, %0
        return %1""")


def test_cse_does_not_reach_into_sibling_regions():
    text = """
        module {
          func @main(%x: f32[2,4], %p: bool[]) -> (f32[2,4]) {
            %0:f32[2,4] = cond %p {
              %1:f32[2,4] = exp %x
              yield %1
            } {
              %2:f32[2,4] = exp %x
              yield %2
            }
            return %0
          }
        }"""
    got = run_passes(text, CSE(), inputs=X + [np.bool_(True)])
    assert got.count("exp %x") == 2


def test_fold_constants_through_references():
    got = run_passes("""
        module {
          const @a : f32[2] = dense<"AACAPwAAAEA=">
          func @main(%x: f32[2]) -> (f32[2]) {
            %0:f32[2] = constant {name = "a"}
            %1:f32[2] = exp %0
            %2:f32[2] = add %x, %1
            return %2
          }
        }""", FoldConstants(), DCE(), inputs=[np.ones(2, np.float32)])
    assert "exp" not in got and 'constant {name = "folded"}' in got


def test_splat_results_fold_to_full():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4]) -> (f32[2,4]) {
            %0:f32[2,4] = full {value = 2.0, shape = [2, 4], dtype = f32}
            %1:f32[2,4] = mul %0, %0
            %2:f32[2,4] = add %x, %1
            return %2
          }
        }""", FoldConstants(), DCE(), inputs=X)
    assert got.splitlines()[0] == "%0:f32[2,4] = full {value = 4.0, shape = [2, 4], dtype = f32}"


def test_dce_removes_unused_constants():
    m = parse_module("""
        module {
          const @a : f32[2] = dense<"AACAPwAAAEA=">
          func @main(%x: f32[2]) -> (f32[2]) {
            %0:f32[2] = constant {name = "a"}
            return %x
          }
        }""")
    assert DCE().run_on_operation(m) and m.constants == {}


def test_powers_and_max_with_zero():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4]) -> (f32[2,4]) {
            %0:f32[2,4] = full {value = 3.0, shape = [2, 4], dtype = f32}
            %1:f32[2,4] = pow %x, %0
            %2:f32[2,4] = full {value = 0.0, shape = [2, 4], dtype = f32}
            %3:f32[2,4] = max %1, %2
            return %3
          }
        }""", Simplify(), DCE(), inputs=X)
    assert "pow" not in got and "max" not in got and got.count("mul") == 2 and "relu" in got


def test_broadcasts_are_not_materialised():
    got = run_passes("""
        module {
          const @b : f32[4] = dense<"AACAPwAAAEAAAEBAAACAQA==">
          func @main(%x: f32[1,4]) -> (f32[1,4]) {
            %0:f32[4] = constant {name = "b"}
            %1:f32[1,4] = broadcast_to %0 {shape = [1, 4]}
            %2:f32[1,4] = add %x, %1
            return %2
          }
        }""", FoldConstants(), DCE(), inputs=[np.ones((1, 4), np.float32)])
    assert "broadcast_to" in got


@pytest.mark.parametrize("transform,nearest,sizes,repeats", [
    ("asymmetric", "floor", (1, 2, 10, 21), True), ("half_pixel", "round_prefer_floor", (1, 2, 15, 7), True),
    ("align_corners", "round_prefer_floor", (1, 2, 15, 14), False), ("asymmetric", "floor", (1, 2, 9, 14), False),
    ("asymmetric", "ceil", (1, 2, 10, 14), False)])
def test_nearest_resize_by_whole_factors_is_a_broadcast(transform, nearest, sizes, repeats):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 2, 5, 7))], ["x"])
    b.ret(b.resize(b.args[0], sizes=sizes, mode="nearest", coordinate_transformation_mode=transform,
                   nearest_mode=nearest))
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 7)).astype(np.float32)
    want = interpret(m, [x])[0]
    PassManager(verify=True).run(Pipeline("p", [Simplify(), DCE()]), m)
    names = [o.name for o in m.main.walk()]
    assert ("resize" not in names and "broadcast_to" in names) is repeats, names
    np.testing.assert_array_equal(interpret(m, [x])[0], want)
