"""Exceptions user code may raise that are hostile to whoever reports them.

Shared by the containment tests of activities, processes, HTTP and other triggers.
"""

from __future__ import annotations


class StrRaisesError(Exception):
    """An exception whose ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


class BothRaiseError(Exception):
    """An exception whose ``str()`` and ``repr()`` both raise."""

    def __str__(self) -> str:
        raise RuntimeError

    def __repr__(self) -> str:
        raise RuntimeError


class Custom(BaseException):
    """A BaseException subclass of the user's own."""
