"""Workflow start options: validated all at once, before anything is stored."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from roost._cron import parse_cron
from roost._duration import parse_duration
from roost._errors import Error, ErrorKind, invalid
from roost._pid import Pid
from roost.workflow._api import check_attributes
from roost.workflow._retry import RetryPolicy

__all__ = [
    "CHAIN_OPTIONS",
    "CHILD_OPTIONS",
    "already_error",
    "check_child_options",
    "check_start_options",
]


def _one_of(*values: str) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if value not in values:
            raise invalid(f"{name} must be one of {', '.join(values)}, got {value!r}")
        return value

    return check


def _typed(kind: type) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
            raise invalid(f"{name} must be a {kind.__name__}, got {value!r}")
        if kind is str and not value:
            raise invalid(f"{name} must be a non-empty string")
        return value

    return check


def _duration(*, allow_zero: bool) -> Callable[[str, Any], float]:
    def check(name: str, value: Any) -> float:
        return parse_duration(value, what=name, allow_zero=allow_zero)

    return check


def _retry_policy(name: str, value: Any) -> dict[str, Any]:
    policy = RetryPolicy(**value) if isinstance(value, Mapping) else value
    if not isinstance(policy, RetryPolicy):
        raise invalid(f"{name} must be a roost.RetryPolicy (or its keyword dict), got {value!r}")
    return policy.to_dict()


def _cron(name: str, value: Any) -> str:
    schedule = parse_cron(value)
    if schedule.next_after(dt.datetime.now(dt.UTC)) is None:
        raise invalid(f"{name} {value!r} never fires again; nothing would run")
    return schedule.expression


def _attributes(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{name} must be a dict, got {value!r}")
    if name == "search_attributes":
        check_attributes(value, "search attribute")
    return value


_START_OPTIONS: dict[str, Callable[[str, Any], Any]] = {
    "id": _typed(str),
    "name": _typed(str),
    "task_queue": _typed(str),
    "id_conflict_policy": _one_of("fail", "use_existing", "terminate_existing"),
    "id_reuse_policy": _one_of(
        "allow_duplicate", "allow_duplicate_failed_only", "reject_duplicate"
    ),
    "execution_error_when_already_started": _typed(bool),
    "search_attributes": _attributes,
    "memo": _attributes,
    "execution_timeout": _duration(allow_zero=False),
    "run_timeout": _duration(allow_zero=False),
    "task_timeout": _duration(allow_zero=False),
    "retry_policy": _retry_policy,
    "cron_schedule": _cron,
    "start_delay": _duration(allow_zero=True),
    "parent_close_policy": _one_of("terminate", "abandon", "request_cancel"),
    "summary": _typed(str),
    "details": _typed(str),
}

# Options every run of a workflow keeps (retries, cron runs, continue-as-new).
CHAIN_OPTIONS = frozenset(
    {"retry_policy", "cron_schedule", "run_timeout", "task_timeout", "execution_timeout"}
)
# What a child workflow may set (the id policies belong to top-level starts).
CHILD_OPTIONS = CHAIN_OPTIONS | {
    "id",
    "name",
    "parent_close_policy",
    "start_delay",
    "search_attributes",
    "memo",
    "summary",
    "details",
}


def check_start_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate workflow start options and normalise them to plain, storable values.

    Durations become seconds, a retry policy its dict form, a cron expression its
    canonical text. All are checked before anything is stored.

    Raises:
        roost.Error: kind Invalid naming the option and what it accepts.
    """
    out: dict[str, Any] = {}
    for name, value in options.items():
        check = _START_OPTIONS.get(name)
        if check is None:
            known = ", ".join(sorted(_START_OPTIONS))
            raise invalid(f"unknown workflow start option {name!r}; known: {known}", option=name)
        out[name] = check(name, value)
    workflow_id = out.get("id") or out.get("name")
    if workflow_id is not None and "|" in workflow_id:
        raise invalid(f"a workflow id must be a non-empty string without '|', got {workflow_id!r}")
    return out


def check_child_options(options: Mapping[str, Any]) -> tuple[str | None, str, dict[str, Any]]:
    """Validate a child workflow's options: (id or None, parent_close_policy, the rest).

    Raises:
        roost.Error: kind Invalid for a bad value or an option children do not take.
    """
    extra = set(options) - CHILD_OPTIONS
    if extra:
        raise invalid(
            f"child workflows do not take {', '.join(sorted(extra))}; they take "
            f"{', '.join(sorted(CHILD_OPTIONS))}"
        )
    checked = check_start_options(options)
    workflow_id = checked.pop("id", None) or checked.pop("name", None)
    checked.pop("name", None)
    policy = checked.pop("parent_close_policy", "terminate")
    return workflow_id, policy, checked


def already_error(workflow_id: str, pid: Pid | None, why: str) -> Error:
    return Error(
        f"workflow {workflow_id!r} {why}; pick another id or change the id policy",
        kind=ErrorKind.ALREADY_EXISTS,
        details={"workflow_id": workflow_id, "existing_pid": str(pid) if pid else None},
    )
