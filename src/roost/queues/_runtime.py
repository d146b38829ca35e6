"""The queues of a node: durable enqueue, dispatch, retries with backoff, the DLQ.

A message is stored when enqueued and deleted when its handler finishes without an error
(the acknowledgement). Messages a handler enqueues commit in that acknowledgement's
transaction (exactly-once hand-off between steps). A failed attempt is written back with
its error and the time of its retry; the last one moves the message to the DLQ in one
transaction. Messages still stored when a node starts (in flight at a crash, or waiting)
are delivered again: at-least-once, with ``roost.queue_info()`` to stay idempotent.

Whatever a handler does fails that attempt only (see ``_contain``): anything it raises,
cancellation and Ctrl-C aside, becomes the attempt's error, made safe to store. A store that
refuses a delivery's outcome (a full disk) leaves the stored message as it was and delivers it
again after a backoff; the node goes on.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import math
import os
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

import attrs
import trio

from roost import _telemetry as telemetry
from roost._duration import deadline_after
from roost._errors import Error, ErrorKind, invalid, not_found, shown
from roost._pid import Pid
from roost._security import SECURITY_KEY, open_queued, seal_queued
from roost.actors._app import EntryKind, register_extension, register_node_service
from roost.actors._authorize import authorize_caller
from roost.actors._current import reset_current, set_current
from roost.actors._funcs import funcs_call
from roost.actors._node import Node
from roost.actors._process import NodeOps
from roost.actors._spawn import Spawner
from roost.queues._contain import contain, describe, safe_error
from roost.queues._dispatch import QueueState
from roost.queues._quarantine import quarantine_messages, readable_messages
from roost.queues._records import (
    DeadLetter,
    QueueInfo,
    QueueMessage,
    message_key,
    redriven,
    workflow_id_for,
)
from roost.queues._spec import QueueSpec, declare_queue, load_config, queue_specs, retry_delay
from roost.storage import Codec, Store, WriteTxn

__all__ = ["DELIVERY", "Delivery", "Outgoing", "QueueRuntime", "invoke", "run_target"]

log = logging.getLogger("roost.queues")


@attrs.define
class Delivery:
    """The handler call in progress in this context (for queue_info and hand-off)."""

    info: QueueInfo
    runtime: QueueRuntime
    handoff: list[Outgoing] = attrs.field(factory=list)
    open: bool = True


DELIVERY: ContextVar[Delivery | None] = ContextVar("roost_queue_delivery", default=None)

# A message not stored yet, with its encoding (made once, when it was checked).
Outgoing = tuple[QueueMessage, bytes]


class QueueRuntime:
    """Every queue of one node."""

    def __init__(self, node: Node, store: Store, nursery: trio.Nursery) -> None:
        self.node = node
        self.store = store
        self.codec = Codec()
        self.specs: dict[str, QueueSpec] = queue_specs(node.app)
        self.states = {name: QueueState(spec) for name, spec in self.specs.items()}
        self._wake = {name: trio.Event() for name in self.specs}
        self._nursery = nursery
        self._seq = 0
        self.dlq = DeadLetters(self)
        # Delivery attempts and failed ones by (queue, entry), read by /metrics (roost.admin).
        self.deliveries: dict[tuple[str, str], int] = {}
        self.delivery_failures: dict[tuple[str, str], int] = {}
        # A test seam: called once a delivery's handler has finished, before its outcome
        # (acknowledgement or failure) commits; crash tests kill the node there.
        self.before_outcome: Callable[[QueueMessage, Error | None], None] | None = None

    @classmethod
    async def start_on(cls, node: Node, nursery: trio.Nursery) -> None:
        """The node service: recover stored messages and start a dispatcher per queue."""
        if node.store is None:
            return
        runtime = cls(node, node.store, nursery)
        node.ext["queues"] = runtime
        runtime._recover()
        for name in runtime.specs:
            nursery.start_soon(runtime._dispatch, name, name=f"roost.queue.{name}")

    def spawn_task(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the node's queue nursery."""
        self._nursery.start_soon(fn, *args)

    def _recover(self) -> None:
        with self.store.read() as txn:
            messages, dead, bad = readable_messages(txn, self.codec, self.node.now())
        self._seq = max([m.seq for m in messages] + [d.seq for d in dead] + [0])
        # A quarantined message's seq is not given again: its key stays its own.
        self._seq = max([self._seq] + [seq for entry in bad if (seq := entry.info.get("seq"))])
        quarantine_messages(self.store, self.codec, bad)
        for message in messages:
            state = self.states.get(message.queue)
            if state is None:
                log.error(
                    "message %s is stored for queue %r, which this app does not declare; it "
                    "stays stored until a node that declares the queue opens",
                    message.receipt_id,
                    message.queue,
                )
                continue
            state.add(self._grouped(message))
        telemetry.log_queues_recovered(len(messages), len(dead), len(bad))

    def _grouped(self, message: QueueMessage) -> QueueMessage:
        """``message`` with the group its FIFO queue takes from the payload, if it has none.

        A message stored without a node (``roost.connect`` on a stopped data directory)
        was stored before any app could say how its queue groups.
        """
        spec = self.specs[message.queue]
        if message.group is not None or not spec.fifo or not isinstance(message.payload, dict):
            return message
        value = message.payload.get(spec.message_group_field)
        if value is None:
            return message
        try:
            group = str(value)
        except Exception:  # noqa: BLE001 - a group value whose __str__ raises: ungrouped
            return message
        return attrs.evolve(message, group=group)

    async def transact(self, fn: Callable[[WriteTxn], Any]) -> Any:
        """Commit through the node's store (see ``Node.transact``)."""
        return await self.node.transact(fn)

    # -- enqueue -------------------------------------------------------------------------

    def new_message(
        self, queue: str, entry: str, payload: Any, security: Mapping[str, Any] | None = None
    ) -> Outgoing:
        """A checked message for ``queue`` and its encoding (not stored yet).

        ``security`` is the enqueuer's security context (None: it has none): the message
        keeps it, signed by the node's ring, and its delivery runs under it.

        Raises:
            roost.Error: Invalid for an undeclared queue, a FIFO payload without its group
                field, or a payload the codec cannot encode; InvalidState for a context
                with a workflow entry on a node without a key ring (its start could not
                seal it).
        """
        spec = self.specs.get(queue)
        if spec is None:
            raise invalid(
                f"queue {shown(queue)} is not declared; declare it with "
                f"app.queue({shown(queue)}, ...) "
                f"(declared: {', '.join(sorted(self.specs))})",
                queue=queue,
            )
        group = None
        if spec.fifo:
            field = spec.message_group_field
            value = payload.get(field) if isinstance(payload, dict) else None
            if value is None:
                raise invalid(
                    f"fifo queue {queue!r} groups messages by payload[{field!r}], which this "
                    "payload lacks (or is null); send a dict with that field",
                    queue=queue,
                )
            try:
                group = str(value)
            except Exception as exc:  # noqa: BLE001 - a group value whose __str__ raises
                raise invalid(
                    f"fifo queue {queue!r}: payload[{field!r}] cannot be turned into a group "
                    f"name ({type(exc).__name__}); use a str or an int",
                    queue=queue,
                ) from None
        receipt_id = os.urandom(12).hex()
        ring = self.node.settings.get("keyring")
        kept = None
        if security is not None:
            if ring is None and self.node.app.resolve(entry).kind is EntryKind.WORKFLOW:
                raise Error(
                    f"enqueuing workflow {entry!r} under a security context needs a signing "
                    "key (its delivery starts the workflow under that context); give "
                    "open_node(signing_keys={...}, signing_key=...) or set ROOST_SIGNING_KEYS",
                    kind=ErrorKind.INVALID_STATE,
                    retryable=False,
                )
            kept = seal_queued(security, queue, receipt_id, ring)
        message = QueueMessage(
            receipt_id=receipt_id,
            queue=queue,
            seq=self._seq + 1,
            entry=entry,
            payload=payload,
            group=group,
            enqueued_at=self.node.now(),
            security=kept,
        )
        what = f"payload for queue {queue!r}"
        self.codec.check(payload, what=what)  # a payload's own limits, inside the message
        try:
            data = self.codec.encode(message)
        except Error:
            # Only the payload can be the problem: this names where in it, in its terms.
            self.codec.encode(payload, what=what)
            raise
        self._seq += 1
        return message, data

    async def enqueue(self, message: QueueMessage, data: bytes) -> None:
        """Store ``message`` (``data`` is its encoding); returns once committed."""
        row = message_key(message.queue, message.seq)
        await self.transact(lambda txn: txn.put("queue_messages", row, data))
        self.accept([message])

    def accept(self, messages: list[QueueMessage]) -> None:
        """Committed messages: hand them to their queues' dispatchers."""
        for message in messages:
            self.states[message.queue].add(message)
            self._wake[message.queue].set()

    # -- dispatch ------------------------------------------------------------------------

    async def _dispatch(self, name: str) -> None:
        state = self.states[name]
        while True:
            now = self.node.now()
            for message in state.take_ready(now):
                self._nursery.start_soon(self._deliver, message, name=f"roost.queue.{name}")
            wakeup = state.next_wakeup(now)  # strictly later: no busy loop on a full queue
            delay = math.inf if wakeup is None else (wakeup - self.node.now()).total_seconds()
            with trio.move_on_after(max(delay, 0.0)):
                await self._wake[name].wait()
            self._wake[name] = trio.Event()

    async def _deliver(self, message: QueueMessage) -> None:
        spec = self.specs[message.queue]
        delivery = Delivery(
            QueueInfo(receipt_id=message.receipt_id, attempt=message.attempt, queue=spec.name),
            self,
        )
        key = (message.queue, message.entry)
        self.deliveries[key] = self.deliveries.get(key, 0) + 1
        # A context that does not verify is never run under, and never retried.
        claim, refused = open_queued(
            message.security, message.queue, message.receipt_id, self.node.settings.get("keyring")
        )
        if refused is None:
            error = await telemetry.delivery(message, self._invoke(message, spec, delivery, claim))
        else:
            error = refused
            log.error("%s", refused.message, extra=_fields(message))
        delivery.open = False
        retry = None
        try:
            if self.before_outcome is not None:
                self.before_outcome(message, error)
            if error is None:
                try:
                    await self._acknowledge(message, delivery.handoff)
                except Error as exc:  # e.g. a hand-off the store refuses: the step failed
                    error = exc
            if error is not None:
                self.delivery_failures[key] = self.delivery_failures.get(key, 0) + 1
                retry = await self._failed(message, spec, error, final=refused is not None)
        except Exception as exc:  # noqa: BLE001 - the store refused the outcome itself
            retry = self._outcome_lost(message, spec, exc)
        finally:
            self.states[message.queue].finished(message, retry)
            self._wake[message.queue].set()

    async def _invoke(
        self,
        message: QueueMessage,
        spec: QueueSpec,
        delivery: Delivery,
        claim: Mapping[str, Any] | None,
    ) -> Error | None:
        token = DELIVERY.set(delivery)
        try:
            with trio.move_on_after(spec.timeout) as scope:
                await run_target(
                    self.node,
                    message.entry,
                    message.payload,
                    delivery.info,
                    workflow_id=workflow_id_for(message),
                    security=claim,
                )
            if not scope.cancelled_caught:
                return None
            return Error(
                f"queue {spec.name!r}: {message.entry!r} did not finish within its "
                f"timeout of {spec.timeout:g}s",
                kind=ErrorKind.TIMEOUT,
                details={"timeout": spec.timeout},
            )
        except BaseException as exc:  # noqa: BLE001 - whatever a handler raises fails the attempt
            return contain(exc)  # (cancellation and Ctrl-C go on up)
        finally:
            DELIVERY.reset(token)

    def _outcome_lost(self, message: QueueMessage, spec: QueueSpec, exc: Exception) -> QueueMessage:
        # Nothing of this delivery's outcome is stored: the stored message is unchanged (a
        # restart delivers it again as it is), and this node tries it again after a backoff.
        delay = retry_delay(spec, message.attempt)
        log.error(
            "queue %s: the outcome of %s attempt %d could not be stored (%s); delivering it "
            "again in %.3gs",
            spec.name,
            message.receipt_id,
            message.attempt,
            describe(contain(exc)),
            delay,
            exc_info=exc,
            extra=_fields(message),
        )
        return attrs.evolve(message, not_before=deadline_after(self.node.now(), delay))

    async def _acknowledge(self, message: QueueMessage, handoff: list[Outgoing]) -> None:
        rows = [(message_key(m.queue, m.seq), data) for m, data in handoff]
        done = message_key(message.queue, message.seq)

        def write(txn: WriteTxn) -> None:
            txn.delete("queue_messages", done)
            for k, v in rows:
                txn.put("queue_messages", k, v)

        await self.transact(write)
        self.accept([m for m, _ in handoff])

    async def _failed(
        self, message: QueueMessage, spec: QueueSpec, error: Error, *, final: bool = False
    ) -> QueueMessage | None:
        now = self.node.now()
        noted = safe_error(error).clone()  # a handler's error may not be storable as it is
        noted.details = {**noted.details, "attempt": message.attempt, "at": now}
        errors = [*message.errors, noted]
        row = message_key(message.queue, message.seq)
        if message.attempt <= spec.max_retries and not final:
            delay = retry_delay(spec, message.attempt)
            retry = attrs.evolve(
                message,
                attempt=message.attempt + 1,
                not_before=deadline_after(now, delay),
                errors=errors,
            )
            data = self.codec.encode(retry)
            await self.transact(lambda txn: txn.put("queue_messages", row, data))
            log.info(
                "queue %s: %s attempt %d failed (%s); retrying in %.3gs",
                spec.name,
                message.receipt_id,
                message.attempt,
                describe(noted),
                delay,
                extra=_fields(message),
            )
            return retry
        dead = DeadLetter(
            receipt_id=message.receipt_id,
            queue=message.queue,
            seq=message.seq,
            entry=message.entry,
            payload=message.payload,
            group=message.group,
            errors=errors,
            enqueued_at=message.enqueued_at,
            failed_at=now,
            redrives=message.redrives,
            security=message.security,
        )
        data = self.codec.encode(dead)

        def write(txn: WriteTxn) -> None:
            txn.delete("queue_messages", row)
            txn.put("dlq", row, data)

        await self.transact(write)
        log.warning(
            "queue %s: %s failed %d attempts; moved to the DLQ (last error: %s)",
            spec.name,
            message.receipt_id,
            message.attempt,
            describe(noted),
            extra=_fields(message),
        )
        return None


