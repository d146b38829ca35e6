"""The security context: actors, scopes, the node's key ring, envelopes and relay tickets.

Pure code (hmac and json only, no trio): the workflow hosts, the process API and the command
line all build the same signed values here, and check tickets (docs/security.md). A workflow's
envelope is checked by the backend-neutral workflow core, ``roost.workflow._trust``.

A process's context values hold its security context under ``SECURITY_KEY``, a key
``with_context`` refuses and ``ctx.get`` / ``ctx.all`` never show: it travels with what
the process starts exactly as its context values do. For a plain process it is a *claim*
(``{"actor": ..., "policies": [...]}``); a workflow's start record holds it *sealed*: the
claim plus the addressee it is bound to, the id of the key that signed it and the HMAC.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from roost._errors import Error, ErrorKind, invalid

__all__ = [
    "ENVELOPE_FIELDS",
    "ENV_KEYS",
    "SECURITY_KEY",
    "Actor",
    "KeyRing",
    "Scope",
    "actor_of",
    "claim",
    "control_error",
    "denied",
    "envelope_payload",
    "make_control_ticket",
    "make_ticket",
    "open_queued",
    "reseal",
    "scope_of",
    "seal",
    "seal_queued",
    "ticket_error",
    "visible",
]

SECURITY_KEY: Final = "roost.security"
"""The context key that holds the security context (refused by ``with_context``)."""
ENV_KEYS: Final = "ROOST_SIGNING_KEYS"
"""``id1:hex,id2:hex``: the key ring when ``open_node`` gets none; the first one signs."""
_MIN_KEY_BYTES: Final = 16
ENVELOPE_FIELDS: Final = frozenset({"actor", "policies", "addressee", "key_id", "sig"})
"""The fields of a sealed envelope."""


def denied(message: str, **details: Any) -> Error:
    """A PermissionDenied error (nothing was changed)."""
    return Error(message, kind=ErrorKind.PERMISSION_DENIED, retryable=False, details=details)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _check_json(value: Any) -> None:
    """Raise TypeError for a mapping key that is not a str, at any depth (json would cast it)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"key {k!r} is not a str")
            _check_json(v)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_json(item)


@attrs.frozen(init=False)
class Actor:
    """Who is acting: an id (``"user:42"``) and plain metadata (JSON values)."""

    id: str
    meta: Mapping[str, Any]

    def __init__(self, id: str, meta: Mapping[str, Any] | None = None) -> None:  # noqa: A002
        """Check and keep ``id`` and a copy of ``meta``.

        Raises:
            roost.Error: Invalid for an empty or non-str id, or meta that is not a mapping
                of str keys to JSON values (it is signed as JSON).
        """
        if not isinstance(id, str) or not id:
            raise invalid(f"an actor id is a non-empty string, got {id!r}")
        if meta is not None and not isinstance(meta, Mapping):
            raise invalid(f"actor meta is a mapping or None, got {type(meta).__name__}")
        copied = dict(meta or {})
        try:
            _check_json(copied)
            json.dumps(copied, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise invalid(
                f"actor meta must hold JSON values with str keys (it is signed as JSON): {exc}"
            ) from None
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "meta", copied)

    def as_dict(self) -> dict[str, Any]:
        """The plain form kept in context values and envelopes."""
        return {"id": self.id, "meta": dict(self.meta)}


@attrs.frozen(init=False)
class Scope:
    """The policies an actor acts under: a set of policy names, kept in given order."""

    policies: tuple[str, ...]

    def __init__(self, *policy_names: str) -> None:
        """Keep the distinct names in the order given.

        Raises:
            roost.Error: Invalid for a name that is not a non-empty string.
        """
        for name in policy_names:
            if not isinstance(name, str) or not name:
                raise invalid(f"a policy name is a non-empty string, got {name!r}")
        object.__setattr__(self, "policies", tuple(dict.fromkeys(policy_names)))

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is one of the scope's policies."""
        return name in self.policies

    def __iter__(self) -> Iterator[str]:
        """The policy names."""
        return iter(self.policies)

    def __len__(self) -> int:
        """How many policies."""
        return len(self.policies)


def claim(actor: Actor | None, scope: Scope | None) -> dict[str, Any]:
    """The plain security context of a process (``SECURITY_KEY``'s value)."""
    return {
        "actor": actor.as_dict() if actor is not None else None,
        "policies": list(scope.policies) if scope is not None else [],
    }


