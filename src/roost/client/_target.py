"""What ``roost.connect`` / ``connect_async`` were given: an admin URL or a data directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from roost._errors import invalid, shown
from roost.client._core import Core, checked_app
from roost.client._local import Admin
from roost.client._temporal import TemporalCore

__all__ = ["core_for"]


def core_for(
    target: str | os.PathLike[str] | None,
    token: str | None,
    temporal: str | None = None,
    temporal_namespace: str = "default",
    app: Any = None,
) -> Core | TemporalCore:
    """The client core for ``target``: ``http(s)://...`` is an admin URL, anything else a path.

    With ``temporal`` (``"host:port"`` of a Temporal cluster) the workflow requests go to the
    cluster, and ``target`` (optional then) serves ``enqueue``. ``app`` (a ``roost.App``)
    types the results of workflows named by id (``typed_by``).

    Raises:
        roost.Error: Invalid for a target that is neither, or an admin URL without a token.
    """
    if temporal is not None:
        if not isinstance(temporal, str) or ":" not in temporal:
            raise invalid(f"temporal is 'host:port' of a Temporal server, got {shown(temporal)}")
        if not isinstance(temporal_namespace, str) or not temporal_namespace:
            raise invalid(
                f"temporal_namespace is a non-empty string, got {shown(temporal_namespace)}"
            )
        nodes = None if target is None else _node_core(target, token)
        cluster = TemporalCore(temporal, temporal_namespace, nodes)
        cluster.app = checked_app(app)
        return cluster
    if target is None:
        raise invalid(
            "roost.connect takes a data directory or an admin URL (or temporal='host:port' "
            "for an app on a Temporal cluster)"
        )
    core = _node_core(target, token)
    core.app = checked_app(app)
    return core


def _node_core(target: str | os.PathLike[str], token: str | None) -> Core:
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
