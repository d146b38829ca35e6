"""``roost.state``: durable key-value state with atomic update ops, on the node's LMDB store.

Values live in the store's ``state`` table under ``key(scope, key)``, encoded with the
project codec, so ``list(scope)`` is one prefix scan and a scope never sees another scope's
keys (``"order"`` is not a prefix of ``"orders"``: key parts are prefix-free). ``update``
reads, applies its ops (``roost.queues._state_ops``) and writes inside one write transaction,
so concurrent updates of one key serialise and an update that fails stores nothing.

Where state can be called: from a plain process (including the task attached by
``open_node``), from a queue step, and from an activity, including one a workflow runs (such
an activity has no current process; the activity worker binds the node with
``bind_node``). Inside a workflow, state calls raise Invalid: they are not replay-safe
there. Outside any node they raise InvalidState, like every other process call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import trio

from roost._errors import Error, ErrorKind, invalid, shown
from roost._text import check_text
from roost.actors._authorize import authorize_caller
from roost.actors._current import bound_node, current_any, maybe_current_process
from roost.queues._state_ops import apply_ops, parse_ops
from roost.storage import MAX_KEY_SIZE, Codec, Store, WriteTxn, key, unpack_key

if TYPE_CHECKING:
    from roost.actors._process import NodeOps

__all__ = ["delete", "get", "list", "set", "update"]

T = TypeVar("T")

TABLE: Final = "state"
_CODEC: Final = Codec()


def _store(what: str) -> tuple[NodeOps, Store]:
    proc = maybe_current_process()
    node: NodeOps | None
    if proc is None:
        node = bound_node()
        if node is None:
            node = current_any(what).node  # raises InvalidState: outside any process
    elif proc.workflow is not None:
        raise invalid(
            f"{what} is not available inside a workflow: state reads and writes are not "
            "replay-safe there; call it from an activity (funcs.call) or a queue step"
        )
    else:
        node = proc.node
    if node is None or node.store is None:
        raise Error(
            f"{what} needs a node with a store; this node has none",
            kind=ErrorKind.UNAVAILABLE,
            retryable=False,
        )
    return node, node.store


def _check_name(value: Any, name: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(
            f"{what}: the state {name} must be a non-empty str, got {type(value).__name__} "
            f"{shown(value)}",
            **{name: shown(value)},
        )
    return check_text(value, f"{what}: the state {name}")


def _row(scope: Any, name: Any, what: str) -> bytes:
    row = key(_check_name(scope, "scope", what), _check_name(name, "key", what))
    if len(row) > MAX_KEY_SIZE:
        raise invalid(
            f"{what}: scope {scope[:40]!r}... and key {name[:40]!r}... are too long together "
            f"({len(row)} bytes encoded; at most {MAX_KEY_SIZE}): use shorter names, e.g. "
            "an id or a hash",
            scope=scope[:80],
        )
    return row


async def _transact(node: NodeOps, store: Store, fn: Callable[[WriteTxn], T]) -> T:
    result: T = await node.transact(fn)
    return result


async def get(scope: str, key: str) -> Any:
    """Return the value stored under ``scope`` / ``key``, or None when there is none.

    Raises:
        roost.Error: Invalid for a bad scope or key, or inside a workflow; InvalidState
            outside a node.
    """
    what = "roost.state.get"
    authorize_caller("state.read", scope, key)
    _node, store = _store(what)
    row = _row(scope, key, what)
    await trio.lowlevel.checkpoint()
    with store.read() as txn:
        raw = txn.get(TABLE, row)
    return None if raw is None else _CODEC.decode(raw)


async def set(scope: str, key: str, value: Any) -> None:  # noqa: A001 - API name
    """Store ``value`` under ``scope`` / ``key``, replacing what was there; durable on return.

    Raises:
        roost.Error: Invalid for a bad scope or key, a value the codec cannot encode (the
            message names the offending part), or inside a workflow; nothing is stored.
    """
    what = "roost.state.set"
    authorize_caller("state.write", scope, key)
    node, store = _store(what)
    row = _row(scope, key, what)
    data = _CODEC.encode(value, what=f"state {scope}/{key} value")
    await _transact(node, store, lambda txn: txn.put(TABLE, row, data))


async def delete(scope: str, key: str) -> bool:
    """Remove ``scope`` / ``key``; return True if it was there (a missing key is a no-op).

    Raises:
        roost.Error: Invalid for a bad scope or key, or inside a workflow.
    """
    what = "roost.state.delete"
    authorize_caller("state.write", scope, key)
    node, store = _store(what)
    row = _row(scope, key, what)
    return await _transact(node, store, lambda txn: txn.delete(TABLE, row))


async def list(scope: str) -> dict[str, Any]:  # noqa: A001 - API name
    """Return every key of ``scope`` and its value, in key order (one consistent snapshot).

    Raises:
        roost.Error: Invalid for a bad scope, or inside a workflow.
    """
    what = "roost.state.list"
    authorize_caller("state.read", scope, "")
    _node, store = _store(what)
    prefix = key(_check_name(scope, "scope", what))
    await trio.lowlevel.checkpoint()
    out: dict[str, Any] = {}
    with store.read() as txn:
        for row, raw in txn.prefix(TABLE, prefix):
            name = unpack_key(row, str, str)[1]
            out[str(name)] = _CODEC.decode(raw)
    return out


async def update(scope: str, key: str, ops: Any) -> Any:
    """Apply ``ops`` to the value under ``scope`` / ``key`` atomically; return the new value.

    A missing key starts as ``{}``. The ops (see ``docs/orchestration.md``) apply in order,
    all or none, in one write transaction: concurrent updates of one key never lose a
    write, and a failing op stores nothing. The result is always stored (even for ``[]``).

    Raises:
        roost.Error: Invalid for a bad scope, key or op, an op that does not fit the value
            (increment of a non-number, a path through a non-dict, ...), a result the codec
            cannot encode, or inside a workflow; PermissionDenied unless the caller's
            policies allow both ``state.write`` and ``state.read`` of the key (it returns
            the value); in every case nothing is stored.
    """
    what = "roost.state.update"
    authorize_caller("state.write", scope, key)
    authorize_caller("state.read", scope, key)  # it returns the value: a read as well
    node, store = _store(what)
    row = _row(scope, key, what)
    parsed = parse_ops(ops)

    def apply(txn: WriteTxn) -> bytes:
        raw = txn.get(TABLE, row)
        current = {} if raw is None else _CODEC.decode(raw)
        data = _CODEC.encode(apply_ops(current, parsed), what=f"state {scope}/{key} value")
        txn.put(TABLE, row, data)
        return data

    return _CODEC.decode(await _transact(node, store, apply))
