"""Shared test configuration: hypothesis profiles (CI loads a bounded, derandomized one)."""

import os

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
