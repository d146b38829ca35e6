"""How the command line signs its changes: as ``operator:<user>``, with the node's key ring.

The ring comes from ``--key-file FILE`` (lines ``id:hex``; the first key signs) or the
``ROOST_SIGNING_KEYS`` environment variable (``id1:hex,id2:hex``). Without one, a command
that changes a secured workflow is refused (docs/security.md).
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import click

from roost._security import KeyRing, make_control_ticket, make_ticket

__all__ = [
    "key_file_option",
    "operator_actor",
    "operator_control",
    "operator_ring",
    "operator_ticket",
]

key_file_option = click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The node's key ring (lines id:hex): signs the change as operator:<user>. "
    "Default: $ROOST_SIGNING_KEYS.",
)


def operator_actor() -> str:
    """``operator:<user>``: the actor the command line acts as."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        user = "unknown"
    return f"operator:{user}"


def operator_ring(key_file: Path | None) -> KeyRing | None:
    """The ring in ``key_file``, else in ``ROOST_SIGNING_KEYS``, else None."""
    if key_file is not None:
        return KeyRing.from_file(key_file)
    return KeyRing.from_env()


def operator_ticket(ring: KeyRing | None, workflow_id: str, topic: str) -> dict[str, Any] | None:
    """The operator's relay ticket for ``topic`` to ``workflow_id`` (None without a ring)."""
    if ring is None:
        return None
    return make_ticket(ring, workflow_id, topic, operator_actor())


def operator_control(ring: KeyRing | None, workflow_id: str, action: str) -> dict[str, Any] | None:
    """The operator's ticket to ``action`` (cancel, terminate) ``workflow_id`` (None: no ring)."""
    if ring is None:
        return None
    return make_control_ticket(ring, workflow_id, action, operator_actor())
