"""``roost.funcs``: call activities (durable inside workflows, direct elsewhere)."""

from roost.actors._api import funcs_call as call

__all__ = ["call"]
