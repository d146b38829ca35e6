"""Authorization inside the runtime: may the calling process take this action?

The runtime asks before it acts (docs/security.md, "Authorization"): a process with a
security context may take an action when one of its scope's policies returns True for
``(actor, action, resource)``; a denial raises PermissionDenied before anything changes. A
process without a context is not checked, unless its app is ``secure``; the code of the
``open_node`` block (the program that opened the node) is never checked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from roost._errors import shown
from roost._pid import Pid
from roost._security import SECURITY_KEY, actor_of, control_error, denied, ticket_error
from roost.actors._current import activity_context, bound_node, maybe_current_process

__all__ = [
    "authorize",
    "authorize_caller",
    "authorize_sender",
    "caller_security",
    "check_control",
    "check_relay",
    "is_secured",
    "resource_text",
]

log = logging.getLogger("roost.security")


def is_secured(proc: Any) -> bool:
    """Whether ``proc`` is checked at all (it has a context, or its app is secure)."""
    context = proc.context
    if context and SECURITY_KEY in context:
        return True
    return bool(proc.node is not None and proc.node.app.secure and proc.entry is not None)


def resource_text(value: object) -> str:
    """``value`` as a policy's resource: a str as is, anything else shown safely.

    The value is the caller's input, checked after the policies are asked: its own
    ``__str__`` is never called (it may raise, or lie).
    """
    if type(value) is str:
        return value
    if type(value) is Pid:
        return str(value)
    return shown(value)


def authorize(proc: Any, action: str, resource: object) -> None:
    """Raise PermissionDenied unless ``proc`` may take ``action`` on ``resource``."""
    resource = resource_text(resource)
    context = proc.context
    sec = context.get(SECURITY_KEY) if context else None
    if sec is None:
        node = proc.node
        if node is not None and node.app.secure and proc.entry is not None:
            raise denied(
                f"app {node.app.name!r} is secure and {proc.pid} has no security context: "
                f"it may not {action} {resource!r}; start it with Spawner.with_actor / "
                "with_scope",
                action=action,
                resource=resource,
            )
        return
    actor = actor_of(context)
    names = list(sec.get("policies") or ())
    app = proc.node.app if proc.node is not None else None
    for name in names:
        fn = app.find_policy(name) if app is not None else None
        if fn is None:
            continue
        try:
            allowed = fn(actor, action, resource)
        except Exception as exc:  # noqa: BLE001 - a policy that fails denies
            log.warning("policy %r raised on %s %r: %r; denied", name, action, resource, exc)
            allowed = False
        if allowed is True:
            return
    who = actor.id if actor is not None else "a process without an actor"
    raise denied(
        f"{who} may not {action} {resource!r}: no policy of its scope "
        f"({', '.join(names) or 'empty'}) allows it",
        action=action,
        resource=resource,
        actor=who,
    )


def check_relay(node: Any, pid: Any, topic: str, ticket: object) -> None:
    """Raise PermissionDenied unless ``ticket`` admits ``topic`` to ``pid``, if it is secured.

    For messages that enter from outside the node's processes (the admin API): a process's
    own sends are signed by the node.
    """
    host = node.workflow_host_of(pid)
    secured = getattr(host, "secured", None)  # the embedded host; Temporal's checks none yet
    if secured is None or not secured(pid):
        return
    refused = ticket_error(ticket, pid.id, topic, node.settings.get("keyring"))
    if refused is not None:
        raise refused


def check_control(node: Any, pid: Any, action: str, ticket: object) -> None:
    """Raise PermissionDenied unless ``ticket`` lets its holder ``action`` ``pid``, if secured.

    For cancel and terminate from outside the node's processes (the admin API, the
    console): only a holder of the node's key ring changes a secured workflow from there.
    """
    host = node.workflow_host_of(pid)
    secured = getattr(host, "secured", None)
    if secured is None or not secured(pid):
        return
    refused = control_error(ticket, pid.id, action, node.settings.get("keyring"))
    if refused is not None:
        raise refused


@attrs.frozen
class _ActivityCaller:
    """An activity as ``authorize`` sees it: its workflow's context, on its node."""

    context: Mapping[str, Any]
    node: Any
    entry: str = "activity"
    pid: str = "an activity"


def authorize_caller(action: str, *parts: object) -> None:
    """``authorize`` for whoever calls: a process, or an activity run by a workflow.

    The resource is ``parts`` joined by ``/`` (``"<scope>/<key>"``). Outside both (a
    queue runtime's own delivery, a test with a bound node) nothing is checked: the
    caller is the runtime itself.
    """
    proc = maybe_current_process()
    if proc is not None:
        if proc.context or (proc.node is not None and proc.node.app.secure):
            authorize(proc, action, "/".join(resource_text(p) for p in parts))
        return
    port = activity_context.get()
    context = port.context if port is not None else None
    if context and SECURITY_KEY in context:
        resource = "/".join(resource_text(p) for p in parts)
        authorize(_ActivityCaller(context, bound_node()), action, resource)


def caller_security() -> Mapping[str, Any] | None:
    """The security context of whoever calls (a process, or an activity run by a workflow).

    None without one. A workflow's is its sealed envelope; a process's its claim.
    """
    proc = maybe_current_process()
    context: Mapping[str, Any] | None = None
    if proc is not None:
        context = proc.context
    else:
        port = activity_context.get()
        context = port.context if port is not None else None
    sec = context.get(SECURITY_KEY) if context else None
    return sec if isinstance(sec, Mapping) else None


def authorize_sender(
    node: Any, sender: Pid, context_of: Any, action: str, resource: object
) -> None:
    """Raise PermissionDenied unless the process or workflow ``sender`` may take ``action``.

    For what a start does to an existing run (start messages, terminate_existing): the
    starter is looked up by PID, a plain process on ``node`` or a workflow whose context
    ``context_of(pid)`` returns (None when it is neither: the node's own code).
    """
    proc = node.procs.get(sender)
    if proc is not None:
        authorize(proc, action, resource)
        return
    context = context_of(sender)
    if context is not None:
        authorize(_ActivityCaller(context, node, "workflow", str(sender)), action, resource)
