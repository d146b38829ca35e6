"""``roost.ctx``: context values set with ``with_context``, inherited by children."""

from roost.actors._api import ctx_all as all  # noqa: A004 - API name
from roost.actors._api import ctx_get as get

__all__ = ["all", "get"]
