"""The checks both HTTP servers (triggers and admin) make before routing, sans-IO.

- **Host**: a request whose ``Host`` header names a host outside the allow-list is answered
  421 (Misdirected Request). A DNS-rebinding page reaches 127.0.0.1 under its own name
  (``Host: evil.example``), so without this check it could read the answers of GET routes.
  The default list is the bound address, ``localhost``, ``127.0.0.1`` and ``[::1]``;
  ``open_node(..., allowed_hosts=[...])`` replaces it. An entry is a host name or address
  (any port), ``host:port`` (that port only), ``*.example.com`` (any subdomain) or ``*``
  (any host: for a server behind a proxy that checks it).
- **Origin**: a state-changing request (any method but GET, HEAD, OPTIONS) that a browser
  marks as coming from another origin is answered 403: its ``Origin`` is not this server's
  own (``scheme://host``, ``null`` included), or, without an ``Origin``, its
  ``Sec-Fetch-Site`` is neither ``same-origin`` nor ``none``. A "simple" cross-origin POST
  (``text/plain``, no preflight) therefore never reaches a handler. Clients that are not
  browsers send neither header and pass.
- **Content-Type**: ``is_json_type`` says whether a body is declared JSON
  (``application/json`` or ``application/*+json``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from roost._errors import invalid

__all__ = [
    "DEFAULT_ALLOWED",
    "SAFE_METHODS",
    "HostGuard",
    "Refusal",
    "is_json_type",
    "parse_allowed_hosts",
]

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_ALLOWED: Final = ("localhost", "127.0.0.1", "[::1]")
_SAME: Final = frozenset({"same-origin", "none"})


@attrs.frozen
class Refusal:
    """Why a request is refused before routing: its status and a message naming the fix."""

    status: int
    message: str


def is_json_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` value declares JSON (parameters such as charset allowed)."""
    if content_type is None:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    kind, _, sub = media.partition("/")
    return kind == "application" and (sub == "json" or sub.endswith("+json"))


def parse_allowed_hosts(value: object) -> tuple[str, ...] | None:
    """Read ``open_node``'s ``allowed_hosts`` (None: the defaults) into normalized entries.

    Raises:
        roost.Error: kind Invalid for anything but a list of non-empty host strings.
    """
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise invalid(
            "allowed_hosts takes a list of host names, e.g. ['shop.example', 'localhost'] "
            f"('*' allows any host), got {value!r}"
        )
    hosts: list[str] = []
    for item in value:
        if not isinstance(item, str) or not item.strip() or any(c in item for c in "/ \t\r\n"):
            raise invalid(
                "each allowed_hosts entry is a host name, 'host:port', '*.domain' or '*', "
                f"got {item!r}"
            )
        hosts.append(item.strip().lower())
    return tuple(hosts)


def _split_host(value: str) -> tuple[str, str | None]:
    """(host, port) of a Host header value; IPv6 addresses keep their brackets."""
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return text, None
        rest = text[end + 1 :]
        return text[: end + 1], rest[1:] if rest.startswith(":") else None
    host, sep, port = text.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, port
    return text, None


def _bracketed(host: str) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host.lower()
    return f"[{address}]" if address.version == 6 else str(address)


class HostGuard:
    """The Host and Origin checks of one server."""

    def __init__(self, bound_host: str, allowed: tuple[str, ...] | None = None) -> None:
        if allowed is None:
            allowed = (*DEFAULT_ALLOWED, _bracketed(bound_host))
        self.allowed = tuple(dict.fromkeys(allowed))

    def _host_allowed(self, host: str, port: str | None) -> bool:
        for entry in self.allowed:
            if entry == "*":
                return True
            want_host, want_port = _split_host(entry)
            if want_port is not None and want_port != port:
                continue
            if want_host.startswith("*."):
                if host.endswith(want_host[1:]):
                    return True
            elif want_host == host:
                return True
        return False

    def check(self, method: str, headers: Mapping[str, str], scheme: str) -> Refusal | None:
        """The refusal for a request (headers with lowercase names), or None to serve it."""
        host_header = headers.get("host")
        if host_header is not None:
            host, port = _split_host(host_header)
            if not self._host_allowed(host, port):
                return Refusal(
                    421,
                    f"this server does not answer for the host {host_header[:100]!r} (its "
                    f"allowed hosts: {', '.join(self.allowed)}); add it to "
                    "open_node(..., allowed_hosts=[...]) if it is this server's own name",
                )
        if method.upper() in SAFE_METHODS:
            return None
        own = f"{scheme}://{(host_header or '').strip().lower()}"
        origin = headers.get("origin")
        if origin is not None:
            if origin.strip().lower() != own:
                return Refusal(
                    403,
                    f"a {method.upper()} from the page of another origin "
                    f"({origin[:100]!r}, not {own!r}) is refused; call this server from its "
                    "own pages or from a client that is not a browser",
                )
            return None
        site = headers.get("sec-fetch-site")
        if site is not None and site not in _SAME:
            return Refusal(
                403,
                f"a {method.upper()} that the browser marks as {site[:40]!r} is refused; "
                "call this server from its own pages or from a client that is not a browser",
            )
        return None
