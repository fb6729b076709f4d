"""Prints each fuzz test's summary (seed, case count, outcomes by class) at the end of the run, also under
pytest-xdist: the tests record it as a user property, which travels with their reports. The hooks are imported
by tests/conftest.py, which the xdist controller loads too."""

_SUMMARIES: list = []


def pytest_runtest_logreport(report):
    if report.when == "call":
        _SUMMARIES.extend(v for k, v in report.user_properties if k == "fuzz")


def pytest_terminal_summary(terminalreporter):
    if _SUMMARIES:
        terminalreporter.section("fuzz summary")
        for line in _SUMMARIES:
            terminalreporter.write_line(line)
