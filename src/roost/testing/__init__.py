"""Testing tools: replay recorded histories, and a time-skipping node for tests."""

from roost.testing._replayer import Replayer, history_to_json, load_history, save_history
from roost.testing._test_node import TestNode, open_test_node

__all__ = [
    "Replayer",
    "TestNode",
    "history_to_json",
    "load_history",
    "open_test_node",
    "save_history",
]
