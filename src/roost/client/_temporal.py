"""The clients' requests to a Temporal cluster (``connect(..., temporal="HOST:PORT")``).

The same plans as ``_core.Core``, for an app whose workflows run on Temporal: each
request is one ``Blocking`` step that connects to the cluster with roost's data converter
and runs the Temporal host's own client calls (``roost.temporal._client``, shared with the
node and the command line), in an asyncio loop of its own. The transports run it as they
run any blocking step (the async client in a worker thread), so it works under asyncio and
trio alike. Queues stay on the nodes: ``enqueue`` goes to the node given as the target.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from roost._duration import Duration, parse_duration
from roost._errors import Error, ErrorKind, invalid
from roost._pid import Pid
from roost.client._core import (
    CALL_TIMEOUT,
    Blocking,
    Core,
    Plan,
    WorkflowId,
    _entry_id,
    _json,
    _text,
    typed_by,
)
from roost.storage._values import plain_data, result_of

if TYPE_CHECKING:
    import temporalio.client

__all__ = ["TemporalCore"]

T = TypeVar("T")
# The node part of a client's reply address: a workflow's reply to a call goes to the
# update that carried it, never to a node.
_CALLER_NODE = "client"


class TemporalCore:
    """Every client request to the workflows of a Temporal cluster, as a plan."""

    def __init__(self, target: str, namespace: str, nodes: Core | None) -> None:
        """A core for the cluster ``target``; ``nodes``: a node's core, for ``enqueue``."""
        from roost.temporal import _client  # noqa: PLC0415 - needs the roost[temporal] extra

        self._ops = _client
        self._target = target
        self._namespace = namespace
        self._nodes = nodes
        self.app: Any = None  # a roost.App: types the results of workflows named by id

    @property
    def target(self) -> str:
        """The cluster (and the node, when one was given for queues)."""
        there = f"temporal {self._target} ({self._namespace})"
        return there if self._nodes is None else f"{there}, queues on {self._nodes.target}"

    def _on_cluster(
        self, ask: Callable[[temporalio.client.Client], Coroutine[Any, Any, T]]
    ) -> Plan[T]:
        async def run() -> T:
            client = await self._ops.connect(self._target, self._namespace)
            return await ask(client)

        found: T = yield Blocking(lambda: asyncio.run(run()))
        return found

    def start(
        self, entry: object, args: tuple[Any, ...], options: dict[str, Any]
    ) -> Plan[WorkflowId[Any]]:
        """Start workflow ``entry`` on the cluster; the workflow id."""
        entry_id = _entry_id(entry)
        values = _json(plain_data(list(args)), f"the arguments of {entry_id!r}")
        started = yield from self._on_cluster(
            lambda c: self._ops.start_outside(c, entry_id, values, options)
        )
        return WorkflowId(started, entry if callable(entry) else None)

    def signal(self, workflow_id: str, topic: str, payload: Any) -> Plan[None]:
        """Send ``topic`` with ``payload`` (a signal; durable once returned)."""
        workflow_id = _text(workflow_id, "a workflow id")
        topic = _text(topic, "a message topic")
        value = _json(plain_data(payload), f"the payload of {topic!r}")
        yield from self._on_cluster(lambda c: self._ops.signal(c, workflow_id, topic, value))

    def call(
        self, workflow_id: str, topic: str, payload: Any, timeout: Duration | None
    ) -> Plan[Any]:
        """A ``process.call`` (a Temporal update) from a reply address of this client."""
        workflow_id = _text(workflow_id, "a workflow id")
        topic = _text(topic, "a message topic")
        value = _json(plain_data(payload), f"the payload of {topic!r}")
        seconds = (
            CALL_TIMEOUT
            if timeout is None
            else parse_duration(timeout, what="call timeout", allow_zero=False)
        )
        caller = Pid.trusted(_CALLER_NODE, _CALLER_NODE, uuid.uuid4().hex)

        async def ask(client: temporalio.client.Client) -> Any:
            try:
                answer, reply = await asyncio.wait_for(
                    _update(client, workflow_id, topic, [value, caller]), seconds
                )
            except TimeoutError:
                raise Error(
                    f"no reply to {topic!r} from workflow {workflow_id!r} within {seconds:g}s",
                    kind=ErrorKind.TIMEOUT,
                    details={"workflow_id": workflow_id, "topic": topic, "timeout": seconds},
                ) from None
            return reply_value(workflow_id, topic, answer, reply)

        found = yield from self._on_cluster(ask)
        return found

    def result(self, workflow_id: str, timeout: Duration | None) -> Plan[Any]:
        """The workflow's result once it has closed (following its runs), or its error."""
        workflow_id = _text(workflow_id, "a workflow id")
        seconds = None if timeout is None else parse_duration(timeout, what="result timeout")

        async def ask(client: temporalio.client.Client) -> Any:
            try:
                value, error = await asyncio.wait_for(
                    self._ops.outcome(client, workflow_id), seconds
                )
            except TimeoutError:
                raise Error(
                    f"workflow {workflow_id!r} has no result yet: it is still running after "
                    f"{seconds:g}s; ask again later (a timeout=None waits for as long as it "
                    "takes)",
                    kind=ErrorKind.TIMEOUT,
                    retryable=True,
                    details={"workflow_id": workflow_id},
                ) from None
            if error is not None:
                raise error
            return value

        value = yield from self._on_cluster(ask)
        kind = None
        if self.app is not None and not isinstance(workflow_id, WorkflowId):
            kind = (yield from self.describe(workflow_id)).get("workflow_type")
        entry = typed_by(self.app, workflow_id, kind)
        return value if entry is None else result_of(entry, value)

    def describe(self, workflow_id: str) -> Plan[dict[str, Any]]:
        """What ``node.describe`` says of the workflow's latest run on the cluster."""
        workflow_id = _text(workflow_id, "a workflow id")
        found = yield from self._on_cluster(lambda c: self._ops.describe(c, workflow_id))
        return dict(found)

    def list(self, query: str | None, status: str | None) -> Plan[list[dict[str, Any]]]:
        """The executions Temporal's visibility ``query`` (narrowed to ``status``) matches."""
        if query is not None and not isinstance(query, str):
            raise invalid(f"a list query is a string or None, got {query!r}")
        combined = self._ops.status_query(query, status)
        found = yield from self._on_cluster(lambda c: self._ops.list_workflows(c, combined))
        return [dict(row) for row in found]

    def cancel(self, workflow_id: str, reason: str | None) -> Plan[None]:
        """A ``Cancel`` event with ``reason`` for the workflow."""
        workflow_id = _text(workflow_id, "a workflow id")
        if reason is not None and not isinstance(reason, str):
            raise invalid(f"a cancel reason is a string or None, got {reason!r}")
        yield from self._on_cluster(lambda c: self._ops.cancel(c, workflow_id, reason))

    def terminate(self, workflow_id: str) -> Plan[None]:
        """Terminate the workflow's open run."""
        workflow_id = _text(workflow_id, "a workflow id")
        yield from self._on_cluster(lambda c: self._ops.terminate(c, workflow_id))

    def enqueue(self, queue: str, entry: object, payload: Any) -> Plan[str]:
        """Enqueue on a node's queue: queues stay on the nodes (docs/temporal.md)."""
        if self._nodes is None:
            raise invalid(
                f"enqueue on {queue!r}: queues live on a node's data directory, not on the "
                "Temporal cluster; connect with the node's data directory or admin URL as "
                "the target as well (roost.connect(DIR, temporal=...))"
            )
        receipt = yield from self._nodes.enqueue(queue, entry, payload)
        return receipt


