"""Streams: ``roost.publish(topic, data)`` and ``app.subscribe(topic, entry)``.

A publication goes to three kinds of subscriber:

- plain processes of the node listening on the topic (``process.listen(topic)``): an
  ordinary message, sender = the publisher, in memory;
- ``app.subscribe(topic, entry)``: the entry runs with the data, in the background
  (in memory, at most once: a node that stops loses what was not yet delivered);
- ``app.subscribe(topic, entry, durable=True, queue=...)``: the data is enqueued for the
  entry on that queue (at least once, with the queue's retries and DLQ). Inside a queue
  handler that enqueue joins the handler's acknowledgement, like ``roost.enqueue``.

Whatever an in-memory subscriber raises is logged and fails that delivery only; a store that
refuses the durable copies is logged and raised to whoever awaits the receipt.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

import attrs
import trio

from roost._errors import Error, ErrorKind, invalid
from roost.actors._api import Receipt
from roost.actors._app import EntryKind, register_app_check, register_extension
from roost.actors._authorize import caller_security
from roost.actors._current import bound_node, maybe_current_process
from roost.actors._process import NodeOps
from roost.mailbox._mailbox import check_topic
from roost.queues._contain import contain, describe
from roost.queues._records import message_key
from roost.queues._runtime import DELIVERY, Outgoing, QueueRuntime, run_target
from roost.queues._spec import DEFAULT_QUEUE, queue_specs

__all__ = ["Subscription", "declare_subscription", "publish"]

log = logging.getLogger("roost.queues")
_TARGETS = (EntryKind.ACTIVITY, EntryKind.PROCESS, EntryKind.WORKFLOW)

_ACCEPTED = Receipt()


@attrs.frozen(kw_only=True)
class Subscription:
    """``app.subscribe``: ``entry`` gets every publication on ``topic``."""

    topic: str
    entry: Any
    durable: bool = False
    queue: str = DEFAULT_QUEUE


def declare_subscription(
    app: Any, topic: str, entry: Any, *, durable: bool = False, queue: str | None = None
) -> Subscription:
    """Validate and record a subscription on ``app``.

    Raises:
        roost.Error: Invalid for a bad topic, or a queue given without ``durable=True``.
    """
    check_topic(topic)
    if not isinstance(durable, bool):
        raise invalid(f"durable must be a bool, got {durable!r}")
    if queue is not None and not durable:
        raise invalid("a queue applies to durable subscriptions: pass durable=True too")
    sub = Subscription(topic=topic, entry=entry, durable=durable, queue=queue or DEFAULT_QUEUE)
    app.declared.setdefault("subscriptions", {}).setdefault(topic, []).append(sub)
    return sub


def _publisher() -> tuple[NodeOps, Any]:
    delivery = DELIVERY.get()
    proc = maybe_current_process()
    if proc is not None and proc.workflow is not None:
        raise invalid(
            "roost.publish is not replay-safe inside a workflow; publish from an activity "
            "or a queue step"
        )
    if proc is not None and proc.node is not None:
        return proc.node, proc.pid
    if delivery is not None:
        return delivery.runtime.node, None
    node = bound_node()
    if node is not None:  # an activity run by a workflow
        return node, None
    raise Error(
        "roost.publish needs a node: call it from a process, an open_node block or a queue handler",
        kind=ErrorKind.INVALID_STATE,
    )


def publish(topic: str, data: Any = None) -> Receipt:
    """Publish ``data`` on ``topic`` to its subscribers, without blocking.

    Await the returned receipt to wait until durable subscribers' messages are committed.
    Subscription entries run under the publisher's security context, as a queued
    message's handler runs under its enqueuer's.

    Raises:
        roost.Error: Invalid for a bad topic or (with durable subscribers) data that
            cannot be encoded, or when called inside a workflow; InvalidState for a durable
            workflow subscriber of a publisher with a security context on a node without
            a key ring.
    """
    check_topic(topic)
    node, sender = _publisher()
    subs: list[Subscription] = node.app.declared.get("subscriptions", {}).get(topic, [])
    runtime: QueueRuntime | None = node.ext.get("queues")
    durable = [s for s in subs if s.durable]
    if durable and runtime is None:
        raise Error("durable subscriptions need a node with a store", kind=ErrorKind.INVALID_STATE)
    # Subscribers run as the publisher: a subscription never runs with more than its
    # publisher may do (a durable copy keeps the context as an enqueued message does).
    security = caller_security()
    claim = (
        {"actor": security.get("actor"), "policies": list(security.get("policies") or ())}
        if security is not None
        else None
    )
    messages = [
        runtime.new_message(s.queue, node.app.resolve(s.entry).id, data, claim)
        for s in durable
        if runtime is not None
    ]
    for proc in list(node.procs.values()):
        box = proc.mailbox
        if box is not None and box.subscription(topic) is not None:
            box.deliver(topic, data, sender, force=True)
    for sub in subs:
        if not sub.durable and runtime is not None:
            runtime.spawn_task(_notify, node, sub, data, claim)
    if not messages or runtime is None:
        return _ACCEPTED
    delivery = DELIVERY.get()
    if delivery is not None and delivery.open and delivery.runtime is runtime:
        delivery.handoff.extend(messages)  # commits with the handler's acknowledgement
        return _ACCEPTED
    receipt = _PublishReceipt()
    runtime.spawn_task(_store, runtime, topic, messages, receipt)
    return receipt


class _PublishReceipt(Receipt):
    """Awaiting it waits until the durable copies are committed, or raises why they were not."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: Error | None = None

    @property
    def accepted(self) -> bool:
        """Whether the durable copies are committed."""
        return self.done.is_set() and self.error is None

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        await self.done.wait()
        if self.error is not None:
            raise self.error.clone()

    def __repr__(self) -> str:
        state = "pending" if not self.done.is_set() else "failed" if self.error else "accepted"
        return f"<roost.Receipt {state}>"


