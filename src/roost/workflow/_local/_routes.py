"""What the local host's activation plans read of it (``_plan.Routes``), read-only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from roost import _telemetry as telemetry
from roost._entropy import random_bytes
from roost._errors import Error
from roost.workflow._local._unread import check_room
from roost.workflow._planner import plan_child_start, unloadable_error

if TYPE_CHECKING:
    from roost._pid import Pid
    from roost._security import KeyRing
    from roost.actors._app import App, Entry
    from roost.actors._registry import Registry
    from roost.storage import Codec
    from roost.workflow._local._run import Run
    from roost.workflow._local._runs import RunTable

__all__ = ["HostRoutes"]


class HostRoutes:
    """The local host's open runs, names and limits, as plans read them."""

    __slots__ = (
        "_app",
        "_input_of",
        "_quarantined",
        "_registry",
        "_route",
        "_runs",
        "_timer_rows",
        "_unloadable",
        "_unread_limit",
        "codec",
        "host",
        "keyring",
        "node_name",
    )

    def __init__(
        self,
        *,
        codec: Codec,
        host: str,
        node_name: str,
        app: App,
        registry: Registry,
        runs: RunTable,
        route: Callable[[Pid], tuple[Run, int | None] | None],
        unread_limit: int,
        quarantined: set[str],
        unloadable: dict[str, Error],
        input_of: Callable[[Run], list[Any]],
        timer_rows: Callable[[Run], list[bytes]],
        keyring: KeyRing | None = None,
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            codec: encodes every row.
            host: the host of workflow PIDs.
            node_name: the node's name.
            app: resolves entries.
            registry: registered names.
            runs: the open runs (and the child ids other steps stage).
            route: the open run (and call seq) a message to a PID goes to.
            unread_limit: how many unread messages a run may hold.
            quarantined: ids whose stored rows are unreadable.
            unloadable: ids whose stored run this node's app cannot run.
            input_of: a run's input.
            timer_rows: a run's stored timer rows.
            keyring: the node's signing keys (children's security contexts are sealed
                with them).
        """
        self.codec, self.host, self.node_name = codec, host, node_name
        self._app, self._registry, self._runs, self._route = app, registry, runs, route
        self._unread_limit = unread_limit
        self._quarantined, self._unloadable = quarantined, unloadable
        self._input_of, self._timer_rows = input_of, timer_rows
        self.keyring = keyring

    @property
    def tracing(self) -> bool:
        """Whether new runs get a trace (switched on and off with telemetry)."""
        return telemetry.tracing

    def route(self, pid: Pid) -> tuple[Run, int | None] | None:
        """The open run a message to ``pid`` goes to, with the call seq of a reply address."""
        return self._route(pid)

    def lookup(self, name: object) -> Pid | None:
        """The PID registered under ``name``, if any."""
        return self._registry.lookup(name) if isinstance(name, str) else None

    def room(self, run: Run, count: int) -> Error | None:
        """The error that refuses ``count`` more messages for ``run``, or None."""
        try:
            check_room(self._unread_limit, run, count)
        except Error as exc:
            return exc
        return None

    def child_refusal(self, workflow_id: str, *, taken: bool) -> Error | None:
        """Why a child cannot start under ``workflow_id`` now, or None."""
        cause = self._unloadable.get(workflow_id)
        if cause is not None:
            return unloadable_error(workflow_id, cause)
        return plan_child_start(
            workflow_id,
            taken=workflow_id in self._runs or taken,
            quarantined=workflow_id in self._quarantined,
            staged=self._runs.child_staged(workflow_id),
        )

    def resolve(self, entry_id: str) -> Entry:
        """The app's entry ``entry_id`` (raises ``roost.Error`` if it has none)."""
        return self._app.resolve(entry_id)

    def input_of(self, run: Run) -> list[Any]:
        """The input ``run`` started with (for a retry or the next cron run)."""
        return self._input_of(run)

    def timer_rows(self, run: Run) -> list[bytes]:
        """The stored rows of ``run``'s timers."""
        return self._timer_rows(run)

    def entropy(self) -> bytes:
        """16 fresh random bytes: a new run's id and seed."""
        return random_bytes(16)
