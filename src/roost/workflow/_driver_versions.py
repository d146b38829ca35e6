"""``workflow.version`` on the driver: deterministic versioning (a base of ``Driver``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from roost._errors import NondeterminismError
from roost.workflow._driver_parts import check_version_range, version_dropped
from roost.workflow._history import VersionMarker

__all__ = ["DEFAULT_VERSION", "Versions"]

DEFAULT_VERSION = -1


class Versions:
    """Temporal's GetVersion for a driver (``Driver`` has the slots and methods named here)."""

    __slots__ = ()
    _versions: dict[str, int]
    _expected: Sequence[Any] | None
    _own: Callable[[str], dict[Any, Any]]
    _issue: Callable[[Any], None]
    _next_seq: Callable[[], int]
    _next_recorded: Callable[[], Any]
    _stop_replay: Callable[[NondeterminismError], None]

    def version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """Deterministic versioning (Temporal's GetVersion).

        A new run records and returns ``max_supported``; a replay returns the recorded
        version, or ``DEFAULT_VERSION`` (-1) for a history made before the change existed.
        """
        check_version_range(change_id, min_supported, max_supported)
        chosen = self._versions.get(change_id)
        if chosen is None:
            chosen = self._choose_version(change_id, max_supported)
            self._own("_versions")[change_id] = chosen
        if not min_supported <= chosen <= max_supported:
            # Only a replay can hit this: the code dropped support for this run. Like a
            # divergence, it stops the replay (the run stays open until the code is fixed)
            # instead of recording a failure into the run's history.
            self._stop_replay(version_dropped(change_id, chosen, min_supported, max_supported))
        return chosen

    def _choose_version(self, change_id: str, max_supported: int) -> int:
        if self._expected is None:
            self._issue(
                VersionMarker(seq=self._next_seq(), change_id=change_id, version=max_supported)
            )
            return max_supported
        nxt = self._next_recorded()
        if isinstance(nxt, VersionMarker) and nxt.change_id == change_id:
            self._issue(
                VersionMarker(seq=self._next_seq(), change_id=change_id, version=nxt.version)
            )
            return int(nxt.version)
        return DEFAULT_VERSION  # replaying a history made before this change
