"""``roost.open_node`` and ``roost.run``: start a node, attach the caller, shut down."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from roost import _telemetry as telemetry
from roost._duration import Duration, parse_duration
from roost._errors import Error, ErrorKind, invalid
from roost._interrupt import is_ctrl_c
from roost._pid import Pid
from roost._security import KeyRing
from roost._text import check_text
from roost.actors._app import App, Entry, _extension, node_services
from roost.actors._current import reset_current, set_current
from roost.actors._loop_watch import LoopWatchdog
from roost.actors._node import Node, SpawnRequest
from roost.actors._node_types import is_mock_clock
from roost.actors._spawn import exec as _exec
from roost.storage import open_lmdb_store

if TYPE_CHECKING:
    from roost.workflow._host_protocol import WorkflowHostFactory

__all__ = ["NodeHandle", "only_ctrl_c", "open_node", "run"]

_DURABILITY = ("sync", "fast")
_LINKED = SpawnRequest(link=True)
_FORBIDDEN = frozenset("{}|@: ")


class NodeHandle:
    """What ``open_node`` yields: the node's identity and inspection calls."""

    def __init__(self, node: Node, data_dir: Path, pid: Pid) -> None:
        self._node = node
        self.data_dir = data_dir
        self._pid = pid
        self._main_pid: Pid | None = None

    @property
    def main_pid(self) -> Pid | None:
        """The PID of the app's ``@app.main`` process (None if the app has no main)."""
        return self._main_pid

    @property
    def pid(self) -> Pid:
        """The PID of the attached (calling) task."""
        return self._pid

    @property
    def name(self) -> str:
        """The node name."""
        return self._node.name

    @property
    def incarnation(self) -> int:
        """How many times a node has started on this data directory (this one included)."""
        return self._node.incarnation

    @property
    def app(self) -> App:
        """The app this node runs."""
        return self._node.app

    def describe(self, workflow_id: str) -> dict[str, Any]:
        """Status, result or error, type and timestamps of a workflow's latest run.

        Raises:
            roost.Error: NotFound for an unknown workflow id.
        """
        return self._inspect("describe", workflow_id)  # type: ignore[no-any-return]

    def history(self, workflow_id: str) -> list[Any]:
        """Every event and command of a workflow's latest run, in order."""
        return self._inspect("history", workflow_id)  # type: ignore[no-any-return]

    def list_workflows(self, query: str | None = None) -> list[dict[str, Any]]:
        """Workflows matching ``query``, e.g. ``"status = 'running'"`` (see docs)."""
        return self._inspect("list_workflows", query)  # type: ignore[no-any-return]

    def _inspect(self, what: str, arg: Any) -> Any:
        host = self._node.workflows
        if host is None:
            raise Error("this node has no workflow runtime", kind=ErrorKind.INVALID_STATE)
        return getattr(host, what)(arg)

    @property
    def http_url(self) -> str | None:
        """The base URL of the HTTP triggers, e.g. ``"http://127.0.0.1:8123"``.

        The real port when 0 was asked; None when the node was opened without ``http=``.
        """
        server = self._node.ext.get("http")
        return None if server is None else server.url

    @property
    def admin_url(self) -> str | None:
        """The base URL of the admin server (JSON API, console, ``/metrics``), or None.

        None when the node was opened without ``admin=``; the token is in the data
        directory's ``admin.json`` (docs/admin.md).
        """
        server = self._node.ext.get("admin")
        return None if server is None else server.url

    def process_count(self) -> int:
        """Live processes, the attached one included."""
        return len(self._node.procs)

    @property
    def dlq(self) -> Any:
        """Dead letters of this node's queues (``list``, ``redrive``, ``discard``, ...)."""
        runtime = self._node.ext.get("queues")
        if runtime is None:
            raise Error("this node runs no queues", kind=ErrorKind.INVALID_STATE)
        return runtime.dlq

    def __repr__(self) -> str:
        return f"<roost node {self.name!r} incarnation={self.incarnation} dir={self.data_dir}>"


