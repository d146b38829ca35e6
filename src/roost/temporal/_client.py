"""What a client of a Temporal cluster asks about roost workflows (the node and the CLI).

Plain asyncio coroutines over a connected ``temporalio.client.Client`` with roost's data
converter: ``connect``, ``describe`` / ``list_workflows`` (roost's ``describe`` dict),
``start``, ``signal``, ``cancel``, ``terminate``, ``outcome`` and ``history_file`` /
``read_history_file``. The node's ``TemporalHost`` runs them on its asyncio thread; the
``roost workflow ... --temporal`` commands run them with ``asyncio.run``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import temporalio.api.workflowservice.v1 as wsv1
import temporalio.client
import temporalio.exceptions
import temporalio.service

from roost._errors import Error, ErrorKind, invalid, not_found
from roost._pid import Pid
from roost.storage._codec import Codec
from roost.temporal._converter import data_converter
from roost.temporal._failures import error_of, terminated
from roost.temporal._options import (
    PARENT_MEMO,
    STATUS_MEMO,
    WATCHERS_MEMO,
    search_dict,
    start_kwargs,
    user_memo,
)
from roost.temporal._workflow import (
    CANCEL_SIGNAL,
    NOTICE_WORKFLOW,
    START_SIGNAL,
    UNWATCH_SIGNAL,
    WATCH_UPDATE,
    WORKFLOW_NODE,
    pack_watchers,
    unpack_watchers,
    watch_change,
)
from roost.workflow._options import check_start_options
from roost.workflow._planner import already_error
from roost.workflow._recorded import is_plain

__all__ = [
    "HISTORY_FORMAT",
    "cancel",
    "check_value",
    "connect",
    "describe",
    "described",
    "history_file",
    "list_workflows",
    "notify_terminated",
    "outcome",
    "read_history_file",
    "rpc_error",
    "signal",
    "start",
    "status_query",
    "terminate",
    "terminate_run",
]

log = logging.getLogger("roost.temporal")

HISTORY_FORMAT: Final = "roost.temporal-history/1"
"""The ``format`` of a history file written from a Temporal-hosted run."""

_CODEC: Final = Codec()
_STATUS = temporalio.client.WorkflowExecutionStatus
_STATUS_NAMES: Final = {
    _STATUS.RUNNING: "running",
    _STATUS.COMPLETED: "completed",
    _STATUS.FAILED: "failed",
    _STATUS.CANCELED: "canceled",
    _STATUS.TERMINATED: "terminated",
    _STATUS.CONTINUED_AS_NEW: "continued",
    _STATUS.TIMED_OUT: "timed_out",
}
# roost's status names as Temporal's visibility query spells them.
_QUERY_STATUS: Final = {
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "canceled": "Canceled",
    "terminated": "Terminated",
    "continued": "ContinuedAsNew",
    "timed_out": "TimedOut",
}


def rpc_error(exc: temporalio.service.RPCError, workflow_id: str) -> Error:
    """The roost error of a refused RPC about ``workflow_id``."""
    code = temporalio.service.RPCStatusCode
    if exc.status == code.NOT_FOUND:
        return not_found(f"workflow {workflow_id!r} is not running", workflow_id=workflow_id)
    if exc.status == code.INVALID_ARGUMENT:
        return invalid(f"Temporal refused the request for {workflow_id!r}: {exc.message}")
    kind = ErrorKind.UNAVAILABLE if exc.status == code.UNAVAILABLE else ErrorKind.INTERNAL
    return Error(f"Temporal: {exc.message}", kind=kind, details={"workflow_id": workflow_id})


def check_value(value: Any, what: str) -> None:
    """Raise Invalid unless roost's codec can encode ``value``."""
    if not is_plain(value):
        _CODEC.check(value, what=what)