def _fields(message: QueueMessage) -> dict[str, Any]:
    """The structured log fields of a delivery of ``message``."""
    return telemetry.fields(
        entry=message.entry,
        attempt=message.attempt,
        receipt_id=message.receipt_id,
        queue=message.queue,
    )


async def run_target(
    node: NodeOps,
    entry_id: str,
    payload: Any,
    info: QueueInfo | None,
    *,
    workflow_id: str | None = None,
    security: Mapping[str, Any] | None = None,
) -> Any:
    """``invoke`` from a fresh attached process (the caller a process target needs).

    ``security`` is the security context that process has (a queued message's enqueuer's):
    the target runs under it, and what it starts inherits it.
    """
    parent = node.attach({SECURITY_KEY: dict(security)} if security is not None else None)
    current = set_current(parent)
    try:
        return await invoke(node, entry_id, payload, info, workflow_id=workflow_id)
    finally:
        reset_current(current)
        node.exit(parent, None, None)


async def invoke(
    node: NodeOps,
    entry_id: str,
    payload: Any,
    info: QueueInfo | None,
    *,
    workflow_id: str | None = None,
) -> Any:
    """Call a queue, cron, HTTP or subscription target with its one argument.

    An activity is called directly (a sync one in a worker thread, inline under a
    MockClock); a process or workflow entry is run to its end like ``process.exec``.
    A workflow gets ``info`` as its queue info and, when given, the id ``workflow_id``.
    The caller must be a process (see ``run_target``).
    """
    entry = node.app.resolve(entry_id)
    if entry.kind is EntryKind.ACTIVITY:
        return await funcs_call(entry.id, payload)
    spawner = Spawner()
    if entry.kind is not EntryKind.WORKFLOW:
        return await spawner.exec(entry, payload)
    if info is not None:
        spawner = spawner.with_context({"roost.queue_info": attrs.asdict(info)})
    if workflow_id is None:
        pid = await spawner.spawn(entry, payload)
    else:
        pid = await _start_once(node, spawner, entry.id, payload, workflow_id)
    try:
        outcome = await node.require_workflows().wait_exit(pid)
    except BaseException:
        # The call timed out (or the node stops): unlike process.exec, a target that is
        # given up on must not go on running next to its retry.
        with contextlib.suppress(Error):
            node.stop(pid, hard=True)
        raise
    if outcome.error is not None:
        raise outcome.error.clone()
    return outcome.value