def _check_positive_int(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid(f"{what} must be an int >= 1, got {value!r}")


def _check_node_name(name: object) -> str:
    if not isinstance(name, str) or not name or any(ch in _FORBIDDEN for ch in name):
        raise invalid(
            f"node name must be a non-empty string without '{{}}|@: ' characters, got {name!r}"
        )
    return check_text(name, "node name")


def _data_dir(data_dir: object) -> Path:
    """The data directory, checked before anything is created in it or LMDB opens it.

    Raises:
        roost.Error: kind Invalid for a path that is (or is under) a file, or that this
            process cannot create or write.
    """
    if not isinstance(data_dir, str | os.PathLike):
        raise invalid(f"data_dir must be a path (str or os.PathLike), got {data_dir!r}")
    path = Path(data_dir)
    existing = path
    try:
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent  # the directory the missing ones are created in
        is_dir = existing.is_dir()
    except OSError as exc:  # a directory on the way that this process may not search
        raise invalid(
            f"data_dir {str(path)!r} cannot be reached ({exc.strerror}): pass a directory "
            "this process may write, or fix the permissions on the way to it",
            path=str(path),
        ) from None
    if not is_dir:
        what = "is a file" if existing == path else f"is under the file {str(existing)!r}"
        raise invalid(
            f"data_dir {str(path)!r} {what}, not a directory: pass the path of a directory "
            "(it is created if missing)",
            path=str(path),
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "is not writable" if existing == path else f"cannot be created in {str(existing)!r}"
        raise invalid(
            f"data_dir {str(path)!r} {why} (permission denied): pass a directory this "
            "process may write, or fix the permissions",
            path=str(path),
        )
    return path


@asynccontextmanager
async def open_node(
    app: App,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    name: str = "local",
    durability: str = "sync",
    shutdown_grace: Duration = "10s",
    root: Any = None,
    workflow_cache: int = 10_000,
    http: Any = None,
    workflow_unread_limit: int = 10_000,
    admin: str | None = None,
    workflow_host: WorkflowHostFactory | None = None,
    temporal: str | None = None,
    temporal_namespace: str = "default",
    temporal_ui: str | None = None,
    signing_keys: Mapping[str, bytes] | None = None,
    signing_key: str | None = None,
    loop_stall: Duration = "1s",
    mailbox_warning: int = 10_000,
    allowed_hosts: Any = None,
    cron: bool = True,
    on_damage: str = "salvage",
    retention: Duration | None = None,
) -> AsyncIterator[NodeHandle]:
    """Start a node; inside the block the calling task is itself a process.

    On exit every process gets a CANCEL ("node shutdown"); those still running after
    ``shutdown_grace`` are terminated.

    Args:
        app: the entries this node runs.
        data_dir: where durable state lives; None for a fresh temporary directory.
        name: the node name ("local" keeps PIDs short: ``{host|id}``).
        durability: "sync" (fsync every commit) or "fast" (no fsync).
        shutdown_grace: how long processes get to stop after the CANCEL.
        root: an entry (usually a supervisor) started linked to the block: if it fails,
            the block is stopped and ``open_node`` raises its error.
        workflow_cache: how many workflows keep their state in memory; others are
            rebuilt from their history (replay) when their next event arrives.
        http: serve the app's HTTP triggers (``app.http``): True or a port (on
            127.0.0.1), or ``"host:port"``; port 0 picks a free one (see ``http_url``).
            None (the default) serves nothing.
        workflow_unread_limit: how many messages a workflow may hold unread; a send past
            it is refused with LimitExceeded and nothing of it stored (docs/workflows.md).
        admin: serve the admin API, the web console and ``/metrics`` on ``"host:port"``
            (port 0 picks a free one; see ``admin_url``), behind a token written to
            ``admin.json`` in the data directory (docs/admin.md). A host other than a
            loopback address exposes the node's control to that network. None (the
            default) serves nothing.
        workflow_host: where the app's workflows run: a ``roost.workflow.WorkflowHostFactory``,
            called once as the node starts with its ``roost.workflow.NodeServices``; the
            async context manager it returns yields the ``roost.workflow.WorkflowHost`` and
            is left as the node closes (docs/workflows.md, "Workflow hosts"). None (the
            default): the embedded host, in ``data_dir``'s LMDB store.
        temporal: ``"host:port"`` of a Temporal server: the app's workflows run there
            (``roost.temporal.temporal_host``; needs ``roost[temporal]``, see
            docs/temporal.md). ``name`` must then be unique among the cluster's live nodes.
        temporal_namespace: the Temporal namespace, with ``temporal``.
        temporal_ui: the base address of the cluster's Temporal UI, with ``temporal``
            (``"http://127.0.0.1:8233"``): the admin console links each workflow to its
            page there. None: ``ROOST_TEMPORAL_UI``, or no links.
        signing_keys: the key ring that signs and verifies security contexts and relay
            tickets, ``{key_id: bytes}`` (docs/security.md); None: ``ROOST_SIGNING_KEYS``
            (``id1:hex,id2:hex``), or no ring. Verification accepts any key of the ring.
        signing_key: the id of the key that signs (default: the first).
        loop_stall: how long the event loop may go without running before the loop
            watchdog logs a WARNING naming the code that blocks it, with its stack, and
            counts the stall (``roost_loop_stalls_total``; docs/processes.md, "Blocking
            code").
        mailbox_warning: how many unread messages a process's mailbox may hold before a
            WARNING (once per process) and the ``roost_mailboxes_over_warning`` gauge.
        allowed_hosts: the ``Host`` names the HTTP trigger and admin servers answer (others
            get 421): host names, ``"host:port"``, ``"*.domain"`` or ``"*"``. None (the
            default): the bound address, localhost, 127.0.0.1 and [::1] (docs/security.md).
        cron: False: the app's cron triggers do not fire on this node (their stored last
            fire times stay as they are).
        on_damage: what to do with a store whose file has damaged pages (found before
            LMDB maps it): "salvage" (the default) copies every readable record into a new
            file and opens that, keeping the damaged file in ``damaged/``, logging what was
            lost and quarantining the workflows that lost rows; "refuse" raises
            Unavailable instead (docs/operating.md, "Store care").
        retention: how long a closed workflow is kept (``describe``, ``history``,
            ``list_workflows``) after its latest run closed: a background sweep then
            deletes its record and history, and it is NotFound (docs/operating.md,
            "Retention of closed workflows"). None (the default): kept forever. It applies
            to the embedded host; on Temporal the namespace's retention does.

    Raises:
        roost.Error: kind Invalid for a bad argument, before anything starts; InvalidState
            when another node (in this or another OS process, whose pid the message names)
            has ``data_dir`` open; Unavailable for a store no salvage can open (or any
            damaged one with ``on_damage="refuse"``), naming ``roost store check``.
    """
    if not isinstance(app, App):
        raise invalid(f"open_node needs a roost.App, got {type(app).__name__}")
    _check_node_name(name)
    if durability not in _DURABILITY:
        raise invalid(f"durability must be 'sync' or 'fast', got {durability!r}")
    grace = parse_duration(shutdown_grace, what="shutdown_grace")
    if isinstance(workflow_cache, bool) or not isinstance(workflow_cache, int):
        raise invalid(f"workflow_cache must be an int >= 1, got {workflow_cache!r}")
    if workflow_cache < 1:
        raise invalid(f"workflow_cache must be >= 1, got {workflow_cache}")
    _check_positive_int(workflow_unread_limit, "workflow_unread_limit")
    keyring = _keyring(signing_keys, signing_key)
    stall = parse_duration(loop_stall, what="loop_stall")
    if stall <= 0:
        raise invalid(f"loop_stall must be a positive duration, got {loop_stall!r}")
    _check_positive_int(mailbox_warning, "mailbox_warning")
    _check_on_damage(on_damage)
    kept = _retention(retention)
    if workflow_host is not None and not callable(workflow_host):
        raise invalid(
            "workflow_host must be a factory (a callable given the node's services that "
            f"returns an async context manager yielding a WorkflowHost), got {workflow_host!r}"
        )
    if temporal is not None or temporal_ui is not None:
        workflow_host = _temporal_host(temporal, temporal_namespace, temporal_ui, workflow_host)
    http_bind = _extension("http_bind")(http) if http is not None else None
    admin_bind = _extension("admin_bind")(admin) if admin is not None else None
    hosts = _extension("allowed_hosts")(allowed_hosts) if allowed_hosts is not None else None
    app.validate()
    root_entry = app.resolve(root) if root is not None else None
    temp = data_dir is None
    path = Path(tempfile.mkdtemp(prefix="roost-")) if data_dir is None else _data_dir(data_dir)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)  # the store makes it 0700 exactly
        # Holds the directory's lock until closed: one OS process per data directory.
        store = open_lmdb_store(
            path,
            durability=durability,  # type: ignore[arg-type]
            on_damage=on_damage,  # type: ignore[arg-type]
        )
        (path / "admin.json").unlink(missing_ok=True)  # a killed node's: this one holds the lock
        try:
            # Bumped and persisted before any PID exists: PIDs are never reused.
            incarnation = store.next_incarnation()
            node_args = {
                "name": name,
                "incarnation": incarnation,
                "store": store,
                "settings": {
                    "workflow_cache": workflow_cache,
                    "http": http_bind,
                    "workflow_unread_limit": workflow_unread_limit,
                    "admin": admin_bind,
                    "allowed_hosts": hosts,
                    "data_dir": path,
                    "workflow_host": workflow_host,
                    "keyring": keyring,
                    "loop_stall": stall,
                    "mailbox_warning": mailbox_warning,
                    "cron": bool(cron),
                    "retention": kept,
                },
            }
            async with _running(
                app, node_args=node_args, grace=grace, path=path, root=root_entry
            ) as handle:
                yield handle
        finally:
            if is_mock_clock(trio.lowlevel.current_clock()):
                store.close()  # a worker thread would let an autojumping clock skip ahead
            else:
                await store.aclose()
    finally:
        if temp:
            shutil.rmtree(path, ignore_errors=True)


def _retention(retention: Duration | None) -> float | None:
    if retention is None:
        return None
    seconds = parse_duration(retention, what="retention")
    if seconds <= 0:
        raise invalid(f"retention must be a positive duration or None, got {retention!r}")
    return seconds


def _check_on_damage(on_damage: object) -> None:
    if on_damage not in ("salvage", "refuse"):
        raise invalid(f"on_damage must be 'salvage' or 'refuse', got {on_damage!r}")


def _keyring(keys: Mapping[str, bytes] | None, active: str | None) -> KeyRing | None:
    """The node's key ring: the given keys, else ``ROOST_SIGNING_KEYS``, else none."""
    if keys is None:
        if active is not None:
            raise invalid("signing_key names a key of signing_keys; give signing_keys too")
        return KeyRing.from_env()
    return KeyRing.build(keys, active)


def _temporal_host(
    target: str | None, namespace: str, ui: str | None, given: WorkflowHostFactory | None
) -> WorkflowHostFactory:
    """The Temporal host's factory for ``open_node(temporal=...)``."""
    if target is None:
        raise invalid("temporal_ui is the Temporal UI of the temporal= cluster: give temporal=")
    if given is not None:
        raise invalid("give open_node either temporal= or workflow_host=, not both")
    try:
        from roost.temporal import temporal_host  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise invalid(
            f"open_node(temporal=...) needs the roost[temporal] extra ({exc}): "
            "pip install 'roost[temporal]'"
        ) from None
    if ui is None:
        ui = os.environ.get("ROOST_TEMPORAL_UI") or None
    return temporal_host(target, namespace=namespace, ui=ui)


@asynccontextmanager
async def _running(
    app: App, *, node_args: dict[str, Any], grace: float, path: Path, root: Entry | None
) -> AsyncIterator[NodeHandle]:
    body_error: BaseException | None = None
    start_error: Error | None = None
    killed: Error | None = None
    telemetry.refresh()  # before recovery: resumed activities and closes may trace
    async with trio.open_nursery() as system:
        async with trio.open_nursery() as nursery:
            node = Node(app, nursery=nursery, **node_args)
            system.start_soon(node.timers.run, name="roost.timers")
            watchdog = node.ext["loop_watchdog"] = LoopWatchdog(node.settings["loop_stall"])
            system.start_soon(watchdog.run, name="roost.loop-watchdog")
            try:
                for start_service in node_services():
                    await start_service(node, system)
            except Error as exc:  # a service that cannot start (a workflow host refusing)
                start_error = exc  # raised below, outside the nurseries (not in a group)
                system.cancel_scope.cancel()
            else:
                attached = node.attach()
                handle = NodeHandle(node, path, attached.pid)
                node.ext["handle"] = handle  # what the admin server serves (roost.admin)
                telemetry.log_node_opened(node, path)
                token = set_current(attached)
                try:
                    with attached.scope:
                        if root is not None:
                            await node.wait_ready(node.spawn(attached, root, (), _LINKED))
                        main = app.main_entry
                        if main is not None:  # after recovery: the services are up
                            handle._main_pid = node.spawn(attached, main, (), _LINKED)
                        yield handle
                except BaseException as exc:  # noqa: BLE001 - re-raised below, outside nurseries
                    body_error = exc
                finally:
                    reset_current(token)
                killed = attached.kill_error
                _exit_attached(node, attached, body_error)
                with trio.CancelScope(shield=body_error is not None):
                    await node.shutdown(0 if _is_cancel(body_error) else grace)
        system.cancel_scope.cancel()
    if start_error is not None:
        raise start_error
    if body_error is not None:
        raise body_error
    if killed is not None:
        raise killed.clone()


def _exit_attached(node: Node, attached: Any, body_error: BaseException | None) -> None:
    if attached.kill_error is not None:
        node.exit(attached, None, attached.kill_error)
    elif body_error is not None and not _is_cancel(body_error) and not only_ctrl_c(body_error):
        # A Ctrl-C stops the block as a cancel does: no failure of the block to log.
        node.exit(attached, None, Error.from_exception(body_error))
    else:
        node.exit(attached, None, None)


def _is_cancel(exc: BaseException | None) -> bool:
    return isinstance(exc, trio.Cancelled)


def run(
    app: App,
    entry: Any = None,
    *args: Any,
    data_dir: str | os.PathLike[str] | None = None,
    name: str = "local",
    durability: str = "sync",
    shutdown_grace: Duration = "10s",
    clock: trio.abc.Clock | None = None,
    workflow_host: WorkflowHostFactory | None = None,
) -> Any:
    """Start a node, run ``entry`` with ``args`` to completion, shut down, return its value.

    Without ``entry``, serve the app (its ``@app.main``, workflows, queues, cron) until
    SIGINT or SIGTERM, then shut down and return None. The keywords are ``open_node``'s;
    ``clock`` is the trio clock to run on. A Ctrl-C while ``entry`` runs shuts the node
    down and exits the program with status 130 and one line on stderr, no traceback.

    Raises:
        roost.Error: the entry's error (or the failure of the app's main).
    """

    async def main() -> Any:
        async with open_node(
            app,
            data_dir,
            name=name,
            durability=durability,
            shutdown_grace=shutdown_grace,
            workflow_host=workflow_host,
        ) as node:
            if entry is None:
                received = await _until_stopped()
                sys.stderr.write(f"roost: {received}: node {node.name!r} shut down\n")
                return None
            return await _exec(entry, *args)

    runner: Callable[..., Any] = trio.run
    try:
        # A Ctrl-C reaches the main task at its next checkpoint, never the middle of
        # whatever code runs when it arrives (a half-made change to the node's state
        # could leave its shutdown waiting forever); see docs/design-notes.md.
        return runner(main, clock=clock, restrict_keyboard_interrupt_to_checkpoints=True)
    except BaseException as exc:
        if not only_ctrl_c(exc):
            raise
    sys.stderr.write("roost: interrupted (Ctrl-C): the node shut down\n")
    raise SystemExit(130)


async def _until_stopped() -> str:
    """Wait for SIGINT or SIGTERM (forever outside the main thread); name what came."""
    if threading.current_thread() is not threading.main_thread():
        await trio.sleep_forever()  # only the main thread receives signals
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            return f"{signal.Signals(signum).name} received"
    return "stopped"  # pragma: no cover - a signal receiver never ends by itself


def only_ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` is a real Ctrl-C (alone, or a group of nothing else)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(only_ctrl_c(inner) for inner in exc.exceptions)
    return is_ctrl_c(exc)
