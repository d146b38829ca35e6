"""Cron triggers: ``app.cron(expression, entry, catch_up="skip")``.

Each trigger runs its entry with a ``roost.CronTick`` at every fire time (UTC), never two
runs of one trigger at once. Its last fire time is stored, and committed *before* the
entry runs, so a schedule fires at most once per fire time, even across restarts (a run
cut short by a crash is not repeated; make the entry enqueue durable work if it must
finish). Fire times missed while the node was down are handled by ``catch_up``:
``"skip"`` (none), ``"one"`` (the latest, once) or ``"all"`` (each, in order).

How each run ended (a ``CronOutcome``) is stored too, in ``cron_runs`` under (trigger id,
run number): the latest ``KEPT_RUNS`` of each trigger, read back when a node starts, so
the console shows them after a restart. A run cut short by the node's stop has none.
"""

from __future__ import annotations

import datetime as dt
import logging
from functools import partial
from typing import Any

import attrs
import trio

from roost._cron import CronSchedule, parse_firing_cron
from roost._errors import Error, ErrorKind, invalid
from roost._text import check_text
from roost.actors._app import ENTRY_ATTR, register_extension, register_node_service
from roost.actors._node import Node
from roost.queues._contain import contain, describe
from roost.queues._runtime import run_target
from roost.storage import MAX_KEY_SIZE, Codec, key, unpack_key
from roost.storage._codec import record
from roost.storage._quarantine import set_aside
from roost.workflow._host_protocol import FIRES_CRON

__all__ = [
    "KEPT_RUNS",
    "RUNS_TABLE",
    "CronOutcome",
    "CronRuntime",
    "CronTick",
    "CronTrigger",
    "declare_cron",
]

log = logging.getLogger("roost.queues")

_CATCH_UP = ("skip", "one", "all")
_MAX_CATCH_UP = 1000  # "all" runs at most this many missed fires
RUNS_TABLE = "cron_runs"
KEPT_RUNS = 10  # the outcomes kept of each trigger (the latest)


@record("q.cron_tick")
@attrs.frozen(kw_only=True)
class CronTick:
    """What a cron target gets: when it was due, when it fired, and the expression."""

    scheduled_at: dt.datetime
    fired_at: dt.datetime
    expression: str


@attrs.frozen(kw_only=True)
class CronTrigger:
    """One declared trigger; ``id`` names it in the store (entry id and expression).

    ``legacy_id`` is the name a store may hold its last fire under from before triggers of
    registered functions were named by their entry id (the function's qualified name):
    read when ``id`` has no row, and replaced by ``id`` at the next fire.
    """

    id: str
    schedule: CronSchedule
    entry: Any
    catch_up: str
    legacy_id: str | None = None


def declare_cron(app: Any, expression: str, entry: Any, catch_up: str = "skip") -> CronTrigger:
    """``app.cron``: validate and record a trigger.

    Raises:
        roost.Error: Invalid for a bad expression or catch_up.
    """
    schedule = parse_firing_cron(expression)
    if catch_up not in _CATCH_UP:
        raise invalid(f"catch_up must be one of {', '.join(_CATCH_UP)}, got {catch_up!r}")
    qualname = entry if isinstance(entry, str) else getattr(entry, "__qualname__", repr(entry))
    # A registered function is named by its entry id ("shop:hourly"), as an id string is:
    # the store, `roost cron list` with or without --app and the console name it alike.
    entry_id = getattr(entry, ENTRY_ATTR, None) if callable(entry) else None
    name = entry_id if isinstance(entry_id, str) else qualname
    legacy = f"{qualname} @ {schedule.expression}" if name != qualname else None
    trigger = CronTrigger(
        id=f"{name} @ {schedule.expression}",
        schedule=schedule,
        entry=entry,
        catch_up=catch_up,
        legacy_id=legacy,
    )
    check_text(trigger.id, "cron entry")
    # Its last fire time is stored under the trigger's key, its runs' outcomes under the
    # key and a run number (a u64: every number takes the same 8 bytes).
    if len(key(trigger.id, 0)) > MAX_KEY_SIZE:
        raise invalid(
            f"cron trigger {trigger.id[:60]!r}... is too long to store (at most "
            f"{MAX_KEY_SIZE} bytes for the entry name and the expression together)"
        )
    app.declared.setdefault("cron", {})[trigger.id] = trigger
    return trigger


