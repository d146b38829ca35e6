"""The audit trail: every change made through the admin API, the console or the CLI.

Each change is one JSON line in ``audit.log`` in the data directory (mode 0600, appended)
and one record of the ``roost.audit`` logger: when, who (``actor``), through what (``via``:
``admin API``, ``console`` or ``cli``), what (``action``) and how it ended (``outcome``).

Who: a bearer-token request is the token's holder; the CLI names its OS user in the
``X-Roost-Actor`` header (``operator:<user>``), recorded as given since whoever holds the
token controls the node anyway. A console request (cookie) is ``console``. A CLI change
applied to a stopped store is recorded by the CLI itself.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Final

__all__ = [
    "ACTOR_HEADER",
    "AUDIT_FILE",
    "AuditChanges",
    "read_audit",
    "record_change",
]

log = logging.getLogger("roost.audit")

AUDIT_FILE: Final = "audit.log"
ACTOR_HEADER: Final = "x-roost-actor"
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_MAX_ACTOR: Final = 100

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def record_change(
    data_dir: Path | None,
    *,
    actor: str,
    via: str,
    action: str,
    outcome: Any,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Log one change and append it to ``audit.log`` in ``data_dir`` (when given)."""
    entry = {
        "at": dt.datetime.now(dt.UTC).isoformat(),
        "actor": actor,
        "via": via,
        "action": action,
        "outcome": outcome,
        **({"details": details} if details else {}),
    }
    log.info("%s by %s via %s: %s", action, actor, via, outcome, extra={"audit": entry})
    if data_dir is not None:
        line = json.dumps(entry, ensure_ascii=True, default=str).encode() + b"\n"
        try:
            fd = os.open(data_dir / AUDIT_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line)  # one write of one line: appends do not interleave
            finally:
                os.close(fd)
        except OSError as exc:
            log.error("cannot append to %s: %s", data_dir / AUDIT_FILE, exc)  # noqa: TRY400 - the reason is the message
    return entry


def read_audit(data_dir: Path) -> list[dict[str, Any]]:
    """Every entry of ``audit.log`` in ``data_dir``, oldest first (unreadable lines skipped)."""
    try:
        lines = (data_dir / AUDIT_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def _claimed(value: str) -> str:
    text = "".join(ch for ch in value if ch.isprintable())[:_MAX_ACTOR].strip()
    return text or "admin-token"


class AuditChanges:
    """ASGI middleware (inside the token check): record every state-changing request."""

    def __init__(self, app: ASGIApp, data_dir: Path | None, auth_key: str) -> None:
        self.app = app
        self.data_dir = data_dir
        self.auth_key = auth_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] != "http" or scope["method"] in _SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._record(scope, status[0] if status else None)

    def _record(self, scope: Scope, status: int | None) -> None:
        if scope.get(self.auth_key) == "cookie":
            actor, via = "console", "console"
        else:
            claimed = ""
            for name, value in scope["headers"]:
                if name.lower() == ACTOR_HEADER.encode():
                    claimed = value.decode("latin-1")
            actor, via = _claimed(claimed), "admin API"
        path = scope.get("root_path", "") + scope["path"]
        record_change(
            self.data_dir,
            actor=actor,
            via=via,
            action=f"{scope['method']} {path}",
            outcome=status if status is not None else "no answer",
        )
