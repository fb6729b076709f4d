"""Fingerprints: stable across names, numbering and construction route; sensitive to any change."""
import numpy as np

from cuvil.ir import Builder, Location, Module, TensorType, sym
from cuvil.ir.fingerprint import fingerprint
from cuvil.ir.parser import parse_module
from cuvil.ir.printer import print_module

from .programs import control_flow_program


def small(weight=None, attr_alpha=0.1, n_name="n", arg_name="x", const_name="w", loc=None, dim=4):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym(n_name), dim))], [arg_name])
    w = b.constant(np.arange(dim, dtype=np.float32) if weight is None else weight, const_name)
    del w
    b.ret(b.leaky_relu(b.exp(b.args[0]), alpha=attr_alpha, loc=loc))
    return m


def test_stable_under_names_locations_and_reparse():
    base = fingerprint(small())
    assert fingerprint(small(arg_name="input", const_name="weight_0")) == base
    assert fingerprint(small(loc=Location("other.py", 99))) == base
    assert fingerprint(parse_module(print_module(small()))) == base
    assert fingerprint(control_flow_program()) == fingerprint(parse_module(print_module(control_flow_program())))


def test_same_program_built_two_ways():
    m1 = Module()
    b = Builder.new_function(m1, "main", [TensorType("f32", (3,))], ["x"])
    b.ret(b.relu(b.exp(b.args[0])))
    m2 = Module()
    b = Builder.new_function(m2, "main", [TensorType("f32", (3,))], ["y"])
    x = b.args[0]
    e = b.emit("exp", x)
    b.ret(b.make_op("relu", [e], {}).result)
    assert fingerprint(m1) == fingerprint(m2)


def test_sensitive_to_every_change():
    base = fingerprint(small())
    changed = [
        small(attr_alpha=0.2),
        small(dim=5),
        small(n_name="batch"),
        small(weight=np.array([0, 1, 2, 3.0001], np.float32)),
        small(weight=np.arange(4, dtype=np.float64)),
        control_flow_program(),
        control_flow_program(weight_seed=1),
    ]
    prints = {fingerprint(m) for m in changed}
    assert base not in prints and len(prints) == len(changed)


def test_one_flipped_constant_bit_changes_it():
    w = np.arange(4, dtype=np.float32)
    flipped = w.copy()
    flipped.view(np.uint32)[2] ^= 1
    assert fingerprint(small(weight=w)) != fingerprint(small(weight=flipped))


def test_constants_are_hashed_in_place_not_copied():
    """A model's largest weight was copied twice to be hashed (bytes, then prefix + bytes): 2x its size at peak."""
    import tracemalloc

    weight = np.ones(1 << 22, np.float32)  # 16 MiB
    module = small(weight=weight, dim=weight.size)
    tracemalloc.start()
    try:
        fingerprint(module)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < weight.nbytes // 8


def test_a_constant_counts_by_its_dtype_shape_and_bytes():
    """The digest of a constant is SHA-256 over dtype, shape and raw bytes: fingerprints made before stay valid."""
    import hashlib

    from cuvil.ir.fingerprint import _array_digest

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert _array_digest(a) == hashlib.sha256(b"<f4(2, 3)" + a.tobytes()).hexdigest()
    assert _array_digest(a.T) == hashlib.sha256(b"<f4(3, 2)" + a.T.copy().tobytes()).hexdigest()
