import numpy as np

from cuvil.ir import Op, sym
from cuvil.ir.parser import parse_module
from cuvil.passes.memory import buffer_bytes, plan_memory


def _plan(text):
    m = parse_module(text)
    fn = m.main
    plan = plan_memory(fn, lambda v: isinstance(v.owner, Op), lambda v: None)  # every op result gets a buffer
    return m, fn, plan


CHAIN = """
module {
  func @main(%x: f32[256]) -> (f32[256]) {
    %0:f32[256] = exp %x
    %1:f32[256] = tanh %0
    %2:f32[256] = relu %1
    %3:f32[256] = neg %2
    return %3
  }
}"""


def test_chain_reuses_two_slots():
    m, fn, plan = _plan(CHAIN)
    assert len(plan.slots) == 2
    assert plan.arena_bytes() == 2 * 1024


def test_live_values_never_share_a_slot():
    m, fn, plan = _plan("""
module {
  func @main(%x: f32[16]) -> (f32[16]) {
    %0:f32[16] = exp %x
    %1:f32[16] = tanh %x
    %2:f32[16] = add %0, %1
    %3:f32[16] = relu %2
    %4:f32[16] = mul %3, %0
    return %4
  }
}""")
    ops = fn.body.ops
    slot = {i: plan.slot_of[id(op.results[0])] for i, op in enumerate(ops[:-1])}
    assert slot[0] != slot[1] and slot[0] != slot[2] and slot[0] != slot[3]  # %0 lives until %4


def test_symbolic_sizes_get_symbolic_slots():
    m, fn, plan = _plan(CHAIN.replace("256", "n"))
    n = sym("n")
    assert all(sizes == [buffer_bytes(fn.body.ops[0].results[0])] for sizes in plan.slots)
    assert plan.slots[0][0] == (4 * n + 63) // 64 * 64
    assert plan.arena_bytes({"n": 100}) == 2 * 448


def test_values_used_in_a_loop_live_until_it_ends():
    m, fn, plan = _plan("""
module {
  func @main(%x: f32[8]) -> (f32[8]) {
    %0:f32[8] = exp %x
    %1:i64[] = full {value = 0.0, shape = [], dtype = i64}
    %2:i64[], %3:f32[8] = while %1, %x {
    ^(%4: i64[], %5: f32[8]):
      %6:i64[] = full {value = 3.0, shape = [], dtype = i64}
      %7:bool[] = lt %4, %6
      yield %7
    } {
    ^(%8: i64[], %9: f32[8]):
      %10:f32[8] = add %9, %0
      %11:i64[] = full {value = 1.0, shape = [], dtype = i64}
      %12:i64[] = add %8, %11
      yield %12, %10
    }
    %13:f32[8] = relu %3
    return %13
  }
}""")
    exp_slot = plan.slot_of[id(fn.body.ops[0].results[0])]
    body = fn.body.ops[2].regions[1]
    assert plan.slot_of[id(body.ops[0].results[0])] != exp_slot
    assert np.isfinite(plan.arena_bytes())
