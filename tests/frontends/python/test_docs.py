"""Every Python example in docs/jit.md runs as printed."""
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "jit.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_doc_example_runs(code, tmp_path):
    path = tmp_path / "example.py"  # in a file: cuvil.jit reads the source of the functions it compiles
    path.write_text(code)
    exec(compile(code, str(path), "exec"), {"__name__": "example"})  # noqa: S102
