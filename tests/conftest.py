"""Hypothesis profiles: `ci` (default), `dev` (quick), `soak` (long; HYPOTHESIS_PROFILE=soak);
and a summary of each test layer's wall time at the end of a run."""

import os

import pytest
from hypothesis import HealthCheck, settings

_relaxed = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=_relaxed)
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=_relaxed)
settings.register_profile(
    "soak",
    max_examples=2000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=_relaxed,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# -- test time is a budget: each layer's wall time, printed at the end of every run --------
# (docs/design.md, "Test layers and their time": the table there comes from this summary
# of a CI run.) A layer is the folder under tests/ a test lives in.

_layer_seconds: dict[str, float] = {}
_layer_tests: dict[str, int] = {}


def _layer(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    layer = _layer(report.nodeid)
    _layer_seconds[layer] = _layer_seconds.get(layer, 0.0) + report.duration
    if report.when == "call":
        _layer_tests[layer] = _layer_tests.get(layer, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _layer_seconds:
        return
    terminalreporter.section("wall time per test layer")
    total = sum(_layer_seconds.values())
    for layer, seconds in sorted(_layer_seconds.items(), key=lambda kv: -kv[1]):
        tests = _layer_tests.get(layer, 0)
        terminalreporter.write_line(f"{layer:<12} {tests:>5} tests {seconds:>8.1f} s")
    count = sum(_layer_tests.values())
    terminalreporter.write_line(f"{'all':<12} {count:>5} tests {total:>8.1f} s")
