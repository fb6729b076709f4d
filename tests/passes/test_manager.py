import logging

import numpy as np
import pytest

from cuvil.errors import VerificationError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.passes import (
    DCE,
    Canonicalize,
    Pass,
    PassManager,
    Pat,
    Pipeline,
    PipelineBuilder,
    Rule,
    apply_rules,
    default_pipeline,
    run_pipeline,
)


def tiny():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4,))], ["x"])
    x = b.args[0]
    b.ret(b.add(b.mul(x, b.full(1.0, (4,))), b.exp(x)))
    return m


class BreakIR(Pass):
    name = "break-ir"

    def run_on_operation(self, fn):
        fn.body.ops.pop(0)  # drop the first op: its users now read an undefined value
        return True


class ReplaceExpWithTanh(Pass):
    """A user pass written with the rewrite engine."""

    name = "exp-to-tanh"
    anchor = ("after", "canonicalize")

    def run_on_operation(self, fn):
        return apply_rules(fn, [Rule(Pat("exp", Pat.any("x")), lambda b, m: b.tanh(m.x))])


def test_failure_names_the_pass():
    with pytest.raises(VerificationError, match="pass 'break-ir' broke the IR"):
        PassManager().run(Pipeline("p", [BreakIR()]), tiny())


def test_timings_and_dumps(caplog):
    m = tiny()
    with caplog.at_level(logging.INFO, logger="cuvil.passes"):
        manager = run_pipeline(m, dump=["dce"])
    assert {"canonicalize", "fold-constants", "cse", "dce", "simplify"} <= set(manager.timings)
    assert [(n, w) for n, w, _ in manager.dumps][:2] == [("dce", "before"), ("dce", "after")]
    assert "IR after pass 'dce'" in caplog.text
    assert "dce" in manager.timing_report()


def test_dump_from_environment(monkeypatch, capfd):
    """Asked for by name, the dump shows without any logging set up (on stderr)."""
    monkeypatch.setenv("CUVIL_DUMP_IR", "canonicalize")
    manager = run_pipeline(tiny())
    assert {n for n, _, _ in manager.dumps} == {"canonicalize"}
    assert "IR after pass 'canonicalize'" in capfd.readouterr().err


def test_user_pass_is_placed_by_its_anchor_and_runs():
    pipeline = default_pipeline(passes=[ReplaceExpWithTanh()])
    assert [p.name for p in pipeline.passes][:2] == ["canonicalize", "exp-to-tanh"]
    m = tiny()
    PassManager().run(pipeline, m)
    names = [op.name for op in m.main.walk()]
    assert "tanh" in names and "exp" not in names and "mul" not in names


def test_pipelines_nest_and_print():
    inner = Pipeline("cleanup", [Canonicalize(), DCE()], until_fixpoint=True)
    assert str(PipelineBuilder("outer").add(inner).build()) == "outer(cleanup*(canonicalize, dce))"
    assert str(default_pipeline()).startswith("cpu-O2(canonicalize, cleanup*(")


def test_rewrite_binds_consistently_and_matches_commutative_operands():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4,)), TensorType("f32", (4,))], ["x", "y"])
    x, y = b.args
    b.ret(b.add(b.mul(x, x), b.mul(y, x)))
    square = Rule(Pat("mul", Pat.any("a"), Pat.any("a")), lambda b, m: b.emit("pow", m.a, b.full(2.0, (4,))))
    assert apply_rules(m.main, [square])
    assert [op.name for op in m.main.walk()].count("pow") == 1
    swapped = Rule(Pat("mul", Pat.any("a", where=lambda v, mod: v.name == "x"), Pat.any("b")),
                   lambda b, m: b.sub(m.a, m.b))
    assert apply_rules(m.main, [swapped])  # matches mul %y, %x with x first
    assert "mul" not in [op.name for op in m.main.walk()]
    x_in = np.arange(4, dtype=np.float32)

    assert interpret(m, [x_in, x_in])[0].tolist() == (x_in ** 2).tolist()
