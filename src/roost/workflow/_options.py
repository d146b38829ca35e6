"""Workflow start options: validated all at once, before anything is stored."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Final

from roost._cron import parse_firing_cron
from roost._duration import parse_duration
from roost._errors import invalid
from roost._pid import check_pid_part
from roost.storage._store import MAX_KEY_SIZE
from roost.workflow._plan_start import CHAIN_OPTIONS  # every run of a workflow keeps them
from roost.workflow._retry import retry_policy

__all__ = [
    "CHAIN_OPTIONS",
    "CHILD_OPTIONS",
    "MAX_ID_BYTES",
    "check_attributes",
    "check_child_id",
    "check_child_options",
    "check_start_options",
    "check_workflow_id",
]

MAX_ID_BYTES: Final = 255
"""The longest workflow id (or workflow name) a start takes, in UTF-8 bytes.

An id is the key of its run in the ``runs`` table (LMDB keys hold at most 511 bytes) and
the start of the ids derived from it: a child started without an id gets
``<parent id>.<n>``. Half the key size leaves room for a dozen generations of those; a
derived id past the key size is refused when the child starts (give it an explicit id).
"""


def check_workflow_id(value: Any, what: str = "workflow id") -> str:
    """Return ``value`` if it can be a workflow id: a PID id of at most ``MAX_ID_BYTES``.

    Raises:
        roost.Error: kind Invalid for an empty or non-str id, one with '{', '}' or '|'
            (its PID would not parse back), a lone surrogate, or one that is too long.
    """
    text = check_pid_part(what, value, allow_at=True)
    size = len(text.encode("utf-8"))
    if size > MAX_ID_BYTES:
        raise invalid(
            f"{what} {text[:40]!r}... is {size} bytes long (UTF-8); at most {MAX_ID_BYTES} "
            "are allowed, so the keys derived from it fit: use a shorter id, e.g. a hash",
            size=size,
            max_bytes=MAX_ID_BYTES,
        )
    return text


def check_child_id(child_id: str) -> str:
    """Return a (derived) child id if its run key fits in the store.

    Raises:
        roost.Error: kind Invalid when it is longer than the store's key size.
    """
    size = len(child_id.encode("utf-8"))
    if size > MAX_KEY_SIZE:
        raise invalid(
            f"the child workflow id {child_id[:40]!r}... derived from its parent's id is "
            f"{size} bytes long, past the store's {MAX_KEY_SIZE}-byte key size: give the "
            "child (or an ancestor) an explicit, shorter id",
            size=size,
            max_bytes=MAX_KEY_SIZE,
        )
    return child_id


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
    return retry_policy(value, name).to_dict()


def _cron(name: str, value: Any) -> str:
    return parse_firing_cron(value, name).expression


def _attributes(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{name} must be a dict, got {value!r}")
    if name == "search_attributes":
        check_attributes(value, "search attribute")
    return value


def _workflow_id(name: str, value: Any) -> str:
    return check_workflow_id(value, f"workflow {name}")


_START_OPTIONS: dict[str, Callable[[str, Any], Any]] = {
    "id": _workflow_id,
    "name": _workflow_id,
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


def check_attributes(values: object, what: str) -> dict[str, Any]:
    """Validate search attributes: str, bool, int, float, list of str, aware datetime."""
    if not isinstance(values, Mapping):
        raise invalid(f"{what} must be a mapping of names to values, got {values!r}")
    out: dict[str, Any] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise invalid(f"{what} names must be identifiers (for queries), got {name!r}")
        ok = isinstance(value, str | bool | int | float) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        )
        if isinstance(value, dt.datetime):
            ok = value.tzinfo is not None
        if not ok:
            raise invalid(
                f"{what} {name!r} has an unsupported value {value!r}: use str, bool, int, "
                "float, a list of str, or an aware datetime",
            )
        out[name] = value
    return out
