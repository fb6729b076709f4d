"""The demo page (examples/web/) end to end in headless Chromium driven by selenium: a wasm32 `.cuv` of a small
image classifier and a PNG given to the page's file inputs; the scores it shows equal the Python result."""
import importlib.util
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import cuvil

from . import models
from .conftest import require

WEB = Path(__file__).resolve().parents[3] / "examples" / "web"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"web_{name}", WEB / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def browser():
    for tool in ("chromium", "chromedriver", "selenium", "ziglang", "wasmtime"):
        require(tool)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page():
    """The demo page served on a free port; yields its URL."""
    httpd = _module("serve").server(0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    httpd.shutdown()


def _give(browser, url: str, model: Path, image: Path):
    """Open the page, hand it the two files, wait until it is done or failed; returns its status element."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    browser.find_element(By.ID, "model").send_keys(str(model))
    browser.find_element(By.ID, "image").send_keys(str(image))
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, 120).until(lambda _: status.get_attribute("data-state") in ("done", "failed"))
    return status


def test_the_page_shows_the_python_result(browser, page, tmp_path):
    import torch

    from cuvil.runtime import wasm

    demo = _module("make_demo").make(tmp_path)
    status = _give(browser, page, demo["model"], demo["image"])
    assert status.get_attribute("data-state") == "done", status.text
    shown = json.loads(browser.find_element("id", "result").get_attribute("textContent"))
    x = demo["input"]
    in_python = wasm.load(demo["model"])(x)[0]  # the same module under wasmtime: the same bits
    np.testing.assert_array_equal(np.float32(shown["scores"]), in_python)
    native = demo["compiled"](torch.from_numpy(x)).numpy()[0]
    np.testing.assert_allclose(np.float32(shown["scores"]), native, rtol=1e-4, atol=1e-6)
    assert shown["top"] == list(np.argsort(-in_python, kind="stable")[:5])
    assert shown["ms"] > 0 and browser.find_element("id", "latency").text.startswith("latency: ")


def test_the_page_says_why_a_model_is_not_an_image_classifier(browser, page, tmp_path):
    model = tmp_path / "vector.cuv"
    cuvil.export(cuvil.jit(models.grow), model, "wasm32", example_inputs=(np.ones(4, np.float32),))
    _module("make_demo").write_png(tmp_path / "image.png", np.zeros((8, 8, 3), np.uint8))
    status = _give(browser, page, model, tmp_path / "image.png")
    assert status.get_attribute("data-state") == "failed" and "not an image" in status.text
