"""History files: ``save_history``, ``load_history`` and ``history_to_json``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from roost._errors import Error, invalid
from roost._files import write_private
from roost.admin._json import dumps
from roost.storage import Codec

__all__ = ["history_to_json", "load_history", "save_history"]

_CODEC = Codec()


def save_history(history: Iterable[Any], path: str | os.PathLike[str]) -> Path:
    """Write a history (from ``node.history``) to a portable CBOR file (mode 0600).

    It holds the workflow's inputs, results and messages: private whatever the umask.
    """
    # A list of roost's own records: it gets their depth, as the store does.
    return write_private(path, _CODEC.encode(list(history), what="history", envelope=True))


def history_to_json(history: Iterable[Any], *, indent: int | None = 2) -> str:
    """A readable JSON form of a history (for people and diff tools; load the CBOR file).

    Strict JSON in the admin server's rendering (``roost.admin._json``): each event or
    command becomes ``{"type": "<record class>", ...its fields}``; datetimes ISO 8601 text,
    PIDs and UUIDs their text, bytes ``{"base64": ...}``, errors ``{"kind", "message",
    "details", "retryable"}``, non-finite floats their text (``"nan"``, ``"inf"``).
    """
    return dumps(list(history), indent=indent)


def load_history(path: str | os.PathLike[str]) -> list[Any]:
    """Read a history written by ``save_history``.

    Raises:
        roost.Error: kind Invalid when the file is not a roost history.
    """
    data = Path(path).read_bytes()
    try:
        items = _CODEC.decode(data)
    except Error as exc:
        raise invalid(f"{path} is not a roost history file: {exc.message}") from exc
    if not isinstance(items, list):
        raise invalid(f"{path} is not a roost history file (no list of events)")
    return items
