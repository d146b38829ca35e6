"""The admin token: one per data directory, kept in ``admin.token`` (mode 0600).

Every node opened on a directory with ``admin=`` serves the same token, so a browser's
login cookie and a Prometheus scrape keep working across restarts. ``ROOST_ADMIN_TOKEN``,
when set, is the token instead (the file is then neither read nor written).
``roost admin token --rotate`` replaces the file; a running node reads it again when it
changes (``TokenSource`` looks at the file's identity on each request), so the old token
stops working at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from roost._errors import Error, ErrorKind

__all__ = ["ENV_TOKEN", "TOKEN_FILE", "TokenSource", "load_token", "new_token", "rotate_token"]

log = logging.getLogger("roost.admin")

TOKEN_FILE: Final = "admin.token"  # noqa: S105 - a file name, not a secret
ENV_TOKEN: Final = "ROOST_ADMIN_TOKEN"  # noqa: S105 - a variable's name, not a secret
_MIN_LENGTH: Final = 16


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe text."""
    return secrets.token_urlsafe(32)


def _env_token() -> str | None:
    value = os.environ.get(ENV_TOKEN, "").strip()
    if not value:
        return None
    if len(value) < _MIN_LENGTH or any(not ch.isprintable() or ch.isspace() for ch in value):
        raise Error(
            f"{ENV_TOKEN} must be at least {_MIN_LENGTH} printable characters without spaces; "
            "unset it to use the token kept in the data directory",
            kind=ErrorKind.INVALID,
        )
    return value


def _write(path: Path, token: str) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, token.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)


def _read(path: Path) -> str | None:
    try:
        info = path.stat()
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if stat.S_IMODE(info.st_mode) & 0o077:
        log.warning("%s was readable by others; its mode is set to 0600", path)
        with contextlib.suppress(OSError):
            path.chmod(0o600)
    if len(text) < _MIN_LENGTH or any(ch.isspace() for ch in text):
        return None
    return text


def load_token(data_dir: Path) -> str:
    """The admin token for ``data_dir``: ``ROOST_ADMIN_TOKEN``, else the kept one (made once).

    Raises:
        roost.Error: kind Invalid for an unusable ``ROOST_ADMIN_TOKEN``.
    """
    env = _env_token()
    if env is not None:
        return env
    path = data_dir / TOKEN_FILE
    token = _read(path)
    if token is None:
        token = new_token()
        _write(path, token)
    return token


def rotate_token(data_dir: Path) -> str:
    """Replace the kept token of ``data_dir`` with a fresh one; return it.

    Raises:
        roost.Error: kind InvalidState while ``ROOST_ADMIN_TOKEN`` is set (that one is
            changed where it is set).
    """
    if os.environ.get(ENV_TOKEN, "").strip():
        raise Error(
            f"{ENV_TOKEN} is set, so nodes use it rather than {TOKEN_FILE}: change the token "
            f"where {ENV_TOKEN} is set (or unset it and rotate again)",
            kind=ErrorKind.INVALID_STATE,
        )
    token = new_token()
    _write(data_dir / TOKEN_FILE, token)
    return token


class TokenSource:
    """The token a running admin server checks: re-read when ``admin.token`` is replaced."""

    def __init__(self, data_dir: Path | None, token: str | None = None) -> None:
        self._path = None if data_dir is None else data_dir / TOKEN_FILE
        self._fixed = token is not None or self._path is None or _env_token() is not None
        self._token = token if token is not None else self._first(data_dir)
        self._seen = self._identity()

    @staticmethod
    def _first(data_dir: Path | None) -> str:
        return new_token() if data_dir is None else load_token(data_dir)

    def _identity(self) -> tuple[int, int, int] | None:
        if self._fixed or self._path is None:
            return None
        try:
            info = self._path.stat()
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def current(self) -> str:
        """The token now in force."""
        if self._fixed or self._path is None:
            return self._token
        seen = self._identity()
        if seen is not None and seen != self._seen:
            token = _read(self._path)
            if token is not None:
                self._token = token
                log.info("the admin token was replaced (%s); the old one is refused", self._path)
            self._seen = seen
        return self._token