async def _update(
    client: temporalio.client.Client, workflow_id: str, topic: str, args: list[Any]
) -> tuple[str, Any]:
    """The workflow's final reply to a call carried as an update: ``(topic, payload)``."""
    import temporalio.client  # noqa: PLC0415 - needs the roost[temporal] extra
    import temporalio.service  # noqa: PLC0415

    from roost.temporal._client import rpc_error  # noqa: PLC0415
    from roost.temporal._failures import error_of  # noqa: PLC0415

    try:
        answer = await client.get_workflow_handle(workflow_id).execute_update(topic, args=args)
    except temporalio.client.WorkflowUpdateFailedError as exc:
        raise error_of(exc.cause) from None
    except temporalio.service.RPCError as exc:
        raise rpc_error(exc, workflow_id) from None
    return answer[0], answer[1]


def reply_value(workflow_id: str, topic: str, answer: str, reply: Any) -> Any:
    """A call's final reply as ``process.call`` gives it: its value, or its error raised."""
    if answer == "nak":
        raise Error(
            f"workflow {workflow_id!r} refused the request {topic!r}: {reply!r}",
            kind=ErrorKind.CONFLICT,
            details={"reason": reply, "workflow_id": workflow_id, "topic": topic},
        )
    if answer == "error":
        if isinstance(reply, Error):
            raise reply.clone()
        raise Error(
            f"workflow {workflow_id!r} answered {topic!r} with an error: {reply!r}",
            details={"workflow_id": workflow_id, "topic": topic},
        )
    return reply
