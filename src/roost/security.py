"""``roost.security``: who is acting (an actor) under which policies (a scope).

See docs/security.md: the context travels with what a process starts, is signed into a
workflow's start record, and the runtime asks the scope's policies before it acts.
"""

from roost._security import Actor, Scope
from roost.actors._api import security_actor as actor
from roost.actors._api import security_scope as scope

__all__ = ["Actor", "Scope", "actor", "scope"]