async def connect(target: str, namespace: str) -> temporalio.client.Client:
    """A client of ``target`` with roost's data converter, its namespace checked.

    Raises:
        roost.Error: Unavailable when the server cannot be reached; NotFound when it has
            no such namespace.
    """
    if not isinstance(target, str) or ":" not in target:
        raise invalid(f"temporal must be 'host:port' of a Temporal server, got {target!r}")
    try:
        client = await temporalio.client.Client.connect(
            target, namespace=namespace, data_converter=data_converter()
        )
    except RuntimeError as exc:  # temporalio's connect failure
        raise Error(
            f"cannot reach the Temporal server at {target!r} (namespace {namespace!r}): {exc}; "
            "check that it is running and that the address (temporal= or --temporal) names "
            "its frontend (host:port)",
            kind=ErrorKind.UNAVAILABLE,
        ) from None
    try:
        await client.workflow_service.describe_namespace(
            wsv1.DescribeNamespaceRequest(namespace=namespace)
        )
    except temporalio.service.RPCError as exc:
        if exc.status == temporalio.service.RPCStatusCode.NOT_FOUND:
            raise Error(
                f"the Temporal server at {target!r} has no namespace {namespace!r} "
                f"({exc.message}): create it (`temporal operator namespace create --namespace "
                f"{namespace}`) or name one it has (temporal_namespace= or --namespace)",
                kind=ErrorKind.NOT_FOUND,
                details={"namespace": namespace},
            ) from None
        raise Error(
            f"the Temporal server at {target!r} (namespace {namespace!r}) refused: "
            f"{exc.message}; check that it is running and reachable, and that this client "
            "may use the namespace",
            kind=ErrorKind.UNAVAILABLE,
            details={"namespace": namespace},
        ) from None
    return client


async def start(
    client: temporalio.client.Client,
    entry_id: str,
    args: Sequence[Any],
    *,
    options: Mapping[str, Any],
    default_queue: str,
    memo: Mapping[str, Any],
    messages: Sequence[tuple[str, Any]] = (),
    sender: Pid | None = None,
    host: str,
    default_id: str,
) -> Pid:
    """Start a workflow of ``entry_id``; roost's id policies are chosen here.

    Args:
        client: the connected client.
        entry_id: the workflow entry (its Temporal workflow type).
        args: its arguments.
        options: unchecked start options (``check_start_options``).
        default_queue: the task queue when ``task_queue`` is not set.
        memo: roost's memo keys for the run.
        messages: start messages, delivered before anything else (signal-with-start).
        sender: the sender of the start messages.
        host: the workflow host of the PID returned (``"<app>:workflows"``).
        default_id: the id when neither ``id`` nor ``name`` is given.

    Raises:
        roost.Error: Invalid for a bad option or value; AlreadyExists when the id policies
            refuse the start; Unavailable or Internal when Temporal refuses it.
    """
    opts = check_start_options(dict(options))
    workflow_id = opts.get("id") or opts.get("name")
    explicit = workflow_id is not None
    if workflow_id is None:
        workflow_id = default_id
    for n, arg in enumerate(args):
        check_value(arg, f"args[{n}]")
    for topic, payload in messages:
        check_value(payload, f"payload of start message {topic!r}")
    kwargs = start_kwargs(opts, explicit=explicit, default_queue=default_queue, memo=memo)
    if messages:
        kwargs["start_signal"] = START_SIGNAL
        kwargs["start_signal_args"] = [[list(m) for m in messages], sender]
    pid = Pid.trusted(WORKFLOW_NODE, host, workflow_id)
    try:
        await client.start_workflow(entry_id, args=list(args), id=workflow_id, **kwargs)
    except temporalio.exceptions.WorkflowAlreadyStartedError:
        why = "is already running" if explicit or "id_reuse_policy" not in opts else "ran before"
        raise already_error(workflow_id, pid, why) from None
    except temporalio.service.RPCError as exc:
        if (
            exc.status == temporalio.service.RPCStatusCode.INVALID_ARGUMENT
            and "search attribute" in exc.message.lower()
        ):
            raise invalid(
                f"Temporal refused the start of {workflow_id!r}: {exc.message}; register "
                "each search attribute on the cluster first (`temporal operator "
                "search-attribute create --name NAME --type Keyword|Int|Double|Bool|"
                "Datetime|KeywordList`, docs/temporal.md)"
            ) from None
        raise rpc_error(exc, workflow_id) from None
    return pid


async def start_outside(
    client: temporalio.client.Client,
    entry_id: str,
    args: Sequence[Any],
    options: Mapping[str, Any],
) -> str:
    """Start a workflow from outside any node (the command line, a client); its id.

    The task queue defaults to the app's name (the part of ``entry_id`` before ``:``); the
    run has no parent and no owning node.
    """
    app_name = entry_id.partition(":")[0]
    pid = await start(
        client,
        entry_id,
        args,
        options=options,
        default_queue=app_name,
        memo={},
        host=f"{app_name}:workflows",
        default_id=f"{app_name}-{os.urandom(8).hex()}",
    )
    return str(pid.id)


