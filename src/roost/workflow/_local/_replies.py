"""Reply addresses of ``process.call`` made inside workflows.

A workflow's call sends its request from a private address, ``{node@<app>:replies|<run
id>.<seq>.<workflow id>}``. What is sent there is recorded in that run's history as a
``MessageArrived`` marked with the call's seq, so concurrent calls never mix and a replay
sees the same replies. The address is not a process: it can only receive (the manager
answers every other call on one as for a PID that is not alive).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from roost._errors import not_found
from roost._pid import Pid
from roost._security import denied
from roost.workflow._history import MessageArrived

if TYPE_CHECKING:
    from collections.abc import Callable

    from roost.storage import Codec
    from roost.workflow._local._run import Run
    from roost.workflow._local._runs import RunTable

__all__ = ["ReplyHost"]


class ReplyHost:
    """The reply addresses of workflows' calls (see the module docstring)."""

    def __init__(
        self,
        *,
        node_name: str,
        app_name: str,
        runs: RunTable,
        codec: Codec,
        from_outside: Callable[[Run, MessageArrived], trio.Event],
        holder: Callable[[str], Pid | None],
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            node_name: the node's name (the node part of reply addresses).
            app_name: the app's name (reply addresses are on ``<app>:replies``).
            runs: the run table (the run a reply address belongs to).
            codec: checks a reply's payload.
            from_outside: queues a reply for its run's inbox.
            holder: the PID holding a registered name now, if any (a call to a name).
        """
        self._node_name, self._runs, self._codec = node_name, runs, codec
        self._from_outside, self._holder = from_outside, holder
        self.host = f"{app_name}:replies"

    def pid(self, run: Run, seq: int) -> Pid:
        """The reply address of call ``seq`` of ``run``."""
        record = run.record
        address = f"{record.run_id}.{seq}.{record.workflow_id}"
        return Pid.trusted(self._node_name, self.host, address)

    def route(self, pid: Pid) -> tuple[Run, int] | None:
        """The open run and call seq a reply address belongs to, if it is still open."""
        run_id, _, rest = pid.id.partition(".")
        seq, _, workflow_id = rest.partition(".")
        run = self._runs.get(workflow_id)
        if run is None or run.record.run_id != run_id or not seq.isdigit():
            return None
        return run, int(seq)

    def signal(self, sender: Pid | None, pid: Pid, topic: str, payload: Any) -> trio.Event:
        """Record a reply into the calling run's history.

        Only what was called may reply: a reply address is guessable, so a reply from any
        other sender (or none) is refused and nothing is stored.

        Raises:
            roost.Error: NotFound when the address belongs to no open call; PermissionDenied
                when ``sender`` is not the call's destination.
        """
        found = self.route(pid)
        if found is None:
            raise not_found(f"reply address {pid} belongs to no open workflow run", pid=str(pid))
        run, seq = found
        dest = run.call_destination(seq)
        if dest is None:
            raise not_found(f"reply address {pid} belongs to no open call", pid=str(pid))
        if not self._is_callee(sender, dest):
            raise denied(
                f"only {dest} may reply to call {seq} of workflow {run.record.workflow_id!r}; "
                f"{sender if sender is not None else 'a sender without a PID'} is not it",
                pid=str(pid),
            )
        self._codec.encode(payload, what=f"payload of reply {topic!r}")
        event = MessageArrived(topic=topic, payload=payload, sender=sender, call=seq)
        return self._from_outside(run, event)

    def _is_callee(self, sender: Pid | None, dest: object) -> bool:
        if sender is None:
            return False
        if isinstance(dest, str):  # a call to a name: its holder replies
            held = self._holder(dest)
            return held is not None and _same(held, sender)
        return isinstance(dest, Pid) and _same(dest, sender)


def _same(a: Pid, b: Pid) -> bool:
    return a.host == b.host and a.id == b.id and a.node == b.node
