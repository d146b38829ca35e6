"""Testing tools: replay recorded workflow histories against the current code."""

from roost.testing._replayer import Replayer, history_to_json, load_history, save_history

__all__ = ["Replayer", "history_to_json", "load_history", "save_history"]
