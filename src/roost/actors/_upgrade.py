"""``Upgrade``: the control-flow exception behind ``process.upgrade`` (and continue-as-new).

Kept apart from the process record so that the workflow driver, which catches it, imports
no trio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roost.actors._app import Entry

__all__ = ["Upgrade"]


class Upgrade(BaseException):
    """Raised by ``process.upgrade`` to swap the running code; caught by the trampoline.

    A BaseException so that ``except Exception`` in user code does not swallow it.
    """

    def __init__(self, entry: Entry, args: tuple[Any, ...]) -> None:
        super().__init__(entry.id)
        self.entry = entry
        self.args = args
