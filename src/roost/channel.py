"""``roost.channel``: Go-style channels and ``select``."""

from roost.mailbox._channel import Case, Channel, Selected, new, select

__all__ = ["Case", "Channel", "Selected", "new", "select"]
