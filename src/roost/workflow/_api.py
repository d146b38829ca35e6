"""``roost.workflow``: what workflow code can ask about itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, TypeVarTuple, overload

import attrs as _attrs

from roost._errors import Error, ErrorKind, invalid
from roost.actors._app import Entry
from roost.actors._current import maybe_current_process
from roost.storage._values import result_of
from roost.workflow._options import check_attributes

# A child's arguments and result, for type checkers.
_Ts = TypeVarTuple("_Ts")
_R = TypeVar("_R")

__all__ = [
    "CONTINUE_AS_NEW_SUGGESTED_AT",
    "WorkflowInfo",
    "attrs",
    "exec",
    "history_length",
    "history_size",
    "info",
    "is_continue_as_new_suggested",
    "version",
]


@_attrs.frozen(kw_only=True)
class WorkflowInfo:
    """The running workflow's identity and history size (``workflow.info()``)."""

    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    namespace: str
    attempt: int
    history_length: int
    history_size: int


def _driver() -> Any:
    proc = maybe_current_process()
    return proc.workflow if proc is not None else None


def info() -> WorkflowInfo | None:
    """The running workflow's info, or None outside a workflow."""
    driver = _driver()
    if driver is None or driver.started is None:
        return None
    started = driver.started
    return WorkflowInfo(
        workflow_id=started.workflow_id,
        run_id=started.run_id,
        workflow_type=started.workflow_type,
        task_queue=started.task_queue,
        namespace="default",
        attempt=started.attempt,
        history_length=driver.history_length,
        history_size=driver.history_size,
    )


def history_length() -> int:
    """Events in the run's history so far (0 outside a workflow)."""
    driver = _driver()
    return int(driver.history_length) if driver is not None else 0


def history_size() -> int:
    """Bytes of the run's history so far (0 outside a workflow)."""
    driver = _driver()
    return int(driver.history_size) if driver is not None else 0


# Wippy's guide suggests continue-as-new past 10,000 history events. The length (not the
# byte size) decides because replay recomputes it exactly, so the answer replays.
CONTINUE_AS_NEW_SUGGESTED_AT = 10_000


def is_continue_as_new_suggested() -> bool:
    """Whether this run's history is long enough to continue as new (False outside one).

    True once the history holds ``CONTINUE_AS_NEW_SUGGESTED_AT`` (10,000) events; a long-
    lived workflow checks it in its loop and calls ``process.upgrade(...)``.
    """
    driver = _driver()
    return driver is not None and int(driver.history_length) >= CONTINUE_AS_NEW_SUGGESTED_AT


def version(change_id: str, min_supported: int, max_supported: int) -> int:
    """Deterministic versioning: new runs get ``max_supported``, running ones keep theirs.

    Outside a workflow it returns ``max_supported``. Replaying a history made before the
    change returns -1 (``DEFAULT_VERSION``), so keep ``min_supported`` at -1 while such
    runs may still be open.

    Raises:
        roost.Error: kind Invalid for ``min_supported > max_supported``, or a recorded
            version outside the supported range.
    """
    driver = _driver()
    if driver is None:
        if min_supported > max_supported:
            raise invalid(
                f"workflow.version({change_id!r}): min_supported {min_supported} is greater "
                f"than max_supported {max_supported}"
            )
        return max_supported
    return int(driver.version(change_id, min_supported, max_supported))


def attrs(search: Mapping[str, Any] | None = None, memo: Mapping[str, Any] | None = None) -> bool:
    """Upsert this workflow's search attributes (queryable) and memo (shown by describe).

    Raises:
        roost.Error: kind Invalid outside a workflow, with neither argument, or for a search
            attribute of an unsupported type.
    """
    driver = _driver()
    if driver is None:
        raise Error("workflow.attrs() works only inside a workflow", kind=ErrorKind.INVALID)
    if search is None and memo is None:
        raise invalid("workflow.attrs needs search=... or memo=...")
    checked = check_attributes(search or {}, "search attribute")
    memo_values = dict(memo or {})
    driver.upsert_attributes(checked, memo_values)
    return True


@overload
async def exec(entry: Callable[[*_Ts], Awaitable[_R]], *args: *_Ts, **options: Any) -> _R: ...  # noqa: A001 - API name
@overload
async def exec(entry: str | Entry, *args: Any, **options: Any) -> Any: ...  # noqa: A001 - API name


# mypy cannot match ``*args: Any`` against the TypeVarTuple overload's ``*args``.
async def exec(entry: Any, *args: Any, **options: Any) -> Any:  # type: ignore[misc]  # noqa: A001 - API name
    """Run a child workflow and wait for it: its result, or its error raised here.

    Options: ``id`` (default: derived from the parent's id), ``parent_close_policy``
    (``"terminate"`` default, ``"abandon"``, ``"request_cancel"``), and the start options
    a child may take: timeouts, ``retry_policy``, ``cron_schedule``, ``start_delay``,
    ``search_attributes``, ``memo``, ``summary``, ``details``.

    Raises:
        roost.Error: the child's error (kind, retryable, message and details kept);
            Invalid outside a workflow or for an entry that is not a workflow.
    """
    proc = maybe_current_process()
    driver = proc.workflow if proc is not None else None
    if driver is None or proc is None:
        raise Error(
            "workflow.exec runs a child workflow and works only inside a workflow; "
            "from a process use process.exec",
            kind=ErrorKind.INVALID,
        )
    node = proc.node
    resolved = node.app.resolve(entry) if node is not None else None
    entry_id = resolved.id if resolved is not None else str(entry)
    if resolved is not None and resolved.kind.value != "workflow":
        raise invalid(f"workflow.exec runs workflow entries; {entry_id!r} is not one")
    value = await driver.exec_child(entry_id, args, options)
    fn = resolved.fn if resolved is not None else entry if callable(entry) else None
    return value if fn is None else result_of(fn, value)
