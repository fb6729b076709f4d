"""Pass tests compare IR text before and after, and check outputs against the reference interpreter."""
import textwrap

import numpy as np

from cuvil.interpreter import interpret
from cuvil.ir.parser import parse_module
from cuvil.ir.printer import print_module
from cuvil.passes import PassManager, Pipeline


def body(module) -> str:
    """The printed ops of @main without the module/func wrapper, dedented."""
    lines = print_module(module).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("func @main"))
    end = len(lines) - 2
    return textwrap.dedent("\n".join(lines[start + 1:end])).strip()


def run_passes(text: str, *passes, inputs=None) -> str:
    """Parse `text`, run `passes` (verifying after each), check outputs are unchanged; return the new body."""
    m = parse_module(textwrap.dedent(text))
    before = interpret(m, inputs) if inputs is not None else None
    PassManager(verify=True).run(Pipeline("test", passes), m)
    if inputs is not None:
        after = interpret(m, inputs)
        for a, b in zip(before, after):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    return body(m)


def expect(text: str) -> str:
    return textwrap.dedent(text).strip()
