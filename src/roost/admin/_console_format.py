"""Safe text for the console's pages: bounded previews of stored values, times and URLs.

Every value a page shows goes through ``preview``: it is made JSON-safe with
``roost.admin._json.to_jsonable`` and written out with limits on depth, items and length, so
a huge or deeply nested payload costs a bounded amount of work and page. The text is then
escaped by the templates (Jinja2 autoescape): a string holding markup is shown, never run.
"""

from __future__ import annotations

import datetime as dt
import json
import reprlib
import urllib.parse
from typing import Any, Final

from roost.admin._json import to_jsonable

__all__ = [
    "ago",
    "duration",
    "path_part",
    "pid_url",
    "preview",
    "queue_url",
    "short",
    "timestamp",
    "workflow_url",
]

_INDENT: Final = "  "
_ELLIPSIS: Final = "…"
_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxstring, _repr.maxother = 4, 200, 200


class _Budget:
    """How much text a preview may still write; once spent, the walk stops."""

    def __init__(self, chars: int) -> None:
        self.left = chars

    def take(self, text: str) -> str:
        if len(text) <= self.left:
            self.left -= len(text)
            return text
        cut = text[: max(0, self.left)] + _ELLIPSIS
        self.left = 0
        return cut


def preview(
    value: Any,
    *,
    chars: int = 4000,
    depth: int = 8,
    items: int = 50,
    string: int = 1000,
    indent: bool = True,
) -> str:
    """``value`` as JSON-like text, cut to ``chars`` characters (never raises).

    Args:
        value: any stored value (bytes, datetimes, PIDs, attrs records, ...).
        chars: the most characters written (an ellipsis marks a cut).
        depth: containers nested deeper are shown as ``[…]`` / ``{…}``.
        items: the most items shown of one list or dict.
        string: the most characters shown of one string.
        indent: one item a line (detail views) or all on one line (tables).
    """
    try:
        data = to_jsonable(value)
    except Exception:  # noqa: BLE001 - a value that cannot be walked is shown by its repr
        return _safe_repr(value)[:chars]
    out: list[str] = []
    budget = _Budget(chars)
    try:
        _write(data, out, budget, 0, depth=depth, items=items, string=string, indent=indent)
    except RecursionError:  # deeper than the interpreter allows: what was written so far
        out.append(_ELLIPSIS)
    return "".join(out)


def _write(
    data: Any,
    out: list[str],
    budget: _Budget,
    level: int,
    *,
    depth: int,
    items: int,
    string: int,
    indent: bool,
) -> None:
    if budget.left <= 0:
        return
    if isinstance(data, str):
        text = data if len(data) <= string else data[:string] + _ELLIPSIS
        out.append(budget.take(json.dumps(text, ensure_ascii=False)))
        return
    if not isinstance(data, dict | list):
        out.append(budget.take(json.dumps(data) if _is_plain(data) else _safe_repr(data)))
        return
    opening, closing = ("{", "}") if isinstance(data, dict) else ("[", "]")
    if not data:
        out.append(budget.take(opening + closing))
        return
    if level >= depth:
        out.append(budget.take(opening + _ELLIPSIS + closing))
        return
    pairs = list(data.items())[:items] if isinstance(data, dict) else list(enumerate(data[:items]))
    pad = "\n" + _INDENT * (level + 1) if indent else ""
    out.append(budget.take(opening))
    for n, (k, v) in enumerate(pairs):
        out.append(budget.take(("," if n else "") + (pad or ("" if not n else " "))))
        if isinstance(data, dict):
            out.append(budget.take(json.dumps(str(k), ensure_ascii=False) + ": "))
        _write(v, out, budget, level + 1, depth=depth, items=items, string=string, indent=indent)
        if budget.left <= 0:
            return
    if len(data) > items:
        more = f"{_ELLIPSIS} {len(data) - items} more"
        out.append(budget.take("," + (pad or " ") + more))
    out.append(budget.take(("\n" + _INDENT * level if indent else "") + closing))


def _safe_repr(value: Any) -> str:
    try:
        return _repr.repr(value)
    except Exception:  # noqa: BLE001 - a __repr__ that raises still gets a cell
        return f"<{type(value).__name__} object>"


def _is_plain(data: Any) -> bool:
    return data is None or isinstance(data, bool | int | float)


def short(value: Any, chars: int = 120) -> str:
    """A one-line preview for a table cell (a value that is text is shown unquoted)."""
    if not isinstance(value, str | dict | list):
        try:
            plain = to_jsonable(value)
        except Exception:  # noqa: BLE001 - shown by preview's fallback below
            plain = None
        value = plain if isinstance(plain, str) else value
    if isinstance(value, str):
        return value if len(value) <= chars else value[:chars] + _ELLIPSIS
    return preview(value, chars=chars, depth=3, items=10, string=chars, indent=False)


def timestamp(value: Any) -> str:
    """A datetime as ``2026-01-02 03:04:05 UTC``; anything else as a short preview."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        aware = value.tzinfo is not None
        text: str = (value.astimezone(dt.UTC) if aware else value).strftime("%Y-%m-%d %H:%M:%S")
        return text + (" UTC" if aware else "")
    return short(value, 40)


def ago(value: Any, now: dt.datetime) -> str:
    """How far ``value`` (a datetime) is from ``now``: ``"in 4m 10s"`` or ``"12s ago"``."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return ""
    seconds = int((value - now).total_seconds())
    text = _span(abs(seconds))
    return f"in {text}" if seconds >= 0 else f"{text} ago"


def duration(value: Any) -> str:
    """A ``timedelta`` as ``"+0.25 s"``, ``"+4m 10s"``; empty for None."""
    if not isinstance(value, dt.timedelta):
        return ""
    seconds = value.total_seconds()
    if abs(seconds) < 60:
        return f"+{seconds:.3g} s" if seconds else "+0 s"
    return "+" + _span(int(seconds))


def _span(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def path_part(text: str) -> str:
    """``text`` as one percent-encoded path segment (``/`` included)."""
    return urllib.parse.quote(text, safe="")


def workflow_url(workflow_id: str) -> str:
    """The console page of one workflow.

    ``/workflows/{id}`` with the id as one encoded segment; an id that is a dot segment
    (``.`` or ``..``), which browsers fold into the path, goes in the query string instead.
    """
    if workflow_id in (".", ".."):
        return "/workflow?" + urllib.parse.urlencode({"id": workflow_id})
    return "/workflows/" + path_part(workflow_id)


def pid_url(pid: Any) -> str:
    """The console page of one process (its PID string as one encoded segment)."""
    return "/processes/" + path_part(str(pid))


def queue_url(queue: str) -> str:
    """The console page of one queue's dead letters (same rules as ``workflow_url``)."""
    if queue in (".", ".."):
        return "/queue?" + urllib.parse.urlencode({"name": queue})
    return "/queues/" + path_part(queue)
