"""Shared test configuration: hypothesis profiles (CI loads a bounded, derandomized one)."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=30,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


def pytest_addoption(parser):
    parser.addoption(
        "--workflow-host",
        choices=["local", "temporal", "both"],
        default="both",
        help="the workflow hosts of test_both_hosts.py (both: the embedded one and Temporal, "
        "when the roost[temporal] extra is installed)",
    )


def _utf8_safe(value):
    """``value`` with every lone surrogate in its strings written as a backslash escape."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {k: _utf8_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_utf8_safe(v) for v in value)
    return value


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(config, report):
    # pytest-xdist sends each report (captured logs included) to the controller as UTF-8:
    # the hostile-value tests log and raise strings with lone surrogates, which would
    # stop the worker that ran them.
    return _utf8_safe((yield))