async def signal(
    client: temporalio.client.Client,
    workflow_id: str,
    topic: str,
    payload: Any,
    sender: Pid | None = None,
) -> None:
    """Send a roost message (a signal named ``topic``) to the workflow.

    Raises:
        roost.Error: NotFound when it is not running; Invalid for a payload roost's codec
            cannot encode or a topic of roost's own (starting with ``@``).
    """
    if topic.startswith("@"):
        raise invalid(f"topic {topic!r}: topics starting with '@' are roost's own")
    check_value(payload, f"payload of message {topic!r}")
    await _signal(client, workflow_id, topic, [payload, sender])


async def cancel(client: temporalio.client.Client, workflow_id: str, reason: str | None) -> None:
    """A ``Cancel`` event with ``reason`` for the workflow (roost's own signal).

    Raises:
        roost.Error: NotFound when it is not running.
    """
    await _signal(client, workflow_id, CANCEL_SIGNAL, [reason])


async def _signal(
    client: temporalio.client.Client, workflow_id: str, name: str, args: list[Any]
) -> None:
    try:
        await client.get_workflow_handle(workflow_id).signal(name, args=args)
    except temporalio.service.RPCError as exc:
        raise rpc_error(exc, workflow_id) from None


async def terminate(client: temporalio.client.Client, workflow_id: str) -> None:
    """Terminate the workflow's open run, and push its close to the processes watching it.

    Raises:
        roost.Error: NotFound when it is not running.
    """
    await terminate_run(client, workflow_id)
    await notify_terminated(client, workflow_id)


async def terminate_run(client: temporalio.client.Client, workflow_id: str) -> None:
    """Terminate the workflow's open run (``notify_terminated`` tells its watchers).

    Raises:
        roost.Error: NotFound when it is not running.
    """
    try:
        await client.get_workflow_handle(workflow_id).terminate(reason="terminated")
    except temporalio.service.RPCError as exc:
        raise rpc_error(exc, workflow_id) from None


async def notify_terminated(client: temporalio.client.Client, workflow_id: str) -> None:
    """Push the close of the terminated latest run of ``workflow_id`` to its watchers.

    A terminated run runs no code, so it cannot notify its watchers itself: the watchers
    its history recorded (``@roost.watch`` updates and ``@roost.unwatch`` signals, and
    those its run before a continue-as-new handed it) get the EXIT from an ``ExitNotice``
    workflow started here. A failure is logged; the terminate stands.
    """
    try:
        await _notify_terminated(client, workflow_id)
    except Exception:  # the terminate happened; a lost notice is logged
        log.exception(
            "roost.temporal: the watchers of %r were not told it was terminated", workflow_id
        )


async def _notify_terminated(client: temporalio.client.Client, workflow_id: str) -> None:
    described = await client.get_workflow_handle(workflow_id).describe()
    run = client.get_workflow_handle(workflow_id, run_id=described.run_id)
    converter = client.data_converter.payload_converter
    watchers: dict[Pid, set[str]] = {}
    async for event in run.fetch_history_events():
        if event.HasField("workflow_execution_started_event_attributes"):
            memo = event.workflow_execution_started_event_attributes.memo.fields
            if WATCHERS_MEMO in memo:
                watchers = unpack_watchers(converter.from_payloads([memo[WATCHERS_MEMO]])[0])
        elif event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == WATCH_UPDATE:
                values = converter.from_payloads(list(request.input.args.payloads))
                watch_change(watchers, WATCH_UPDATE, values)
        elif event.HasField("workflow_execution_signaled_event_attributes"):
            signaled = event.workflow_execution_signaled_event_attributes
            if signaled.signal_name == UNWATCH_SIGNAL:
                values = converter.from_payloads(list(signaled.input.payloads))
                watch_change(watchers, UNWATCH_SIGNAL, values)
    if not watchers:
        return
    app_name = described.workflow_type.partition(":")[0]
    pid = Pid.trusted(WORKFLOW_NODE, f"{app_name}:workflows", workflow_id)
    # A second terminate notice of this run is refused: the first is under way.
    with contextlib.suppress(temporalio.exceptions.WorkflowAlreadyStartedError):
        await client.start_workflow(
            NOTICE_WORKFLOW,
            args=[pid, described.run_id, pack_watchers(watchers), terminated()],
            id=f"{NOTICE_WORKFLOW}-{workflow_id}-{described.run_id}",
            task_queue=described.task_queue,
        )


