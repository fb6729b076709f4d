"""The public surface: lazy imports, inspect_ir, logging, custom ops, the demo command."""
import logging
import subprocess
import sys

import numpy as np
import pytest

import cuvil
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.ir.parser import parse_module


def test_import_loads_no_framework():
    code = "import cuvil, sys; print([m for m in ('torch', 'jax', 'onnx', 'onnxruntime') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _module(weights=np.arange(32, dtype=np.float32)):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 32))], ["x"])
    b.ret(b.mul(b.args[0], b.broadcast_to(b.constant(weights, "w"), shape=(sym("n"), 32))))
    return m


def test_inspect_ir_elides_large_constants_unless_asked():
    m = _module()
    assert "elided" in cuvil.inspect_ir(m)
    full = cuvil.inspect_ir(m, elide_constants=False)
    assert parse_module(full) is not None and "elided" not in full

    class Compiled:
        module = m
    assert cuvil.inspect_ir(Compiled()) == cuvil.inspect_ir(m)
    with pytest.raises(TypeError, match="Module"):
        cuvil.inspect_ir(42)


def test_set_log_level():
    cuvil.set_log_level(cuvil.LogLevel.DEBUG)
    assert logging.getLogger("cuvil").level == logging.DEBUG
    cuvil.set_log_level("warning")
    assert logging.getLogger("cuvil").level == logging.WARNING


def test_custom_op_joins_the_registry_and_interpreter():
    cuvil.register_op("test_square_plus_one", shape=cuvil.ops.same_as_operand, traits={"elementwise"},
                      reference=lambda xs, a: xs[0] * xs[0] + 1, replace=True)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (3,))], ["x"])
    b.ret(b.test_square_plus_one(b.args[0]))
    text = cuvil.inspect_ir(m)
    assert "test_square_plus_one %x" in text
    assert cuvil.interpret(parse_module(text), [np.array([1, 2, 3], np.float32)])[0].tolist() == [2, 5, 10]
    with pytest.raises(ValueError, match="already registered"):
        cuvil.register_op("test_square_plus_one", shape=cuvil.ops.same_as_operand)


def test_demo_command_runs():
    from cuvil.cli import main

    assert main(["demo", "--batch", "2", "--repeat", "2"]) == 0
