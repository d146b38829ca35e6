"""``roost.funcs``: call activities (durable inside workflows, direct elsewhere)."""

from roost.actors._api import Executor
from roost.actors._api import funcs_call as call
from roost.actors._api import funcs_new as new

__all__ = ["Executor", "call", "new"]
