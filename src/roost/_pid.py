"""Process identifiers: ``{node@host|id}``, or ``{host|id}`` on the node named ``local``."""

from __future__ import annotations

from typing import Final

from roost._errors import invalid, shown, storable_leaf
from roost._text import check_text

__all__ = ["LOCAL_NODE", "Pid", "check_pid_part"]

LOCAL_NODE: Final = "local"
_FORBIDDEN = frozenset("{}|")


class Pid:
    """A process identifier; hashable, immutable, and round-trips through its string.

    Attributes:
        node: the node name ("local" for a standalone node).
        host: the process host the process runs on, e.g. "app:processes".
        id: the process id on that host; a workflow's id is its workflow id.
    """

    __slots__ = ("_str", "host", "id", "node")

    node: str
    host: str
    id: str
    _str: str | None

    def __init__(self, node: str, host: str, id: str) -> None:  # noqa: A002 - API field name
        check_pid_part("PID node", node, allow_at=False)
        check_pid_part("PID host", host, allow_at=False)
        check_pid_part("PID id", id, allow_at=True)
        _init(self, node, host, id)

    @classmethod
    def trusted(cls, node: str, host: str, id: str) -> Pid:  # noqa: A002 - API field name
        """Build a PID from parts already known to be valid (the node's own PIDs)."""
        pid = object.__new__(cls)
        _init(pid, node, host, id)
        return pid

    @classmethod
    def parse(cls, text: str) -> Pid:
        """Parse ``{node@host|id}`` or ``{host|id}``.

        Raises:
            roost.Error: kind Invalid when the text is not a PID.
        """
        if not isinstance(text, str):
            raise invalid(
                f"a PID must be a string like '{{app:processes|1.00001}}', got {shown(text)}"
            )
        if len(text) < 4 or text[0] != "{" or text[-1] != "}" or "|" not in text:
            raise invalid(
                f"{text!r} is not a PID: expected '{{node@host|id}}' or '{{host|id}}'",
                value=text,
            )
        inner = text[1:-1]
        where, _, ident = inner.partition("|")
        # Wippy: with a second '|', the id is what follows it ("{n@h|ns:name|p1}" -> "p1").
        if "|" in ident:
            ident = ident.rpartition("|")[2]
        node, at, host = where.partition("@")
        if not at:
            node, host = LOCAL_NODE, where
        if not node or not host or not ident:
            raise invalid(f"{text!r} is not a PID: node, host and id must be non-empty", value=text)
        return cls(node, host, ident)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Pid is immutable")

    def __str__(self) -> str:
        text: str | None = self._str
        if text is None:
            node, host, ident = self.node, self.host, self.id
            text = f"{{{host}|{ident}}}" if node == LOCAL_NODE else f"{{{node}@{host}|{ident}}}"
            object.__setattr__(self, "_str", text)
        return text

    def __repr__(self) -> str:
        return f"Pid({str(self)!r})"

    def __hash__(self) -> int:
        # str caches its own hash, so this costs no memory per PID and little time.
        return hash(self.id) ^ hash(self.host)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Pid):
            return self.id == other.id and self.host == other.host and self.node == other.node
        return NotImplemented

    def __reduce__(self) -> tuple[type[Pid], tuple[str, str, str]]:
        return (Pid, (self.node, self.host, self.id))


storable_leaf(Pid)  # error details keep PIDs as PIDs


def _init(pid: Pid, node: str, host: str, ident: str) -> None:
    setter = object.__setattr__
    setter(pid, "node", node)
    setter(pid, "host", host)
    setter(pid, "id", ident)
    setter(pid, "_str", None)


def check_pid_part(what: str, value: object, *, allow_at: bool) -> str:
    """Return ``value`` if it can be a part of a PID, so that its text parses back.

    Args:
        what: how the message names the value, e.g. "workflow id".
        value: the candidate part.
        allow_at: whether '@' may appear (in an id, yes; in a node or host name, no).

    Raises:
        roost.Error: kind Invalid for an empty or non-str value, one holding '{', '}' or '|'
            (or '@' where not allowed), or a lone surrogate.
    """
    if not isinstance(value, str) or not value:
        raise invalid(f"{what} must be a non-empty string, got {value!r}")
    bad = _FORBIDDEN if allow_at else _FORBIDDEN | {"@"}
    if any(ch in bad for ch in value):
        found = "".join(sorted({ch for ch in value if ch in bad}))
        raise invalid(
            f"{what} {value!r} must not contain {found!r}: PIDs are written "
            f"'{{node@host|id}}', so none of {''.join(sorted(bad))!r} may appear in a part",
            value=value,
        )
    return check_text(value, what)
