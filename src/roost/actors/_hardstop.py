"""Hard stop without a cancel scope per process: the scope is attached on first use.

``process.terminate`` must stop a process wherever it is blocked (a roost receive, a
foreign trio wait, a nursery it opened), keep every later checkpoint of the process
cancelled while it unwinds, and leave the rest of the node alone. A trio ``CancelScope``
entered around the process body does exactly that, but an entered scope costs ~0.7 KB
and two context-manager passes per process, and almost no process is ever terminated.

So a process body runs without a scope of its own, and the scope is made only when it
is needed (``attach``): a new cancel status is slotted into the task's cancel-status tree
right under the node nursery's, above whatever scopes and nurseries the body has open, as
if the body had been entered inside it from the start. Cancelling it then behaves exactly
as an entered scope would (it reaches nested nurseries, respects shields inside the body,
and stays cancelled), and the trampoline exits it like a ``with`` block when the body ends.

trio has no public call to enter a scope on behalf of another task, so this uses the same
internals trio itself uses to move tasks between nurseries (``TaskStatus.started``): a
task's active cancel status and the status tree's parent links. ``ATTACH_SUPPORTED`` checks
they exist; on a trio without them every process enters its scope eagerly, as before.
"""

from __future__ import annotations

from typing import Any

import trio

from roost._errors import Error, ErrorKind

__all__ = ["ATTACH_SUPPORTED", "attach"]


def _status_class() -> Any:
    try:
        from trio._core._run import CancelStatus  # noqa: PLC0415 - private, probed once
    except ImportError:  # pragma: no cover - a trio that reorganised its internals
        return None
    parent = getattr(CancelStatus, "parent", None)
    if not isinstance(parent, property) or parent.fset is None:  # pragma: no cover
        return None
    return CancelStatus


_CancelStatus = _status_class()

ATTACH_SUPPORTED: bool = (
    _CancelStatus is not None
    and hasattr(trio.CancelScope, "_cancel_status")
    and hasattr(trio.CancelScope, "_has_been_entered")
    and hasattr(trio.lowlevel.Task, "_cancel_status")
    and hasattr(trio.lowlevel.Task, "_activate_cancel_status")
)


@trio.lowlevel.enable_ki_protection
def attach(task: trio.lowlevel.Task) -> trio.CancelScope:
    """A scope that ``task`` behaves as if it had entered first thing in its body.

    ``task`` must have been started with ``start_soon`` (its base cancel status is its
    nursery's) and still be running; its trampoline must ``__exit__`` the scope when the
    body ends, as a ``with`` block would.

    Raises:
        roost.Error: kind Internal when the task's cancel scopes are misnested (trio has
            already reported that; nothing is changed).
    """
    nursery = task.parent_nursery
    assert nursery is not None
    base = nursery.cancel_scope._cancel_status
    current = task._cancel_status
    # The body's outermost open scope (or the task itself): what the new status goes above.
    outer: Any = current
    while outer is not base and outer is not None and outer.parent is not base:
        outer = outer.parent
    if outer is None:
        raise Error(
            f"cannot hard-stop {task!r}: its cancel scopes are misnested",
            kind=ErrorKind.INTERNAL,
        )
    scope = trio.CancelScope()
    status = _CancelStatus(scope=scope, parent=base)
    scope._cancel_status = status
    scope._has_been_entered = True
    if current is base:
        task._activate_cancel_status(status)
    else:
        outer.parent = status
    return scope
