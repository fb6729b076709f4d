"""compile_module's verification policy: per pass in tests and debug mode, off by default elsewhere."""
import logging

import pytest

from cuvil.compiler import verify_passes


@pytest.mark.parametrize("flag, level, expected", [
    ("1", logging.WARNING, True), ("", logging.DEBUG, True), ("0", logging.DEBUG, False), ("", logging.WARNING, False),
])
def test_verify_after_every_pass_in_tests_and_debug_mode(monkeypatch, flag, level, expected):
    monkeypatch.setenv("CUVIL_VERIFY", flag)
    logger = logging.getLogger("cuvil")
    old = logger.level
    logger.setLevel(level)
    try:
        assert verify_passes() is expected
    finally:
        logger.setLevel(old)
