"""How a changing command reaches the data: the running node's admin API, or the store.

A node that holds the data directory with an admin server writes ``admin.json`` (its URL and
bearer token) into it: the change is a request to that API, and the node applies it as it
would its own. A node that holds the directory without one cannot be changed from outside
(its store has one writer): the command fails and says to restart it with ``--admin``. With
no node, the command takes the directory's lock for the duration, so no node opens
meanwhile, and writes the rows the runtime would write for the same request; nothing runs,
and the next node picks them up.

Either way the change is recorded with its actor (``operator:<user>``, ``admin._audit``): the
node records what its admin API was asked (the CLI names itself in ``X-Roost-Actor``); a
change to a stopped store is recorded here, in the directory's ``audit.log``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs
import click

from roost._errors import Error, ErrorKind
from roost.admin._audit import ACTOR_HEADER, record_change
from roost.cli._common import Failed
from roost.cli._signing import operator_actor
from roost.storage import Codec, WriteTxn, open_lmdb_store

__all__ = ["AdminClient", "change", "quote"]

T = TypeVar("T")

ADMIN_FILE: Final = "admin.json"
_PROBE_TIMEOUT: Final = 2.0
_CALL_TIMEOUT: Final = 60.0
_KINDS: Final = {kind.value: kind for kind in ErrorKind}


@attrs.frozen
class AdminClient:
    """The admin JSON API of the node that holds a data directory."""

    url: str
    token: str

    @classmethod
    def find(cls, data_dir: Path, holder: int | None) -> AdminClient | None:
        """The admin client of ``holder``, the OS process that holds the directory's lock.

        ``admin.json`` must name that process (its ``pid``) before its token is sent
        anywhere, and ``GET /api/node`` must then answer for the same process and data
        directory: a file left by a killed node, or a port another program took over since,
        is no node.
        """
        try:
            info = json.loads((data_dir / ADMIN_FILE).read_text())
            client = cls(url=str(info["url"]).rstrip("/"), token=str(info["token"]))
            pid = info.get("pid")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if holder is None or pid != holder:
            return None
        try:
            node = client.request("GET", "/api/node", timeout=_PROBE_TIMEOUT)
        except Error:
            return None
        if not isinstance(node, dict) or node.get("pid") != holder:
            return None
        if _same_dir(node.get("data_dir"), data_dir):
            return client
        return None

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = _CALL_TIMEOUT
    ) -> Any:
        """Send one request; return its JSON answer.

        Raises:
            roost.Error: the API's error (its kind, message and details); Unavailable when
                the server does not answer.
        """
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(  # noqa: S310 - the URL is the node's own, from admin.json
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                ACTOR_HEADER: operator_actor(),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as answer:  # noqa: S310 - as above
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise _api_error(exc) from None
        except (OSError, ValueError) as exc:
            raise Error(
                f"the node's admin server at {self.url} did not answer: {exc}",
                kind=ErrorKind.UNAVAILABLE,
                retryable=True,
                details={"url": self.url},
            ) from None


def _api_error(exc: urllib.error.HTTPError) -> Error:
    try:
        error = json.loads(exc.read())["error"]
        kind = _KINDS.get(error.get("kind"), ErrorKind.INTERNAL)
        message = str(error.get("message"))
        details = dict(error.get("details") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        kind, message, details = ErrorKind.INTERNAL, f"HTTP {exc.code} {exc.reason}", {}
    if exc.code == 401:
        message = f"the admin server refused the token in admin.json ({message})"
    return Error(message, kind=kind, retryable=False, details={**details, "http_status": exc.code})


def quote(part: str) -> str:
    """One path segment of an API URL."""
    return urllib.parse.quote(part, safe="")


def _same_dir(reported: object, data_dir: Path) -> bool:
    if not isinstance(reported, str):
        return False
    try:
        return Path(reported).resolve() == data_dir.resolve()
    except OSError:
        return False


def change(
    data_dir: Path,
    *,
    admin: Callable[[AdminClient], T],
    offline: Callable[[WriteTxn, Codec], T],
    create: bool = False,
) -> T:
    """Apply a change through the running node's admin API, or to the stopped store.

    The directory's lock decides: free, no node runs, the change is applied to the store
    under that lock (an ``admin.json`` left by a killed node is deleted); held, the change
    goes to the admin API of the process that holds it, if ``admin.json`` names it.
    ``create``: a missing data directory is created (a start); otherwise it must hold a
    store.

    Raises:
        Failed: a node holds the directory without an admin server, or there is no store.
        roost.Error: what the change itself raised.
    """
    if not create and not (data_dir / "data.mdb").is_file():
        raise Failed(f"there is no roost store in {data_dir}: check --data-dir (or ROOST_DATA_DIR)")
    try:
        store = open_lmdb_store(data_dir)  # the directory's lock: no node opens meanwhile
    except Error as exc:
        holder = exc.details.get("holder_pid")
        if exc.kind is not ErrorKind.INVALID_STATE or holder == os.getpid():
            raise
        client = AdminClient.find(data_dir, holder if isinstance(holder, int) else None)
        if client is not None:
            return admin(client)
        raise Failed(
            f"another process (OS pid {holder if holder is not None else 'unknown'}) holds "
            f"{data_dir} and serves no admin API for it (yet): a node that is starting or "
            "stopping, a node without an admin server, or another roost command. Run this "
            "command again once a node is up; a node without one needs a restart with "
            "`roost run ... --admin 127.0.0.1:0` (or open_node(..., admin=...)), or stop it "
            "and run this command again"
        ) from None
    codec = Codec()
    outcome = "failed"
    try:
        (data_dir / ADMIN_FILE).unlink(missing_ok=True)  # a killed node's: the lock was free
        result = store.transact_sync(lambda txn: offline(txn, codec))
    except Error as exc:
        outcome = f"failed: {exc.kind.value}"
        raise
    else:
        outcome = "ok"
        return result
    finally:
        store.close()
        record_change(
            data_dir, actor=operator_actor(), via="cli", action=_command(), outcome=outcome
        )


def _command() -> str:
    """The command line being run, as the audit trail shows it (without --data-dir)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return "roost"
    params = " ".join(
        f"{name}={value!r}"
        for name, value in ctx.params.items()
        if name != "data_dir" and value not in (None, False, ())
    )
    return f"{ctx.command_path} {params}".strip()