async def _store(
    runtime: QueueRuntime, topic: str, messages: list[Outgoing], receipt: _PublishReceipt
) -> None:
    # One transaction: every durable subscriber gets the data, or (at a crash) none.
    rows = [(message_key(m.queue, m.seq), data) for m, data in messages]

    def write(txn: Any) -> None:
        for k, v in rows:
            txn.put("queue_messages", k, v)

    try:
        await runtime.transact(write)
        runtime.accept([m for m, _ in messages])
    except Exception as exc:  # the store refused: the publisher hears of it, the node goes on
        receipt.error = contain(exc)
        log.exception("publish %s: the durable copies could not be stored", topic)
    finally:
        receipt.done.set()


async def _notify(
    node: NodeOps, sub: Subscription, data: Any, claim: dict[str, Any] | None
) -> None:
    entry = node.app.resolve(sub.entry)
    if entry.kind not in _TARGETS:
        log.error(
            "subscription %s: %r is not an activity, process or workflow", sub.topic, entry.id
        )
        return
    try:
        await run_target(node, entry.id, data, None, security=claim)
    except BaseException as exc:  # one subscriber's failure is logged, not spread
        error = contain(exc)  # (cancellation goes on up)
        log.warning(
            "subscription %s -> %s failed: %s",
            sub.topic,
            entry.id,
            describe(error),
            exc_info=exc if error.kind is ErrorKind.INTERNAL else None,
        )


def check_subscriptions(app: Any) -> None:
    """``app.validate()``: subscription entries are targets; durable ones' queues exist.

    So a typo fails when the node opens, not at the first publish.

    Raises:
        roost.Error: Invalid (or NotFound for an unknown entry).
    """
    declared = queue_specs(app)
    for topic, subs in app.declared.get("subscriptions", {}).items():
        for sub in subs:
            entry = app.resolve(sub.entry)
            if entry.kind not in _TARGETS:
                raise invalid(
                    f"subscription to {topic!r}: {entry.id!r} is a {entry.kind.value}, not an "
                    "activity, process or workflow"
                )
            if sub.durable and sub.queue not in declared:
                raise invalid(
                    f"durable subscription to {topic!r} uses queue {sub.queue!r}, which is not "
                    f"declared; declare it with app.queue({sub.queue!r}, ...)"
                )


register_extension("subscribe", declare_subscription)
register_app_check(check_subscriptions)