def actor_of(context: Mapping[str, Any] | None) -> Actor | None:
    """The actor in ``context``'s security context, if any."""
    sec = context.get(SECURITY_KEY) if context else None
    raw = sec.get("actor") if isinstance(sec, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    return Actor(raw["id"], raw.get("meta"))


def scope_of(context: Mapping[str, Any] | None) -> Scope | None:
    """The scope in ``context``'s security context, if any."""
    sec = context.get(SECURITY_KEY) if context else None
    if not isinstance(sec, Mapping):
        return None
    return Scope(*(sec.get("policies") or ()))


def visible(context: Mapping[str, Any]) -> dict[str, Any]:
    """``context`` as ``ctx.all`` shows it: without the security context."""
    return {k: v for k, v in context.items() if k != SECURITY_KEY}


@attrs.frozen
class KeyRing:
    """The node's signing keys: verification accepts any, ``active`` signs."""

    keys: Mapping[str, bytes]
    active: str

    @classmethod
    def build(cls, keys: Mapping[str, bytes], active: str | None = None) -> KeyRing:
        """A ring from ``{key_id: secret}``; ``active`` defaults to the first key.

        Raises:
            roost.Error: Invalid for an empty ring, a bad key id, a secret that is not
                bytes of at least 16, or an ``active`` id not in the ring.
        """
        if not isinstance(keys, Mapping) or not keys:
            raise invalid("signing_keys is a non-empty mapping of key id to bytes")
        ring: dict[str, bytes] = {}
        for key_id, secret in keys.items():
            if not isinstance(key_id, str) or not key_id or any(c in key_id for c in ":,"):
                raise invalid(
                    f"a signing key id is a non-empty string without ':' or ','; got {key_id!r}"
                )
            if not isinstance(secret, bytes) or len(secret) < _MIN_KEY_BYTES:
                raise invalid(
                    f"signing key {key_id!r} must be bytes of at least {_MIN_KEY_BYTES} "
                    "(use os.urandom(32))"
                )
            ring[key_id] = secret
        chosen = next(iter(ring)) if active is None else active
        if chosen not in ring:
            raise invalid(f"signing_key {active!r} is not in signing_keys ({', '.join(ring)})")
        return cls(ring, chosen)

    @classmethod
    def parse(cls, text: str, *, source: str) -> KeyRing:
        """A ring from ``id1:hex,id2:hex`` (or one ``id:hex`` per line); the first signs.

        Raises:
            roost.Error: Invalid naming ``source`` for a malformed entry or a key id given
                twice.
        """
        keys: dict[str, bytes] = {}
        for raw in text.replace("\n", ",").split(","):
            item = raw.strip()
            if not item or item.startswith("#"):
                continue
            key_id, sep, hexed = item.partition(":")
            try:
                secret = bytes.fromhex(hexed.strip())
            except ValueError:
                secret = b""
            if not sep or not secret:
                raise invalid(f"{source}: each key is 'id:hex' (hex-encoded bytes), got {item!r}")
            if key_id.strip() in keys:
                raise invalid(
                    f"{source} names key {key_id.strip()!r} twice: give each key its own id"
                )
            keys[key_id.strip()] = secret
        if not keys:
            raise invalid(f"{source} holds no key; write 'id:hex', e.g. k1:{os.urandom(32).hex()}")
        return cls.build(keys)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """A ring from a key file (lines ``id:hex``; the first signs)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise invalid(f"cannot read key file {os.fspath(path)!r}: {exc.strerror}") from None
        return cls.parse(text, source=f"key file {os.fspath(path)!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KeyRing | None:
        """The ring in ``ROOST_SIGNING_KEYS``, or None when it is unset or empty."""
        text = (os.environ if environ is None else environ).get(ENV_KEYS, "")
        return cls.parse(text, source=ENV_KEYS) if text.strip() else None

    def sign(self, payload: Any) -> tuple[str, str]:
        """``(key_id, hex HMAC-SHA256)`` of ``payload``'s canonical JSON, by the active key."""
        mac = hmac.new(self.keys[self.active], _canonical(payload), hashlib.sha256)
        return self.active, mac.hexdigest()

    def verify(self, key_id: object, payload: Any, sig: object) -> bool:
        """Whether ``sig`` is ``payload``'s HMAC by ring key ``key_id``."""
        if not isinstance(key_id, str) or not isinstance(sig, str):
            return False
        secret = self.keys.get(key_id)
        if secret is None:
            return False
        mac = hmac.new(secret, _canonical(payload), hashlib.sha256).hexdigest()
        return hmac.compare_digest(mac, sig)


def envelope_payload(actor: Any, policies: Any, addressee: str) -> dict[str, Any]:
    """What an envelope's HMAC covers: its claim and its addressee."""
    return {"v": 1, "kind": "context", "actor": actor, "policies": policies, "to": addressee}


def seal(sec: Mapping[str, Any], addressee: str, ring: KeyRing | None) -> dict[str, Any]:
    """``sec`` (a claim or an envelope) signed by ``ring`` and bound to ``addressee``.

    Raises:
        roost.Error: InvalidState when there is no ring (a context needs a signing key);
            Invalid for a scope without an actor or an actor without a scope.
    """
    if ring is None:
        raise Error(
            "starting a workflow under a security context needs a signing key; give "
            f"open_node(signing_keys={{...}}, signing_key=...) or set {ENV_KEYS}",
            kind=ErrorKind.INVALID_STATE,
            retryable=False,
        )
    actor, policies = sec.get("actor"), list(sec.get("policies") or ())
    if actor is None and policies:
        raise invalid(f"a scope needs an actor: set with_actor as well as with_scope ({policies})")
    if actor is not None and not policies:
        raise invalid(
            f"an actor needs a scope: set with_scope as well as with_actor "
            f"({actor.get('id') if isinstance(actor, Mapping) else actor!r} has no policies)"
        )
    key_id, sig = ring.sign(envelope_payload(actor, policies, addressee))
    return {
        "actor": actor,
        "policies": policies,
        "addressee": addressee,
        "key_id": key_id,
        "sig": sig,
    }


def reseal(context: Mapping[str, Any], addressee: str, ring: KeyRing | None) -> Mapping[str, Any]:
    """``context`` with its security context sealed for ``addressee`` (as is without one)."""
    sec = context.get(SECURITY_KEY) if context else None
    if sec is None:
        return context
    if isinstance(sec, Mapping) and sec.get("addressee") == addressee and "sig" in sec:
        return context
    return {**context, SECURITY_KEY: seal(sec, addressee, ring)}


def _ticket_payload(
    workflow_id: str, topic: str, actor: str | None, kind: str = "relay"
) -> dict[str, Any]:
    return {"v": 1, "kind": kind, "to": workflow_id, "topic": topic, "actor": actor}


def make_ticket(ring: KeyRing, workflow_id: str, topic: str, actor: str | None) -> dict[str, Any]:
    """A relay ticket: leave to send ``topic`` to ``workflow_id``, signed as ``actor``."""
    key_id, sig = ring.sign(_ticket_payload(workflow_id, topic, actor))
    return {"actor": actor, "key_id": key_id, "sig": sig}


def make_control_ticket(
    ring: KeyRing, workflow_id: str, action: str, actor: str | None
) -> dict[str, Any]:
    """A control ticket: leave to ``action`` (``cancel``, ``terminate``) ``workflow_id``.

    Its own kind of signature: it never passes as a relay ticket for a topic of that name.
    """
    key_id, sig = ring.sign(_ticket_payload(workflow_id, action, actor, "control"))
    return {"actor": actor, "key_id": key_id, "sig": sig}


def _verifies(
    ticket: object, ring: KeyRing | None, workflow_id: str, name: str, kind: str = "relay"
) -> bool:
    """Whether ``ticket`` is signed by ``ring`` for ``name`` (a topic or an action) there."""
    return (
        ring is not None
        and isinstance(ticket, Mapping)
        and ring.verify(
            ticket.get("key_id"),
            _ticket_payload(workflow_id, name, ticket.get("actor"), kind),
            ticket.get("sig"),
        )
    )


def control_error(
    ticket: object, workflow_id: str, action: str, ring: KeyRing | None
) -> Error | None:
    """Why ``ticket`` does not let its holder ``action`` the secured workflow; None if it does."""
    if ticket is None:
        return denied(
            f"workflow {workflow_id!r} runs under a security context: only a holder of the "
            f"node's key ring may {action} it from outside the node; sign the command "
            f"(roost workflow {action} --key-file FILE, or {ENV_KEYS})",
            workflow=workflow_id,
            action=action,
        )
    if not _verifies(ticket, ring, workflow_id, action, "control"):
        return denied(
            f"the ticket to {action} workflow {workflow_id!r} does not verify (wrong key, "
            "workflow or action)",
            workflow=workflow_id,
            action=action,
        )
    return None


def ticket_error(
    ticket: object, workflow_id: str, topic: str, ring: KeyRing | None
) -> Error | None:
    """Why ``ticket`` does not admit ``topic`` to the secured workflow; None if it does."""
    if ticket is None:
        return denied(
            f"workflow {workflow_id!r} runs under a security context and takes only signed "
            "messages: send with process.send from a roost process, or sign the command "
            f"(--key-file FILE or {ENV_KEYS})",
            workflow=workflow_id,
            topic=topic,
        )
    if not _verifies(ticket, ring, workflow_id, topic):
        return denied(
            f"the relay ticket for {topic!r} to workflow {workflow_id!r} does not verify "
            "(wrong key, workflow or topic)",
            workflow=workflow_id,
            topic=topic,
        )
    return None


def _queued_payload(actor: Any, policies: Any, queue: str, receipt_id: str) -> dict[str, Any]:
    return {
        "v": 1,
        "kind": "queued",
        "actor": actor,
        "policies": policies,
        "queue": queue,
        "receipt": receipt_id,
    }


def seal_queued(
    sec: Mapping[str, Any], queue: str, receipt_id: str, ring: KeyRing | None
) -> dict[str, Any]:
    """The enqueuer's security context as a queued message keeps it.

    The claim (actor and policies) of ``sec`` (a claim or a workflow's envelope), signed by
    ``ring`` and bound to the message (its queue and receipt id, which a retry and a
    redrive keep); unsigned when the node has no ring.
    """
    actor, policies = sec.get("actor"), list(sec.get("policies") or ())
    kept: dict[str, Any] = {"actor": actor, "policies": policies}
    if ring is None:
        return kept
    key_id, sig = ring.sign(_queued_payload(actor, policies, queue, receipt_id))
    return {**kept, "key_id": key_id, "sig": sig}


def _refused_queued(queue: str, receipt_id: str, why: str) -> Error:
    return denied(
        f"queue {queue!r}: message {receipt_id!r} carries a security context that {why}; "
        "it is not run (it goes to the DLQ). Enqueue it again from the process that may "
        "run it",
        queue=queue,
        receipt_id=receipt_id,
    )


def _queued_shape(stored: object) -> str | None:
    """What is malformed in a stored queued context (None: nothing)."""
    if not isinstance(stored, Mapping) or not set(stored) <= {"actor", "policies", "key_id", "sig"}:
        return "is malformed"
    policies = stored.get("policies")
    if not isinstance(policies, list | tuple) or not all(
        isinstance(p, str) and p for p in policies
    ):
        return "has malformed policies"
    actor = stored.get("actor")
    if actor is None:
        return None
    if not isinstance(actor, Mapping) or set(actor) - {"id", "meta"}:
        return "has a malformed actor"
    try:
        Actor(actor.get("id", ""), actor.get("meta"))
    except Error:
        return "has a malformed actor"
    return None


def _queued_signature(
    stored: Mapping[str, Any], queue: str, receipt_id: str, ring: KeyRing | None
) -> str | None:
    """Why a stored queued context's signature (or its absence) is refused (None: it is not)."""
    signed = "sig" in stored or "key_id" in stored
    if ring is None:
        return f"is signed, but this node has no key ring ({ENV_KEYS})" if signed else None
    if not signed:
        return (
            "is unsigned, but this node has a key ring (it was stored by a node without one, "
            "or written into the store)"
        )
    payload = _queued_payload(
        stored.get("actor"), list(stored.get("policies") or ()), queue, receipt_id
    )
    if not ring.verify(stored.get("key_id"), payload, stored.get("sig")):
        return (
            "does not verify (changed after it was enqueued, copied from another message, "
            "or signed with a key not in this node's ring)"
        )
    return None


def open_queued(
    stored: object, queue: str, receipt_id: str, ring: KeyRing | None
) -> tuple[dict[str, Any] | None, Error | None]:
    """The claim a queued message's delivery runs under, or why it may not run at all.

    ``(None, None)`` for a message without a context (stored without one, or by an older
    roost). On a node with a ring the context must carry a signature by a key of the ring
    over (actor, policies, queue, receipt id); on a node without one it must be unsigned.
    """
    if stored is None:
        return None, None
    why = _queued_shape(stored)
    if why is None and isinstance(stored, Mapping):
        why = _queued_signature(stored, queue, receipt_id, ring)
    if why is not None or not isinstance(stored, Mapping):
        return None, _refused_queued(queue, receipt_id, why or "is malformed")
    return {"actor": stored.get("actor"), "policies": list(stored.get("policies") or ())}, None
