"""``roost.state``: durable key-value state per scope, with atomic update ops.

``await get(scope, key)``, ``set(scope, key, value)``, ``delete(scope, key)``,
``list(scope)`` and ``update(scope, key, ops)``; see docs/orchestration.md#state.
"""

from roost.queues._state import delete, get, list, set, update  # noqa: A004 - API names

__all__ = ["delete", "get", "list", "set", "update"]
