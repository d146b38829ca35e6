"""roost's start and activity options as temporalio's keyword arguments (pure mapping).

roost's id policies are chosen here, on the client side, by the rule book's own rule
(``roost.workflow._planner.conflict_policy``): an explicit id or name means
``use_existing`` while a run is open, a generated id ``fail`` (API.md, "process").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

import temporalio.common as tc
import temporalio.workflow as tw

from roost._errors import ErrorKind
from roost.temporal._failures import unsupported
from roost.workflow._planner import conflict_policy
from roost.workflow._retry import RetryPolicy

__all__ = [
    "CARRIED_MEMO",
    "CONTEXT_MEMO",
    "OWNER_MEMO",
    "PARENT_MEMO",
    "ROOST_MEMO",
    "STATUS_MEMO",
    "TRACE_MEMO",
    "WATCHERS_MEMO",
    "activity_kwargs",
    "child_kwargs",
    "retry_policy",
    "search_attributes",
    "search_dict",
    "search_updates",
    "start_kwargs",
    "user_memo",
]

# Memo keys of roost's own (the rest of the memo is the user's ``memo`` option).
CONTEXT_MEMO: Final = "roost.context"  # the run's ctx values
PARENT_MEMO: Final = "roost.parent"  # the PID that started it
STATUS_MEMO: Final = "roost.status"  # "canceled": it returned after a cancel request
# What a run that continued as new had not read: ``[[topic, payload, sender], ...]`` and
# ``["@cancel", reason]`` for a cancel it had not been given, for its next run.
CARRIED_MEMO: Final = "roost.carried"
# The node whose plain processes the run's spawns start on: the node that started it (or
# its parent's), so that a process spawned by any of its tasks lands on one known node.
OWNER_MEMO: Final = "roost.owner"
# The plain processes watching a run that continued as new, ``[[watcher, [kind, ...]], ...]``
# (kind "monitor" or "link"), for its next run to notify at its close.
WATCHERS_MEMO: Final = "roost.watchers"
# The traceparent of the span a run's span is a child of (the span current where it was
# started, or its parent run's span), when a tracing node started it (``_tracing``).
TRACE_MEMO: Final = "roost.trace"
ROOST_MEMO: Final = frozenset(
    {CARRIED_MEMO, CONTEXT_MEMO, OWNER_MEMO, PARENT_MEMO, STATUS_MEMO, TRACE_MEMO, WATCHERS_MEMO}
)

_CONFLICT: Final = {
    "fail": tc.WorkflowIDConflictPolicy.FAIL,
    "use_existing": tc.WorkflowIDConflictPolicy.USE_EXISTING,
    "terminate_existing": tc.WorkflowIDConflictPolicy.TERMINATE_EXISTING,
}
_REUSE: Final = {
    "allow_duplicate": tc.WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    "allow_duplicate_failed_only": tc.WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
    "reject_duplicate": tc.WorkflowIDReusePolicy.REJECT_DUPLICATE,
}
_PARENT_CLOSE: Final = {
    "terminate": tw.ParentClosePolicy.TERMINATE,
    "abandon": tw.ParentClosePolicy.ABANDON,
    "request_cancel": tw.ParentClosePolicy.REQUEST_CANCEL,
}
_TIMEOUTS: Final = ("execution_timeout", "run_timeout", "task_timeout")


def _delta(seconds: float | None) -> dt.timedelta | None:
    return None if seconds is None else dt.timedelta(seconds=seconds)


def retry_policy(data: Mapping[str, Any] | None) -> tc.RetryPolicy:
    """A roost ``RetryPolicy`` (its dict form) as Temporal's; the same defaults.

    ``non_retryable_error_kinds`` become ``non_retryable_error_types``: a roost error
    crosses as an ``ApplicationError`` whose type is its kind.
    """
    policy = RetryPolicy.from_dict(data or {})
    return tc.RetryPolicy(
        initial_interval=dt.timedelta(seconds=policy.initial_interval),
        backoff_coefficient=policy.backoff_coefficient,
        maximum_interval=_delta(policy.maximum_interval),
        maximum_attempts=policy.maximum_attempts,
        non_retryable_error_types=[kind.value for kind in policy.non_retryable_error_kinds],
    )


def activity_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """``workflow.execute_activity`` keywords for a scheduled activity's stored options."""
    return {
        "start_to_close_timeout": _delta(options.get("start_to_close_timeout")),
        "schedule_to_close_timeout": _delta(options.get("schedule_to_close_timeout")),
        "heartbeat_timeout": _delta(options.get("heartbeat_timeout")),
        "retry_policy": retry_policy(options.get("retry_policy")),
    }


def user_memo(memo: Mapping[str, Any]) -> dict[str, Any]:
    """The user's part of a workflow's memo (without roost's own keys)."""
    return {k: v for k, v in memo.items() if k not in ROOST_MEMO}


