"""Testing tools: replay recorded workflow histories against the current code."""

from roost.testing._replayer import Replayer, load_history, save_history

__all__ = ["Replayer", "load_history", "save_history"]
