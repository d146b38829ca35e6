"""``roost.coroutine``: concurrent code inside one process."""

from roost.actors._api import coroutine_spawn as spawn

__all__ = ["spawn"]
