"""The name registry: one owner per name, names released when their owner exits."""

from __future__ import annotations

from roost._errors import Error, ErrorKind, invalid, not_found
from roost._pid import Pid, check_pid_part

__all__ = ["Registry", "check_name"]


def check_name(name: object) -> str:
    """Validate a registered name: a non-empty string that cannot be read as a PID.

    A name follows the rules of a PID id (a workflow's name is its id), and may not start
    with '@' (reserved).
    """
    if isinstance(name, str) and name[:1] == "@":
        raise invalid(
            f"name {name!r} may not start with '@' (reserved for roost's topics); pick a "
            "plain name like 'orders'",
            name=name,
        )
    return check_pid_part("a registered name", name, allow_at=True)


class Registry:
    """Names to PIDs. Pure state; the node decides who is alive."""

    __slots__ = ("_by_pid", "_names")

    def __init__(self) -> None:
        self._names: dict[str, Pid] = {}
        self._by_pid: dict[Pid, set[str]] = {}

    def register(self, name: str, pid: Pid) -> None:
        """Give ``name`` to ``pid``; idempotent for the same owner.

        Raises:
            roost.Error: kind AlreadyExists when another PID holds the name.
        """
        owner = self._names.get(name)
        if owner is not None and owner != pid:
            raise Error(
                f"name {name!r} is already registered to {owner}; unregister it first or "
                "pick another name",
                kind=ErrorKind.ALREADY_EXISTS,
                retryable=False,
                details={"name": name, "existing_pid": str(owner)},
                pid=owner,
            )
        self._names[name] = pid
        self._by_pid.setdefault(pid, set()).add(name)

    def lookup(self, name: str) -> Pid | None:
        """The PID holding ``name``, if any."""
        return self._names.get(name)

    def require(self, name: str) -> Pid:
        """The PID holding ``name``.

        Raises:
            roost.Error: kind NotFound when nobody holds it.
        """
        pid = self._names.get(name)
        if pid is None:
            raise not_found(f"no process is registered as {name!r}", name=name)
        return pid

    def unregister(self, name: str) -> bool:
        """Drop ``name``; True if it was registered."""
        pid = self._names.pop(name, None)
        if pid is None:
            return False
        names = self._by_pid.get(pid)
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_pid[pid]
        return True

    def names_of(self, pid: Pid) -> frozenset[str]:
        """The names ``pid`` holds."""
        return frozenset(self._by_pid.get(pid, ()))

    def release(self, pid: Pid) -> None:
        """Drop every name ``pid`` holds (it exited)."""
        if not self._by_pid:  # most nodes name few processes: skip hashing the PID
            return
        for name in self._by_pid.pop(pid, ()):
            self._names.pop(name, None)

    def __len__(self) -> int:
        return len(self._names)
