"""What ``roost.connect`` / ``connect_async`` were given: an admin URL or a data directory."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from roost._errors import invalid, shown
from roost.client._core import Core
from roost.client._local import Admin

__all__ = ["core_for"]


def core_for(target: str | os.PathLike[str], token: str | None) -> Core:
    """The client core for ``target``: ``http(s)://...`` is an admin URL, anything else a path.

    Raises:
        roost.Error: Invalid for a target that is neither, or an admin URL without a token.
    """
    if token is not None and (not isinstance(token, str) or not token):
        raise invalid(f"token is the node's admin token (a non-empty string), got {shown(token)}")
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        try:
            url = httpx.URL(target)
        except httpx.InvalidURL as exc:
            raise invalid(f"{target!r} is not a URL an admin server can have: {exc}") from None
        if not url.host:
            raise invalid(
                f"an admin URL names its host, like 'http://127.0.0.1:8081'; got {target!r}"
            )
        token = token or os.environ.get("ROOST_ADMIN_TOKEN") or None
        if token is None:
            raise invalid(
                f"connecting to the admin URL {target} needs the node's token: pass token=... "
                "(or set ROOST_ADMIN_TOKEN); it is in the node's data directory (admin.json), "
                "or connect to that data directory instead"
            )
        return Core(admin=Admin(url=target.rstrip("/"), token=token))
    if isinstance(target, str | os.PathLike) and os.fspath(target):
        return Core(data_dir=Path(target), token=token)
    raise invalid(
        "roost.connect takes a data directory (e.g. 'roost-data') or a node's admin URL "
        f"(e.g. 'http://127.0.0.1:8081' with token=...), got {shown(target)}"
    )
