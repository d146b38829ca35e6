"""Workflow start options: validated all at once, before anything is stored."""

from __future__ import annotations

from typing import Any

from roost._errors import Error, ErrorKind, invalid
from roost._pid import Pid
from roost.workflow._api import check_attributes

__all__ = ["already_error", "check_start_options"]


_START_OPTIONS: dict[str, type | tuple[str, ...]] = {
    "id": str,
    "name": str,
    "task_queue": str,
    "id_conflict_policy": ("fail", "use_existing", "terminate_existing"),
    "id_reuse_policy": ("allow_duplicate", "allow_duplicate_failed_only", "reject_duplicate"),
    "execution_error_when_already_started": bool,
    "search_attributes": dict,
    "memo": dict,
}


def check_start_options(options: dict[str, Any]) -> dict[str, Any]:
    """Validate workflow start options (all or nothing, before anything is stored).

    Raises:
        roost.Error: kind Invalid for a bad value or an option this version does not
            implement yet (rather than ignoring it silently).
    """
    for name, value in options.items():
        rule = _START_OPTIONS.get(name)
        if rule is None:
            raise invalid(
                f"workflow start option {name!r} is not supported yet; supported: "
                f"{', '.join(sorted(_START_OPTIONS))}",
                option=name,
            )
        if isinstance(rule, tuple):
            if value not in rule:
                raise invalid(f"{name} must be one of {', '.join(rule)}, got {value!r}")
        elif not isinstance(value, rule) or (rule is str and not value):
            raise invalid(f"{name} must be a non-empty {rule.__name__}, got {value!r}")
    if "search_attributes" in options:
        check_attributes(options["search_attributes"], "search attribute")
    workflow_id = options.get("id") or options.get("name")
    if workflow_id is not None and (not workflow_id or "|" in workflow_id):
        raise invalid(f"a workflow id must be a non-empty string without '|', got {workflow_id!r}")
    return options


def already_error(workflow_id: str, pid: Pid | None, why: str) -> Error:
    return Error(
        f"workflow {workflow_id!r} {why}; pick another id or change the id policy",
        kind=ErrorKind.ALREADY_EXISTS,
        details={"workflow_id": workflow_id, "existing_pid": str(pid) if pid else None},
    )