@record("q.cron_outcome")
@attrs.define
class CronOutcome:
    """How a run of a trigger went; the console shows the latest ones (stored when it ends)."""

    scheduled_at: dt.datetime
    fired_at: dt.datetime
    manual: bool = False  # started by hand ("trigger now"), not by the schedule
    finished_at: dt.datetime | None = None  # None while it runs
    error: Error | None = None


class CronRuntime:
    """The cron triggers of one node (``node.ext["cron"]``)."""

    def __init__(self, node: Node, nursery: trio.Nursery) -> None:
        self.node = node
        self.codec = Codec()
        assert node.store is not None
        self.store = node.store
        self._nursery = nursery
        # Each trigger's latest run (running, or its stored outcome), and its stored runs.
        self.outcomes: dict[str, CronOutcome] = {}
        self.recent: dict[str, list[CronOutcome]] = {}

    @classmethod
    async def start_on(cls, node: Node, nursery: trio.Nursery) -> None:
        """The node service: one task per trigger."""
        triggers: dict[str, CronTrigger] = node.app.declared.get("cron", {})
        if node.store is None or not triggers or not node.settings.get("cron", True):
            return
        if getattr(node.settings.get("workflow_host"), FIRES_CRON, False):
            return  # the workflow host fires them (Temporal: once per cluster)
        runtime = cls(node, nursery)
        runtime._load_runs(triggers)
        for trigger in triggers.values():
            node.app.resolve(trigger.entry)  # an unknown entry fails the node start
            nursery.start_soon(runtime._run, trigger, name=f"roost.cron {trigger.id}")
        node.ext["cron"] = runtime

    def last_fire(self, trigger_id: str) -> dt.datetime | None:
        """The stored last fire time of a trigger (None if it never fired)."""
        trigger = self.node.app.declared.get("cron", {}).get(trigger_id)
        return None if trigger is None else self._last(trigger)

    def trigger_now(self, trigger_id: str) -> None:
        """Run a trigger's entry once now, outside its schedule (its last fire time stays).

        Raises:
            roost.Error: NotFound for an unknown trigger; InvalidState while a run of it is
                under way (a trigger never runs twice at once).
        """
        trigger = self.node.app.declared.get("cron", {}).get(trigger_id)
        if trigger is None:
            raise Error(f"no cron trigger {trigger_id!r}", kind=ErrorKind.NOT_FOUND)
        running = self.outcomes.get(trigger_id)
        if running is not None and running.finished_at is None:
            raise Error(
                f"cron trigger {trigger_id!r} is running (since {running.fired_at}); a trigger "
                "runs once at a time: try again when it is done",
                kind=ErrorKind.INVALID_STATE,
            )
        now = self.node.now()
        call = partial(self._call, trigger, now, manual=True)
        self._nursery.start_soon(call, name=f"roost.cron {trigger_id} (by hand)")

    def _load_runs(self, triggers: dict[str, CronTrigger]) -> None:
        """Read the stored outcomes of ``triggers`` (an unreadable one is left out)."""
        with self.store.read() as txn:
            for trigger_id in triggers:
                runs = []
                for _, data in txn.prefix(RUNS_TABLE, key(trigger_id)):
                    try:
                        run = self.codec.decode(data)
                    except Exception:  # noqa: BLE001, S112 - shown to people only: skipped
                        continue
                    if isinstance(run, CronOutcome):
                        runs.append(run)
                if runs:
                    self.recent[trigger_id] = runs[-KEPT_RUNS:]
                    self.outcomes[trigger_id] = runs[-1]

    async def _store_run(self, trigger: CronTrigger, outcome: CronOutcome) -> None:
        """Store a finished run's outcome as the trigger's next; drop all but the latest."""
        prefix = key(trigger.id)
        data = self.codec.encode(outcome)

        def write(txn: Any) -> None:
            rows = [k for k, _ in txn.prefix(RUNS_TABLE, prefix)]
            number = _run_number(rows[-1]) + 1 if rows else 1
            txn.put(RUNS_TABLE, key(trigger.id, number), data)
            for old in rows[: max(len(rows) + 1 - KEPT_RUNS, 0)]:
                txn.delete(RUNS_TABLE, old)

        runs = [*self.recent.get(trigger.id, ()), outcome][-KEPT_RUNS:]
        self.recent[trigger.id] = runs
        try:
            await self.node.transact(write)
        except Exception:  # the store refused: the console shows it until the node stops
            log.exception(
                "cron %s: the outcome of the run due at %s could not be stored",
                trigger.id,
                outcome.scheduled_at,
            )

    def _last(self, trigger: CronTrigger) -> dt.datetime | None:
        row = key(trigger.id)
        with self.store.read() as txn:
            data = txn.get("cron", row)
            if data is None and trigger.legacy_id is not None:
                row = key(trigger.legacy_id)
                data = txn.get("cron", row)
        if data is None:
            return None
        try:
            last: dt.datetime = self.codec.decode(data)
        except Exception as exc:  # noqa: BLE001 - unreadable, whatever the decoder raised
            # Set aside (kept, raw): the trigger goes on as one that never fired.
            set_aside(self.store, self.codec, ("cron", row, data), exc, self.node.now())
            return None
        return last

    async def _store_last(self, trigger: CronTrigger, at: dt.datetime) -> None:
        data = self.codec.encode(at)
        row = key(trigger.id)
        legacy = None if trigger.legacy_id is None else key(trigger.legacy_id)

        def write(txn: Any) -> None:
            txn.put("cron", row, data)
            if legacy is not None:
                txn.delete("cron", legacy)  # one row per trigger: its id's

        await self.node.transact(write)

    def _missed(self, trigger: CronTrigger, now: dt.datetime) -> list[dt.datetime]:
        last = self._last(trigger)
        if last is None or trigger.catch_up == "skip":
            return []
        if trigger.catch_up == "one":  # the latest missed one, however many were missed
            latest = trigger.schedule.last_at_or_before(now)
            return [latest] if latest is not None and latest > last else []
        missed: list[dt.datetime] = []
        fire = trigger.schedule.next_after(last)
        while fire is not None and fire <= now and len(missed) < _MAX_CATCH_UP:
            missed.append(fire)
            fire = trigger.schedule.next_after(fire)
        if fire is not None and fire <= now:
            log.warning(
                "cron %s: more than %d fire times were missed; running the first %d",
                trigger.id,
                _MAX_CATCH_UP,
                _MAX_CATCH_UP,
            )
        return missed

    async def _run(self, trigger: CronTrigger) -> None:
        for missed in self._missed(trigger, self.node.now()):
            await self._fire(trigger, missed)
        while True:
            due = trigger.schedule.next_after(self.node.now())
            if due is None:
                return  # the schedule has ended (a year field in the past)
            await trio.sleep(max(0.0, (due - self.node.now()).total_seconds()))
            await self._fire(trigger, due)

    async def _fire(self, trigger: CronTrigger, due: dt.datetime) -> None:
        try:
            await self._store_last(trigger, due)  # first: at most one fire per fire time
        except Exception:  # the store refused: skip this fire, go on
            log.exception(
                "cron %s: the fire time %s could not be stored; skipping this run (a "
                "schedule runs each fire time at most once)",
                trigger.id,
                due,
            )
            return
        await self._call(trigger, due, manual=False)

    async def _call(self, trigger: CronTrigger, due: dt.datetime, *, manual: bool) -> None:
        running = self.outcomes.get(trigger.id)
        if running is not None and running.finished_at is None:
            log.warning("cron %s: the run due at %s is skipped: one is under way", trigger.id, due)
            return
        fired = self.node.now()
        outcome = self.outcomes[trigger.id] = CronOutcome(
            scheduled_at=due, fired_at=fired, manual=manual
        )
        tick = CronTick(scheduled_at=due, fired_at=fired, expression=trigger.schedule.expression)
        try:
            entry_id = self.node.app.resolve(trigger.entry).id
            await run_target(self.node, entry_id, tick, None)
        except BaseException as exc:  # a failed run is logged; the schedule goes on
            error = contain(exc)  # (cancellation goes on up)
            outcome.error = error
            log.warning(
                "cron %s: the run due at %s failed: %s",
                trigger.id,
                due,
                describe(error),
                exc_info=exc if error.kind is ErrorKind.INTERNAL else None,
            )
        finally:
            outcome.finished_at = self.node.now()
        await self._store_run(trigger, outcome)  # not reached when the node stops it


def _run_number(row: bytes) -> int:
    """The run number of a ``cron_runs`` key, (trigger id, number); 0 for a damaged key."""
    try:
        return int(unpack_key(row, str, int)[1])
    except Error:
        return 0


register_extension("cron", declare_cron)
register_node_service(CronRuntime.start_on)