def _search_pair(name: str, value: Any) -> tc.SearchAttributePair[Any]:
    """The typed key of a roost search attribute by its value's type, with the value.

    The attribute must be registered on the cluster with that type (docs/temporal.md):
    text is ``Keyword``, a list of text ``KeywordList``, ``int`` ``Int``, ``float``
    ``Double``, ``bool`` ``Bool``, an aware datetime ``Datetime``.
    """
    key: tc.SearchAttributeKey[Any]
    if isinstance(value, bool):
        key = tc.SearchAttributeKey.for_bool(name)
    elif isinstance(value, int):
        key = tc.SearchAttributeKey.for_int(name)
    elif isinstance(value, float):
        key = tc.SearchAttributeKey.for_float(name)
    elif isinstance(value, str):
        key = tc.SearchAttributeKey.for_keyword(name)
    elif isinstance(value, dt.datetime):
        key = tc.SearchAttributeKey.for_datetime(name)
    else:  # check_attributes let only a list of str through
        key = tc.SearchAttributeKey.for_keyword_list(name)
        value = list(value)
    return tc.SearchAttributePair(key, value)


def search_attributes(search: Mapping[str, Any]) -> tc.TypedSearchAttributes:
    """Checked roost search attributes as Temporal's typed ones (``_search_pair``)."""
    return tc.TypedSearchAttributes([_search_pair(k, v) for k, v in search.items()])


def search_updates(search: Mapping[str, Any]) -> list[tc.SearchAttributeUpdate[Any]]:
    """``workflow.upsert_search_attributes`` updates for checked roost search attributes."""
    return [p.key.value_set(p.value) for p in (_search_pair(k, v) for k, v in search.items())]


_SYSTEM_SEARCH: Final = ("Temporal", "BuildIds")


def search_dict(typed: tc.TypedSearchAttributes) -> dict[str, Any]:
    """The user's search attributes of a run, by name (Temporal's own left out)."""
    return {
        pair.key.name: list(pair.value) if isinstance(pair.value, list) else pair.value
        for pair in typed
        if not pair.key.name.startswith(_SYSTEM_SEARCH)
    }


def _chain_kwargs(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords a top-level start and a child start share."""
    out: dict[str, Any] = {name: _delta(opts[name]) for name in _TIMEOUTS if name in opts}
    if opts.get("search_attributes"):
        out["search_attributes"] = search_attributes(opts["search_attributes"])
    if "retry_policy" in opts:
        out["retry_policy"] = retry_policy(opts["retry_policy"])
    cron = opts.get("cron_schedule")
    if cron is not None:
        if len(cron.split()) != 5:
            raise unsupported(
                f"the cron_schedule {cron!r} with seconds or a year (6 or 7 fields)",
                kind=ErrorKind.INVALID,
            )
        out["cron_schedule"] = cron
    if "summary" in opts:
        out["static_summary"] = opts["summary"]
    if "details" in opts:
        out["static_details"] = opts["details"]
    return out


def start_kwargs(
    opts: Mapping[str, Any], *, explicit: bool, default_queue: str, memo: Mapping[str, Any]
) -> dict[str, Any]:
    """``Client.start_workflow`` keywords for checked start options.

    Args:
        opts: the start options, checked (``check_start_options``).
        explicit: the id (or name) was given, not generated.
        default_queue: the task queue when ``task_queue`` is not set (the app's name).
        memo: roost's memo keys, merged over the user's ``memo``.

    Raises:
        roost.Error: kind Invalid for an option this host does not carry out yet.
    """
    conflict = conflict_policy(opts, explicit=explicit)
    out = _chain_kwargs(opts)
    out["task_queue"] = opts.get("task_queue", default_queue)
    out["id_conflict_policy"] = _CONFLICT[conflict]
    out["id_reuse_policy"] = _REUSE[opts.get("id_reuse_policy", "allow_duplicate")]
    out["memo"] = {**opts.get("memo", {}), **memo}
    if "start_delay" in opts and opts["start_delay"] > 0:
        out["start_delay"] = dt.timedelta(seconds=opts["start_delay"])
    return out


def child_kwargs(
    opts: Mapping[str, Any], *, parent_close_policy: str, task_queue: str, memo: Mapping[str, Any]
) -> dict[str, Any]:
    """``workflow.start_child_workflow`` keywords for a child's checked options.

    Raises:
        roost.Error: kind Invalid for an option this host does not carry out yet.
    """
    if opts.get("start_delay"):
        raise unsupported("a child workflow's start_delay", kind=ErrorKind.INVALID)
    out = _chain_kwargs(opts)
    out["task_queue"] = opts.get("task_queue", task_queue)
    out["parent_close_policy"] = _PARENT_CLOSE[parent_close_policy]
    out["memo"] = {**opts.get("memo", {}), **memo}
    return out
