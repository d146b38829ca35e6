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
from roost._security import KeyRing, check_envelope, reseal

if TYPE_CHECKING:
    from roost.workflow._history import Started

__all__ = ["Trust", "activity_context", "activity_id", "envelope_error"]


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
