"""Testing tools: replay recorded histories, a time-skipping node, workflow properties.

Hypothesis strategies for generated workflow programs live in ``roost.testing.strategies``.
"""

from roost.testing._history_files import history_to_json, load_history, save_history
from roost.testing._properties import (
    CrashPoint,
    Outcome,
    assert_crash_equivalent,
    assert_replay_deterministic,
)
from roost.testing._test_node import TestNode, open_test_node
from roost.workflow._replayer import Replayer

__all__ = [
    "CrashPoint",
    "Outcome",
    "Replayer",
    "TestNode",
    "assert_crash_equivalent",
    "assert_replay_deterministic",
    "history_to_json",
    "load_history",
    "open_test_node",
    "save_history",
]
