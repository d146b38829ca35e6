"""Starting a workflow id that may be taken: the id conflict and reuse policies, names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roost._pid import Pid
from roost.workflow._options import already_error
from roost.workflow._quarantine import quarantined_error
from roost.workflow._records import RunStatus

if TYPE_CHECKING:
    from roost.workflow._manager import WorkflowManager

__all__ = ["claim_name", "make_room"]


async def make_room(
    m: WorkflowManager,
    workflow_id: str,
    *,
    explicit: bool,
    opts: dict[str, Any],
    messages: tuple[tuple[str, Any], ...],
    sender: Pid,
) -> Pid | None:
    """Apply the id policies; the running PID to return (use_existing), or None to start.

    Raises:
        roost.Error: AlreadyExists when the policies refuse; InvalidState for a quarantined id.
    """
    if workflow_id in m.quarantined:
        raise quarantined_error(workflow_id)
    replaced = False
    while True:
        while workflow_id in m.closing:  # a terminate of this id is committing
            await m.closing[workflow_id].wait_closed()
        existing = m.runs.get(workflow_id)
        if existing is None:
            break
        policy = opts.get("id_conflict_policy") or ("use_existing" if explicit else "fail")
        if opts.get("execution_error_when_already_started") and policy != "terminate_existing":
            policy = "fail"
        if policy == "fail":
            raise already_error(workflow_id, existing.pid, "is already running")
        if policy == "use_existing":
            await m.signal_many(existing, messages, sender)
            return existing.pid
        # terminate_existing: the same path as terminate (watchers and concurrent
        # starts of this id wait for the close), then look again.
        m.terminate(existing.pid)
        await existing.wait_closed()
        replaced = True
    if not replaced:
        _check_reuse(m, workflow_id, opts.get("id_reuse_policy", "allow_duplicate"))
    return None


def claim_name(m: WorkflowManager, name: str, pid: Pid) -> None:
    """Register ``name`` for ``pid``, taking it over from a dead holder."""
    holder = m.node.registry.lookup(name)
    if holder is not None and holder != pid and not m.node.alive(holder):
        m.node.registry.unregister(name)
    m.node.registry.register(name, pid)  # AlreadyExists if a live process has it


def _check_reuse(m: WorkflowManager, workflow_id: str, policy: str) -> None:
    if policy == "allow_duplicate":
        return  # the default: no need to read what ran before
    record = m.stored_record(workflow_id)
    if record is None:
        return
    if policy == "reject_duplicate":
        raise already_error(workflow_id, None, "ran before and id_reuse_policy is reject_duplicate")
    if record.status is RunStatus.COMPLETED:  # allow_duplicate_failed_only
        raise already_error(
            workflow_id, None, "completed and id_reuse_policy is allow_duplicate_failed_only"
        )
