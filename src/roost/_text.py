"""The one check every string that roost stores or turns into bytes goes through.

Python strings may hold lone surrogates (U+D800 to U+DFFF unpaired, e.g. from
``os.fsdecode`` or ``json.loads`` of an escaped one), which have no UTF-8 form: LMDB keys,
CBOR text and log lines cannot carry them. Names, ids, topics and keys are checked here
when they enter roost; payload strings are checked by the codec (which reports where in the
value the bad string sits) with the same wording.
"""

from __future__ import annotations

from typing import Any

from roost._errors import Error, invalid

__all__ = ["check_text", "has_utf8", "surrogate_error", "utf8"]


def surrogate_error(what: str, text: str) -> Error:
    """The Invalid error for ``text`` (named ``what``) holding a lone surrogate."""
    position = next(i for i, ch in enumerate(text) if 0xD800 <= ord(ch) <= 0xDFFF)
    return invalid(
        f"{what} holds a lone surrogate ({text[position]!a} at index {position}), which "
        "has no UTF-8 form: decode text with errors='replace' or drop the character",
        position=position,
        text=ascii(text[:80]),
    )


def has_utf8(text: str) -> bool:
    """Whether ``text`` has a UTF-8 form (holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8(text: str, what: str) -> bytes:
    """The UTF-8 bytes of ``text``.

    Raises:
        roost.Error: kind Invalid when ``text`` holds a lone surrogate.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise surrogate_error(what, text) from None


def check_text(text: Any, what: str) -> str:
    """Return ``text`` if it is a str with a UTF-8 form (no lone surrogates).

    Raises:
        roost.Error: kind Invalid for a non-str or a string with a lone surrogate.
    """
    if not isinstance(text, str):
        raise invalid(f"{what} must be a string, got {type(text).__name__}")
    if not text.isascii():
        utf8(text, what)
    return text
