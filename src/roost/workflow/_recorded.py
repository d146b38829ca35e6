"""What a workflow is handed: an event as recording it gives back, without a round trip.

A workflow must see the values its history holds (a tuple comes back a list, a str
subclass a str), or it would behave differently on replay; so an event is encoded and
decoded before a live workflow gets it. An event whose payloads are immutable plain
values already is what that round trip returns, so it is handed over as it is.
"""

from __future__ import annotations

from typing import Any, Final

from roost._text import has_utf8
from roost.storage import Codec
from roost.workflow._history import ActivityResolved, Event, MessageArrived, Started, TimerFired

__all__ = ["as_recorded", "is_plain", "recorded"]

# Values that always encode, and decode as themselves (a str only with a UTF-8 form).
_PLAIN: Final[frozenset[type]] = frozenset({type(None), bool, int, float, bytes})


def is_plain(value: Any) -> bool:
    """Whether ``value`` always encodes, and decodes as itself (no need to check it)."""
    tp = type(value)
    return tp in _PLAIN or (tp is str and has_utf8(value))


_plain = is_plain


def as_recorded(event: Event) -> bool:
    """Whether ``event`` is what recording it gives back (no need to round-trip it)."""
    # ``type(event) is`` per kind (mypy narrows on it), the most frequent kind first.
    if type(event) is ActivityResolved:
        return event.error is None and _plain(event.value)
    if type(event) is TimerFired:
        return True
    if type(event) is Started:
        # Its lists are fresh copies (``new_run``); the values in them are shared.
        return (
            all(_plain(a) for a in event.args)
            and all(type(k) is str and has_utf8(k) and _plain(v) for k, v in event.context.items())
            and has_utf8(event.workflow_id)
        )
    if type(event) is MessageArrived:
        return _plain(event.payload) and has_utf8(event.topic)
    return False


def recorded(codec: Codec, event: Event) -> Event:
    """``event`` as its history will hold it (encoded and decoded, unless as recorded)."""
    return event if as_recorded(event) else codec.decode(codec.encode(event))
