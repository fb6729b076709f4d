"""What the wasm32 tests need: the ziglang toolchain, wasmtime and Node.js. Outside CI a missing one skips its
tests; under CI=true it fails them (.ci/run installs all three)."""
import importlib.util
import os
import shutil

import pytest

IN_CI = os.environ.get("CI") == "true"


def require(tool: str) -> None:
    """Skip (or, in CI, fail) when `tool` is missing: "ziglang", "wasmtime" (Python packages), "node", "chromium"."""
    found = shutil.which(tool) if tool in ("node", "chromium", "chromedriver") else importlib.util.find_spec(tool)
    if found:
        return
    if IN_CI:
        pytest.fail(f"{tool} is missing, and CI must run every wasm32 test (.ci/run installs it)")
    pytest.skip(f"{tool} is not installed")
