"""Every code block of README.md and docs/ in Python runs as written (```python), except (```py) code of other
frameworks kept for comparison (TVM's calls in docs/migrating-from-tvm.md) and fragments that need what a test
machine lacks (a cluster, S3), which say so on their first line, with the test that runs the same calls."""
import os
import pathlib
import re
import runpy

import pytest

ROOT = pathlib.Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = [(path.name, i, block) for path in DOCS
            for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S))]
FOREIGN = [(path.name, block) for path in DOCS for block in re.findall(r"```py\n(.*?)```", path.read_text(), re.S)]


@pytest.mark.parametrize("name, index, code", EXAMPLES, ids=[f"{n}-{i}" for n, i, _ in EXAMPLES])
def test_doc_example_runs(name, index, code, monkeypatch, tmp_path):
    monkeypatch.setenv("CUVIL_OPT_LEVEL", os.environ.get("CUVIL_OPT_LEVEL", "1"))
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    path = tmp_path / f"{pathlib.Path(name).stem}_{index}.py"  # a real file: @cuvil.jit reads its source
    path.write_text(code)
    runpy.run_path(str(path), run_name="__main__")


@pytest.mark.parametrize("name, code", FOREIGN, ids=[f"{n}-foreign-{i}" for i, (n, _) in enumerate(FOREIGN)])
def test_unrun_blocks_are_other_frameworks(name, code):
    foreign = "tvm" in code and "cuvil" not in code
    assert foreign or code.startswith("# not run by the tests"), \
        f"{name}: a ```py block that is Cuvil code must be ```python and run, or say on its first line why not"
