"""Processes: PIDs, spawn, mailboxes, monitors, links, names, hosts, and the node."""

import typing as _typing

from roost import _lazy

if _typing.TYPE_CHECKING:
    from roost.actors._api import Receipt, Registry
    from roost.actors._app import App, Entry, EntryKind, HostSpec
    from roost.actors._events import Cancel, Event, EventKind, Exit, ExitResult, LinkDown
    from roost.actors._node import Node
    from roost.actors._open import NodeHandle, open_node, run
    from roost.actors._spawn import Spawner

# Where each public name lives; the first use of a name loads its module (PEP 562).
_NAMES = {
    "App": "roost.actors._app",
    "Cancel": "roost.actors._events",
    "Entry": "roost.actors._app",
    "EntryKind": "roost.actors._app",
    "Event": "roost.actors._events",
    "EventKind": "roost.actors._events",
    "Exit": "roost.actors._events",
    "ExitResult": "roost.actors._events",
    "HostSpec": "roost.actors._app",
    "LinkDown": "roost.actors._events",
    "Node": "roost.actors._node",
    "NodeHandle": "roost.actors._open",
    "Receipt": "roost.actors._api",
    "Registry": "roost.actors._api",
    "Spawner": "roost.actors._spawn",
    "open_node": "roost.actors._open",
    "run": "roost.actors._open",
}
__getattr__, __dir__ = _lazy.attach(__name__, _NAMES)

__all__ = [
    "App",
    "Cancel",
    "Entry",
    "EntryKind",
    "Event",
    "EventKind",
    "Exit",
    "ExitResult",
    "HostSpec",
    "LinkDown",
    "Node",
    "NodeHandle",
    "Receipt",
    "Registry",
    "Spawner",
    "open_node",
    "run",
]
