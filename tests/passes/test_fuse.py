import numpy as np

from cuvil.backends.cpu.loops import LOOP_OPS, REDUCE_OPS
from cuvil.passes import FuseOps

from .helpers import expect, run_passes

FUSE = FuseOps(LOOP_OPS, REDUCE_OPS)
X = [np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4), np.arange(4, dtype=np.float32)]


def test_elementwise_chain_with_broadcast_becomes_one_kernel():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4], %b: f32[4]) -> (f32[2,4]) {
            %0:f32[2,4] = broadcast_to %b {shape = [2, 4]}
            %1:f32[2,4] = add %x, %0
            %2:f32[2,4] = relu %1
            return %2
          }
        }""", FUSE, inputs=X)
    assert got == expect("""
        %0:f32[2,4] = fused %b, %x {kind = "loop", name = "broadcast_to_add_relu"} {
        ^(%1: f32[4], %2: f32[2,4]):
          %3:f32[2,4] = broadcast_to %1 {shape = [2, 4]}
          %4:f32[2,4] = add %2, %3
          %5:f32[2,4] = relu %4
          yield %5
        }
        return %0""")


def test_reduction_takes_prologue_and_epilogue():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4], %b: f32[4]) -> (f32[2,1]) {
            %0:f32[2,4] = exp %x
            %1:f32[2,1] = reduce_sum %0 {axes = [1], keepdims = true}
            %2:f32[2,1] = full {value = 0.25, shape = [2, 1], dtype = f32}
            %3:f32[2,1] = mul %1, %2
            return %3
          }
        }""", FUSE, inputs=X)
    assert got.count("= fused") == 1 and 'kind = "reduce"' in got


def test_value_used_twice_is_materialised_once():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4], %b: f32[4]) -> (f32[2,4], f32[2,4]) {
            %0:f32[2,4] = exp %x
            %1:f32[2,4] = relu %0
            %2:f32[2,4] = tanh %0
            return %1, %2
          }
        }""", FUSE, inputs=X)
    assert got.count("exp ") == 1 and got.count("= fused") == 3


def test_shared_broadcast_is_copied_into_each_loop_kernel():
    got = run_passes("""
        module {
          func @main(%x: f32[2,4], %b: f32[4]) -> (f32[2,4], f32[2,4], f32[2,4]) {
            %0:f32[2,4] = broadcast_to %b {shape = [2, 4]}
            %1:f32[2,4] = exp %x
            %2:f32[2,4] = add %1, %0
            %3:f32[2,4] = mul %x, %0
            return %2, %3, %0
          }
        }""", FUSE, inputs=X)
    assert got.count("= fused") == 3 and got.count("broadcast_to %") == 3  # its own kernel (returned) + 2 copies
    assert 'name = "exp_broadcast_to_add"' in got and 'name = "broadcast_to_mul"' in got


def test_broadcast_read_twice_by_one_concat_is_fused_into_it():
    """DeiT's concat(cls, dist, patches) with both tokens zero-initialised: CSE leaves one broadcast read twice
    by the concat. It joins the concat's kernel; no copy is left over as a kernel with no outputs."""
    got = run_passes("""
        module {
          func @main(%x: f32[2,4], %b: f32[4]) -> (f32[2,12]) {
            %0:f32[2,4] = broadcast_to %b {shape = [2, 4]}
            %1:f32[2,12] = concat %0, %0, %x {axis = 1}
            return %1
          }
        }""", FUSE, inputs=X)
    assert got.count("= fused") == 1 and got.count("fused") == 1 and got.count("broadcast_to %") == 1


def test_shared_broadcast_read_twice_by_one_op_keeps_a_user():
    """`div %0, %0` reads the broadcast twice: it gets one copy, not two, and no group is left without outputs."""
    got = run_passes("""
        module {
          func @main(%x: f32[2,4], %b: f32[4]) -> (f32[2,4], f32[2,4]) {
            %0:f32[2,4] = broadcast_to %b {shape = [2, 4]}
            %1:f32[2,4] = div %0, %0
            %2:f32[2,4] = mul %x, %0
            return %1, %2
          }
        }""", FUSE, inputs=X)
    assert got.count("= fused") == 2 and got.count("broadcast_to %") == 2 and "yield\n" not in got


def test_reduction_result_is_not_reread_in_its_own_loop():
    """softmax's x - max(x) needs max over the row first: two groups, not one."""
    got = run_passes("""
        module {
          func @main(%x: f32[2,4], %b: f32[4]) -> (f32[2,4]) {
            %0:f32[2,1] = reduce_max %x {axes = [1], keepdims = true}
            %1:f32[2,4] = broadcast_to %0 {shape = [2, 4]}
            %2:f32[2,4] = sub %x, %1
            return %2
          }
        }""", FUSE, inputs=X)
    assert got.count("= fused") == 2


def test_producer_used_before_the_group_root_is_not_pulled_in():
    """%0 feeds %1 (outside any group: a matmul) which feeds the group: fusing %0 would make a cycle."""
    got = run_passes("""
        module {
          func @main(%x: f32[2,4], %b: f32[4]) -> (f32[2,2]) {
            %0:f32[2,4] = exp %x
            %1:f32[4,2] = transpose %0 {perm = [1, 0]}
            %2:f32[2,2] = matmul %0, %1
            %3:f32[2,2] = relu %2
            return %3
          }
        }""", FUSE, inputs=X)
    assert got.index("matmul") < got.rindex("relu")


def test_gemm_takes_an_activation_after_a_view_that_adds_a_unit_axis():
    """GPT-2's Gemm [rows, N] + bias, viewed as [1, rows, N], then its gelu: one GEMM with the gelu epilogue."""
    from cuvil.passes import FuseLibraryEpilogue

    rng = np.random.default_rng(0)
    got = run_passes("""
        module {
          func @main(%x: f32[3,5], %w: f32[5,7], %b: f32[7]) -> (f32[1,3,7]) {
            %0:f32[3,7] = matmul %x, %w
            %1:f32[3,7] = broadcast_to %b {shape = [3, 7]}
            %2:f32[3,7] = add %0, %1
            %3:f32[1,3,7] = reshape %2 {shape = [1, 3, 7]}
            %4:f32[1,3,7] = gelu %3 {approximate = "tanh"}
            return %4
          }
        }""", FuseLibraryEpilogue(), inputs=[rng.standard_normal(s).astype(np.float32) for s in ((3, 5), (5, 7), (7,))])
    assert got.count("fused") == 1 and got.index("fused") < got.index("reshape") < got.index("gelu") < \
        got.index("yield")


def test_a_view_that_regroups_rows_keeps_the_activation_out_of_the_gemm():
    from cuvil.passes import FuseLibraryEpilogue

    got = run_passes("""
        module {
          func @main(%x: f32[4,5], %w: f32[5,7]) -> (f32[2,2,7]) {
            %0:f32[4,7] = matmul %x, %w
            %1:f32[2,2,7] = reshape %0 {shape = [2, 2, 7]}
            %2:f32[2,2,7] = relu %1
            return %2
          }
        }""", FuseLibraryEpilogue())
    assert "fused" not in got
