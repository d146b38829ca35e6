"""Processes: PIDs, spawn, mailboxes, monitors, links, names, hosts, and the node."""

from roost.actors._api import Receipt, Registry
from roost.actors._app import App, Entry, EntryKind, HostSpec
from roost.actors._events import Cancel, Event, EventKind, Exit, LinkDown
from roost.actors._node import ExitResult, Node
from roost.actors._open import NodeHandle, open_node, run
from roost.actors._spawn import Spawner

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
