"""The Python examples in the docs run as written (```python blocks; ```py marks a fragment)."""
import os
import pathlib
import re
import runpy

import pytest

ROOT = pathlib.Path(__file__).parents[1]
EXAMPLES = [(path.name, i, block) for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
            for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S))]


@pytest.mark.parametrize("name, index, code", EXAMPLES, ids=[f"{n}-{i}" for n, i, _ in EXAMPLES])
def test_doc_example_runs(name, index, code, monkeypatch, tmp_path):
    monkeypatch.setenv("CUVIL_OPT_LEVEL", os.environ.get("CUVIL_OPT_LEVEL", "1"))
    path = tmp_path / f"{pathlib.Path(name).stem}_{index}.py"  # a real file: @cuvil.jit reads its source
    path.write_text(code)
    runpy.run_path(str(path), run_name="__main__")