async def outcome(client: temporalio.client.Client, workflow_id: str) -> tuple[Any, Error | None]:
    """Wait for the workflow to close for good (following its runs): value, error.

    Raises:
        roost.Error: NotFound when there is no such workflow; the mapped error of another
            refusal.
    """
    handle = client.get_workflow_handle(workflow_id)
    try:
        return await handle.result(), None
    except temporalio.client.WorkflowFailureError as exc:
        return None, error_of(exc.cause)
    except temporalio.service.RPCError as exc:
        raise rpc_error(exc, workflow_id) from None


async def describe(client: temporalio.client.Client, workflow_id: str) -> dict[str, Any]:
    """Roost's ``describe`` of the latest run of ``workflow_id``.

    Raises:
        roost.Error: NotFound when Temporal has no such workflow.
    """
    try:
        found = await client.get_workflow_handle(workflow_id).describe()
    except temporalio.service.RPCError as exc:
        raise rpc_error(exc, workflow_id) from None
    return await described(client, found)


async def described(
    client: temporalio.client.Client, execution: temporalio.client.WorkflowExecution
) -> dict[str, Any]:
    """Roost's ``describe`` dict of one Temporal execution (its result read if closed)."""
    memo = await execution.memo()
    status = _STATUS_NAMES.get(execution.status, "unknown") if execution.status else "unknown"
    if status == "completed" and memo.get(STATUS_MEMO) == "canceled":
        status = "canceled"
    out: dict[str, Any] = {
        "workflow_id": execution.id,
        "run_id": execution.run_id,
        "workflow_type": execution.workflow_type,
        "status": status,
        "result": None,
        "error": None,
        "started_at": execution.start_time,
        "closed_at": execution.close_time,
        "history_length": execution.history_length,
        "task_queue": execution.task_queue,
        "parent": memo.get(PARENT_MEMO),
        "search_attributes": search_dict(execution.typed_search_attributes),
        "memo": user_memo(memo),
    }
    if status not in ("running", "continued"):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        try:
            out["result"] = await handle.result(follow_runs=False)
        except temporalio.client.WorkflowFailureError as exc:
            out["error"] = error_of(exc.cause)
        except Exception as exc:  # noqa: BLE001 - a result that cannot be read is shown as its error
            out["error"] = error_of(exc)
    return out


def status_query(query: str | None, status: str | None) -> str | None:
    """``query`` (Temporal's visibility syntax) narrowed to roost's ``status``.

    Raises:
        roost.Error: Invalid for a status roost does not know.
    """
    if status is None:
        return query
    spelled = _QUERY_STATUS.get(status)
    if spelled is None:
        raise invalid(f"unknown status {status!r}: use one of {', '.join(sorted(_QUERY_STATUS))}")
    clause = f"ExecutionStatus = '{spelled}'"
    return clause if not query else f"({query}) AND {clause}"


async def list_workflows(
    client: temporalio.client.Client, query: str | None
) -> list[dict[str, Any]]:
    """``described`` of each execution Temporal's visibility ``query`` matches.

    Raises:
        roost.Error: Invalid when Temporal refuses the query.
    """
    try:
        found = [e async for e in client.list_workflows(query)]
    except temporalio.service.RPCError as exc:
        raise invalid(f"Temporal refused the list query {query!r}: {exc.message}") from None
    return [await described(client, execution) for execution in found]


async def history_file(client: temporalio.client.Client, workflow_id: str) -> bytes:
    """The latest run's Temporal history as the file ``roost history export`` writes.

    JSON: ``{"format": HISTORY_FORMAT, "workflow_id": ..., "history": <Temporal's JSON>}``,
    which ``roost replay`` replays with temporalio's ``Replayer`` against the app's code.

    Raises:
        roost.Error: NotFound when Temporal has no such workflow.
    """
    try:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
    except temporalio.service.RPCError as exc:
        raise rpc_error(exc, workflow_id) from None
    data = {"format": HISTORY_FORMAT, "workflow_id": workflow_id, "history": history.to_json_dict()}
    return json.dumps(data).encode()


def read_history_file(
    data: bytes, path: str | os.PathLike[str]
) -> temporalio.client.WorkflowHistory | None:
    """The Temporal history in ``data`` (a file ``history_file`` wrote); None if it is not one."""
    if not data.lstrip().startswith(b"{"):
        return None
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or parsed.get("format") != HISTORY_FORMAT:
        return None
    try:
        return temporalio.client.WorkflowHistory.from_json(parsed["workflow_id"], parsed["history"])
    except Exception as exc:  # noqa: BLE001 - any defect of the file is its refusal
        raise invalid(f"{os.fspath(path)} is not a readable Temporal history: {exc}") from None
