"""The workflow host protocol: what a node asks of the host of its workflows, and gives it.

A node hosts its app's workflows on one ``WorkflowHost``, installed by ``open_node`` from a
factory (its ``workflow_host=`` keyword; the embedded LMDB host by default). The node routes
to the host every call on a PID whose host part is one of the host's ``pid_hosts``: sends,
cancels, terminates, monitors, links, liveness, and the exits of plain processes a workflow
watches. The host reaches the node's plain processes only through the ``NodeServices`` it is
given. docs/design-notes.md ("The workflow host protocol") states each member's invariants.

Nothing here imports trio or the store: a host on another event loop (Temporal's asyncio
worker) implements these over its own client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import datetime as dt

    from roost._errors import Error
    from roost._pid import Pid
    from roost._security import KeyRing
    from roost.actors._app import App, Entry
    from roost.actors._events import Exit, ExitResult

__all__ = [
    "FIRES_CRON",
    "CallingHost",
    "Durable",
    "NodeServices",
    "WorkflowHost",
    "WorkflowHostFactory",
]

FIRES_CRON = "fires_cron"
"""A ``WorkflowHostFactory`` with this attribute set true fires the app's ``app.cron``
triggers itself (the Temporal host: once per cluster); the node's own cron service then
fires none."""


class Durable(Protocol):
    """What a host returns for a request it accepted: it settles once that is durable.

    ``trio.Event`` satisfies it; so does any object with these two members.
    """

    def is_set(self) -> bool:
        """Whether the request is durable now (a message stored in the workflow's history)."""

    async def wait(self) -> None:
        """Return once the request is durable; never, if the node stops before it is."""


class NodeServices(Protocol):
    """What a node gives its workflow host: its identity, its clock, its plain processes.

    Every PID given to these calls is a plain process of this node (or, for ``lookup``, a
    name it holds): a host delivers to its own workflows itself.
    """

    @property
    def name(self) -> str:
        """The node's name: the node part of the PIDs the host mints."""

    @property
    def app(self) -> App:
        """The app whose workflows the host runs (its entries by id)."""

    def now(self) -> dt.datetime:
        """The node's UTC time (it follows a test's mock clock)."""

    def lookup(self, name: str) -> Pid | None:
        """The PID holding the registered ``name`` on this node, or None."""

    def send(self, sender: Pid, dest: Pid, topic: str, payload: Any) -> None:
        """Deliver a message from a workflow to the live plain process ``dest``.

        Raises:
            roost.Error: NotFound when ``dest`` is not alive; LimitExceeded when its
                mailbox is full.
        """

    def post_exit(self, watcher: Pid, event: Exit) -> None:
        """Give the plain process ``watcher`` the EXIT ``event``; nothing if it is gone."""

    def link_down(self, proc: Pid, dead: Pid, error: Error, at: dt.datetime) -> None:
        """Tell the plain process ``proc`` that ``dead``, linked to it, failed with ``error``.

        It gets a LINK_DOWN if it traps links, else it is killed; nothing if it is gone.
        """

    def spawn(
        self,
        entry: str,
        args: tuple[Any, ...],
        *,
        pid: Pid,
        watcher: Pid,
        context: Mapping[str, Any],
    ) -> None:
        """Start a plain process of ``entry`` for the workflow ``watcher``, under ``pid``.

        ``pid`` is on the app's default host (``app.default_host``) and new on this node;
        the process ends as any does, and its EXIT reaches the host's ``process_exited``.

        Raises:
            roost.Error: Invalid when ``entry`` is not a process entry, Unavailable when
                the node is stopping, LimitExceeded at its host's process limit.
        """

    def stop(self, dest: Pid, reason: str | None, *, hard: bool) -> None:
        """Terminate (``hard``) or cancel the plain process ``dest``.

        Raises:
            roost.Error: NotFound when ``dest`` is not alive.
        """

    @property
    def keyring(self) -> KeyRing | None:
        """The node's signing keys (docs/security.md), or None if it has none.

        A host seals a secured workflow's context for its id with it at the start, and
        checks envelopes and relay tickets against it.
        """

    def bind_activity(self) -> None:
        """Make the calling context an activity's on this node.

        No process is current in it, and ``roost.state``, ``roost.enqueue``,
        ``roost.publish`` and the node's clock reach this node from it and from the tasks
        and threads it starts. A host calls it in each attempt's own context.
        """


class WorkflowHost(Protocol):
    """What a node asks of the host of its workflows (see the module docstring).

    Called on the node's trio thread. Only ``spawn`` and ``wait_exit`` wait (and may
    overlap any other call); every other member does its part before it returns. A host
    whose ``describe``, ``list_workflows``, ``history``, ``running``, ``cancel`` and
    ``terminate`` ask a server (not the embedded one) takes those from any thread: the
    node's async callers make them from a worker thread, so its loop runs on. A PID of
    one of ``pid_hosts`` that is not an open workflow (a closed or unknown one, a reply
    address) is refused by ``cancel`` and ``terminate``, not ``running``, and answered at
    once by ``monitor``, ``link`` and ``wait_exit``.
    """

    @property
    def host(self) -> str:
        """The host part of its workflows' PIDs: ``"<app>:workflows"``."""

    @property
    def pid_hosts(self) -> frozenset[str]:
        """Every PID host the node routes to it: ``host`` and that of its reply addresses."""

    async def spawn(
        self,
        parent: Pid,
        *,
        entry: Entry,
        args: tuple[Any, ...],
        options: dict[str, Any],
        messages: tuple[tuple[str, Any], ...],
        context: dict[str, Any],
    ) -> Pid:
        """Start a workflow of ``entry``, or (per the id policies) return the running one.

        When it returns, the start and its start ``messages`` (from ``parent``) are durable.
        ``context`` is the workflow's full context (the parent's, with the spawn's on top).
        A call that returns is a schedule point (it yields to trio at least once): the
        node's ``process.spawn`` checks for a cancel before it and adds no pass of its own.

        Raises:
            roost.Error: AlreadyExists when the id policies refuse; Invalid for a bad
                option or input that cannot be encoded (nothing is stored).
        """

    def signal(
        self,
        sender: Pid | None,
        pid: Pid,
        topic: str,
        payload: Any,
        ticket: Mapping[str, Any] | None = None,
    ) -> Durable:
        """Accept a message for the workflow (or the reply address) ``pid``.

        Messages from one sender reach the workflow in the order they were accepted. A
        ``process.call`` to a workflow is a signal whose sender is the caller's reply
        address; a reply to a workflow's own call is a signal to one of its reply addresses.
        ``ticket``: the relay ticket a workflow running under a security context needs,
        bound to (its id, ``topic``) (``roost._security.make_ticket``).

        Raises:
            roost.Error: NotFound when ``pid`` is no open workflow; Invalid for a payload
                that cannot be recorded; LimitExceeded at the workflow's unread limit;
                PermissionDenied for a secured workflow without a valid ticket (nothing
                is stored).
        """

    def cancel(self, pid: Pid, reason: str | None) -> Durable:
        """Ask the workflow to stop: it gets a ``Cancel`` event with ``reason``.

        Raises:
            roost.Error: NotFound when ``pid`` is no open workflow.
        """

    def terminate(self, pid: Pid) -> None:
        """Stop the workflow at once: none of its code runs again; it closes as terminated.

        Raises:
            roost.Error: NotFound when ``pid`` is no open workflow.
        """

    def running(self, pid: Pid) -> bool:
        """Whether ``pid`` is an open workflow."""

    def monitor(self, watcher: Pid, pid: Pid) -> None:
        """Post one EXIT to the plain process ``watcher`` when the workflow closes.

        At once if it has closed (its recorded outcome) or never existed ("noproc").
        """

    def link(self, proc: Pid, pid: Pid) -> None:
        """LINK_DOWN to the plain process ``proc`` if the workflow fails or is terminated.

        At once if it has closed with an error, or never existed ("noproc").
        """

    def unwatch(self, proc: Pid, pid: Pid) -> None:
        """Drop the monitor and the link ``proc`` holds on the workflow; no-op if none."""

    def process_exited(self, watcher: Pid, event: Exit) -> None:
        """A plain process the workflow ``watcher`` started (see ``NodeServices.spawn``) ended."""

    async def wait_exit(self, pid: Pid) -> ExitResult:
        """Wait until the workflow closes; its result or error (at once if it has closed)."""

    def describe(self, workflow_id: str) -> dict[str, Any]:
        """Status, result or error, type and timestamps of the workflow's latest run.

        Raises:
            roost.Error: NotFound for an unknown workflow id.
        """

    def list_workflows(self, query: str | None) -> list[dict[str, Any]]:
        """``describe`` of every workflow matching ``query`` (docs/workflows.md, Inspection)."""

    def history(self, workflow_id: str) -> list[Any]:
        """Every event and command of the workflow's latest run, in order.

        Raises:
            roost.Error: NotFound for an unknown workflow id.
        """


@runtime_checkable
class CallingHost(Protocol):
    """A host that carries ``process.call`` to its workflows itself (an optional member).

    A host without ``call`` gets a call as a signal from the caller's reply address, and
    the workflow's replies come back as messages to it (the embedded host). One with it
    (Temporal's: an update) delivers the request with ``caller`` as its sender, and
    returns the workflow's first reply to ``caller`` that is not ``"ack"``.
    """

    async def call(
        self,
        caller: Pid,
        pid: Pid,
        topic: str,
        payload: Any,
        ticket: Mapping[str, Any] | None = None,
    ) -> tuple[str, Any]:
        """Deliver the request and wait for its final reply: ``(topic, payload)``.

        The node cancels the wait at the call's timeout. ``ticket`` is the caller's relay
        ticket (as for ``signal``) when the node has a key ring.

        Raises:
            roost.Error: NotFound when the workflow is not running, or closes before it
                replied; Invalid for a payload the host cannot carry; PermissionDenied
                when the workflow is secured and ``ticket`` does not admit the call.
        """


WorkflowHostFactory = Callable[[NodeServices], AbstractAsyncContextManager[WorkflowHost]]
"""What ``open_node(workflow_host=...)`` takes: given the node's services, an async context
manager that yields the started host and stops it when the node closes."""