async def _start_once(
    node: NodeOps, spawner: Spawner, entry_id: str, payload: Any, workflow_id: str
) -> Pid:
    """Start the workflow of one delivery attempt, or find the run that attempt started.

    One run per attempt: while it is open, the start returns it (``use_existing``); once it
    has closed, the start is refused (``reject_duplicate``) and the closed run is the answer,
    its recorded result or error the attempt's outcome. That is the redelivery after a crash
    between the run's close and the message's acknowledgement: it takes the outcome, and
    nothing of the workflow runs twice.
    """
    spawner = spawner.with_options(id=workflow_id, id_reuse_policy="reject_duplicate")
    try:
        return await spawner.spawn(entry_id, payload)
    except Error as exc:
        if exc.kind is not ErrorKind.ALREADY_EXISTS:
            raise
    host = node.require_workflows().host
    log.info(
        "queue delivery: workflow %r of this attempt has closed; taking its outcome", workflow_id
    )
    return Pid.trusted(node.name, host, workflow_id)


class DeadLetters:
    """``node.dlq``: list, redrive and discard dead letters of a queue."""

    def __init__(self, runtime: QueueRuntime) -> None:
        self._rt = runtime

    def _check(self, queue: str) -> None:
        if not isinstance(queue, str):
            raise invalid(f"a queue name is a string, got {type(queue).__name__} {queue!r}")
        if queue not in self._rt.specs:
            raise not_found(f"queue {queue!r} is not declared", queue=queue)

    def _all(self, queue: str) -> builtins.list[DeadLetter]:
        from roost.storage import key  # noqa: PLC0415 - keys of one queue

        with self._rt.store.read() as txn:
            return [self._rt.codec.decode(v) for _, v in txn.prefix("dlq", key(queue))]

    def list(self, queue: str, offset: int = 0, limit: int = 50) -> builtins.list[DeadLetter]:
        """Dead letters of ``queue``, oldest first."""
        self._check(queue)
        for name, value in (("offset", offset), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise invalid(f"{name} must be an int >= 0, got {value!r}")
        return self._all(queue)[offset : offset + limit]

    def _find(self, queue: str, receipt_id: str) -> DeadLetter:
        self._check(queue)
        if not isinstance(receipt_id, str):
            raise invalid(f"a receipt id is a string, got {type(receipt_id).__name__}")
        for dead in self._all(queue):
            if dead.receipt_id == receipt_id:
                return dead
        raise not_found(
            f"no dead letter {receipt_id!r} in queue {queue!r}", queue=queue, receipt_id=receipt_id
        )

    async def redrive(self, queue: str, receipt_id: str) -> None:
        """Enqueue a dead letter again, same receipt id, with a fresh retry budget.

        Raises:
            roost.Error: NotFound for an unknown receipt id (or one redriven meanwhile).
        """
        authorize_caller("dlq.change", queue)
        if not await self._redrive([self._find(queue, receipt_id)]):
            raise not_found(f"dead letter {receipt_id!r} of queue {queue!r} is gone")

    async def redrive_all(self, queue: str) -> int:
        """Redrive every dead letter of ``queue``; returns how many."""
        authorize_caller("dlq.change", queue)
        self._check(queue)
        return await self._redrive(self._all(queue))

    async def discard(self, queue: str, receipt_id: str) -> None:
        """Delete a dead letter for good."""
        authorize_caller("dlq.change", queue)
        dead = self._find(queue, receipt_id)
        row = message_key(dead.queue, dead.seq)
        if not await self._rt.transact(lambda txn: txn.delete("dlq", row)):
            raise not_found(f"dead letter {receipt_id!r} of queue {queue!r} is gone")

    async def _redrive(self, dead: builtins.list[DeadLetter]) -> int:
        rt = self._rt
        fresh = []
        for d in dead:
            rt._seq += 1
            fresh.append(redriven(d, rt._seq))
        pairs = [
            (message_key(d.queue, d.seq), message_key(m.queue, m.seq), rt.codec.encode(m), m)
            for d, m in zip(dead, fresh, strict=True)
        ]

        def write(txn: WriteTxn) -> list[QueueMessage]:
            # Checked in the transaction: two redrives of one letter move it once.
            moved = []
            for old, new, data, message in pairs:
                if txn.delete("dlq", old):
                    txn.put("queue_messages", new, data)
                    moved.append(message)
            return moved

        moved: builtins.list[QueueMessage] = await rt.transact(write)
        rt.accept(moved)
        return len(moved)


register_extension("queue", declare_queue)
register_extension("config", load_config)
register_node_service(QueueRuntime.start_on)
