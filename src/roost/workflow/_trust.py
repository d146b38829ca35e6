"""The check of a secured run's envelope, before its body runs (backend-neutral, no trio).

A workflow started under a security context carries it sealed in its ``Started`` event
(``roost._security``). The driver asks its host's ``Ports.trust()`` for what to check it
against, and checks it at every activation, replayed ones included: a host's key ring and
the app's policy names. A failed check fails the execution with PermissionDenied, and none
of the body runs (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from roost._errors import Error
from roost._security import (
    ENV_KEYS,
    ENVELOPE_FIELDS,
    SECURITY_KEY,
    KeyRing,
    denied,
    envelope_payload,
    reseal,
)

if TYPE_CHECKING:
    from roost.workflow._history import Started

__all__ = ["Trust", "activity_context", "activity_id", "check_envelope", "envelope_error"]


@attrs.frozen
class Trust:
    """What a host checks envelopes against: its key ring (None: it has none) and policies."""

    ring: KeyRing | None
    policies: Collection[str] = attrs.field(factory=frozenset)


def envelope_error(started: Started, trust: Trust) -> Error | None:
    """Why the run ``started`` begins may not run (its id is the addressee); None if it may."""
    return check_envelope(started.context, started.workflow_id, trust.ring, trust.policies)


def activity_id(workflow_id: str, run_id: str, seq: int) -> str:
    """The derived, replay-stable id of a run's activity ``seq``: its envelope's addressee."""
    return f"{workflow_id}/{run_id}/activity/{seq}"


def activity_context(
    context: Mapping[str, Any], workflow_id: str, addressee: str, trust: Trust
) -> tuple[Mapping[str, Any], Error | None]:
    """A secured activity's context, sealed for ``addressee`` and checked before it runs.

    The workflow's envelope is checked first (it is what the activity's is made from);
    the activity's, bound to its own id, is then checked as the activity's host would.
    Returns the activity's context and the error that refuses it (None: it may run).
    """
    refused = check_envelope(context, workflow_id, trust.ring, trust.policies)
    if refused is not None:
        return context, refused
    try:
        sealed = reseal(context, addressee, trust.ring)
    except Error as exc:
        return context, exc
    return sealed, check_envelope(sealed, addressee, trust.ring, trust.policies)


def check_envelope(
    context: Mapping[str, Any] | None,
    addressee: str,
    ring: KeyRing | None,
    policies: Collection[str],
) -> Error | None:
    """Why the envelope in ``context`` may not run as ``addressee``; None if it may (or none).

    Checked: a ring to verify with, the envelope's shape (an actor with a scope, no
    policies without an actor), the key id (in the ring), the signature, the addressee,
    and that every named policy is registered (``policies``).
    """
    sec = context.get(SECURITY_KEY) if context else None
    if sec is None:
        return None
    if ring is None:
        return denied(
            f"{addressee!r} runs under a signed security context, but this node has no "
            f"signing keys to verify it; open the node with its ring ({ENV_KEYS})",
            addressee=addressee,
        )
    problem = _shape_problem(sec) or _signature_problem(sec, ring)
    problem = problem or _binding_problem(sec, addressee, policies)
    if problem is None:
        return None
    return denied(f"the security envelope of {addressee!r} {problem}", addressee=addressee)


def _shape_problem(sec: object) -> str | None:
    if not isinstance(sec, Mapping) or set(sec) != ENVELOPE_FIELDS:
        return "is malformed (it is not a sealed envelope)"
    actor, named = sec["actor"], sec["policies"]
    actor_ok = actor is None or (isinstance(actor, Mapping) and isinstance(actor.get("id"), str))
    names_ok = isinstance(named, list) and all(isinstance(n, str) for n in named)
    if not actor_ok or not names_ok or (actor is None) != (not named):
        return "is inconsistent (an actor needs a scope, a scope an actor)"
    return None


def _signature_problem(sec: Mapping[str, Any], ring: KeyRing) -> str | None:
    key_id = sec["key_id"]
    if not isinstance(key_id, str) or key_id not in ring.keys:
        return (
            f"is signed with key {key_id!r}, which is not in this node's ring "
            f"({', '.join(ring.keys)}); keep retired keys in the ring while runs use them"
        )
    payload = envelope_payload(sec["actor"], sec["policies"], sec["addressee"])
    if not ring.verify(key_id, payload, sec["sig"]):
        return "has a bad signature (it was changed after it was signed)"
    return None


def _binding_problem(
    sec: Mapping[str, Any], addressee: str, policies: Collection[str]
) -> str | None:
    if sec["addressee"] != addressee:
        return f"is bound to {sec['addressee']!r}, not to this execution"
    missing = [n for n in sec["policies"] if n not in policies]
    if missing:
        return f"names policies this app does not register: {', '.join(missing)}"
    return None
