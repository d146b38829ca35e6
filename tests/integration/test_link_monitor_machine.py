"""State machine: links, monitors, trap_links and names on a real node vs an Erlang model.

Each hypothesis rule is one step (spawn, a command to a worker, terminate, cancel, ...).
Hypothesis rules are synchronous, so the node runs in ``trio.run`` (with a ``MockClock``)
on a helper thread for the whole example, and each rule hands its step to the node's
attached process through ``trio.from_thread.run``; the driver performs it, waits with
``wait_all_tasks_blocked()`` until every process is idle again, and returns what each
worker recorded. The rule then compares that with a pure-Python model of DESIGN §2 and
API "Edge rules", so a failure points at the exact step (and shrinks like any machine).

The rules modelled:
- EXIT goes to every monitor, once however often it monitored, with the value or error;
  ``unmonitor`` stops it; monitoring a dead or unknown PID is an immediate EXIT "noproc".
- LINK_DOWN goes to linked processes only on an error exit (a raised error, or terminate:
  Canceled "terminated"); a normal return or an honoured cancel sends none. Without
  ``trap_links`` it kills the receiver ("link" reason, the same error kind), which cascades
  along the receiver's own links; with it, it arrives on ``events()`` as ``LinkDown``.
  Linking to a dead PID is a LINK_DOWN "noproc". ``unlink`` (from either end) stops it.
- Names resolve to their live holder, a live holder keeps its name (AlreadyExists), and
  names are released on exit. A dead PID cannot be sent to, terminated or cancelled.

What is not ordered: within one step, events from *different* processes of a cascade
reach a third process in scheduling order, so each step compares multisets; and a process
killed in the cascade may die before reading events sent to it, so its log must only be
a sub-multiset of them. A link-killed process names one dying neighbour as its cause;
which one depends on the order of the cascade, so the check is that it is one of them
(and the same one wherever that error shows up).

After the last step the node shuts down: every live worker must see exactly one CANCEL
("node shutdown"), which it honours.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import outcome
import pytest
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

import roost
from roost import ErrorKind, Pid, channel, process

app = roost.App("lm")

GHOST = Pid("local", "lm:processes", "ffff.fffff")  # a PID no process ever had
NAMES = ("n0", "n1")

# Shared with the workers (the node runs in this interpreter). Reset for every example.
LOGS: dict[int, list[Any]] = {}  # worker index -> what it saw, in order
PIDS: dict[int, Pid] = {}
WHO: dict[str, int | str] = {str(GHOST): "ghost"}  # str(pid) -> worker index


def who(pid: Pid | str) -> int | str:
    return WHO.get(str(pid), f"stranger {pid}")


def describe_error(err: roost.Error) -> tuple[Any, ...]:
    """``("error", kind, reason, culprit)``; culprit is the linked index behind a link kill."""
    reason = err.details.get("reason")
    if reason == "link":
        return ("error", err.kind.value, "link", who(err.details["linked_pid"]))
    return ("error", err.kind.value, reason or err.message, None)


def describe_event(ev: Any) -> tuple[Any, ...]:
    if isinstance(ev, roost.Exit) and ev.kind is roost.EventKind.EXIT:
        result = ("value", ev.value) if ev.error is None else describe_error(ev.error)
        return ("EXIT", who(ev.pid), result)
    if isinstance(ev, roost.LinkDown) and ev.kind is roost.EventKind.LINK_DOWN:
        return ("LINK_DOWN", who(ev.pid), describe_error(ev.error))
    if isinstance(ev, roost.Cancel) and ev.kind is roost.EventKind.CANCEL:
        return ("CANCEL", ev.reason)
    return ("UNEXPECTED", repr(ev))


def destination(dest: Any) -> Any:
    """A model destination as the worker passes it: a Pid, or a registered name."""
    kind, arg = dest
    if kind == "pid":
        return PIDS[arg]
    if kind == "ghost":
        return GHOST
    return arg


async def spawn_worker(idx: int, *, link: bool, monitor: bool, trap: bool) -> Pid:
    LOGS[idx] = []
    spawner = process.with_options(trap_links=True) if trap else process.with_options()
    start: Callable[..., Any] = {
        (False, False): spawner.spawn,
        (True, False): spawner.spawn_linked,
        (False, True): spawner.spawn_monitored,
        (True, True): spawner.spawn_linked_monitored,
    }[link, monitor]
    pid: Pid = await start("lm:worker", idx)
    PIDS[idx] = pid
    WHO[str(pid)] = idx
    return pid


@app.process
async def worker(idx: int) -> str:
    """A command loop: obeys ``cmd`` messages and records every event it sees."""
    log = LOGS[idx]
    inbox = process.inbox()
    events = process.events()
    while True:
        got = await channel.select(inbox.case_receive(), events.case_receive())
        if got.channel is events:
            event = got.value
            log.append(describe_event(event))
            if isinstance(event, roost.Cancel):
                return f"cancelled:{event.reason}"  # a cooperative, honoured cancel
            continue
        if who(got.value.sender) != "driver":  # Message.sender: the sending process's PID
            log.append(("bad sender", got.value))
        op, *args = got.value.payload
        if op == "exit_ok":
            return f"ok{idx}"
        if op == "exit_error":
            if args[0] == "plain":
                raise RuntimeError(f"boom{idx}")
            raise roost.Error(f"fail{idx}", kind=ErrorKind.CONFLICT)
        try:
            if op == "trap":
                process.set_options(trap_links=args[0])
                assert process.get_options() == {"trap_links": args[0]}
            elif op == "register":
                process.registry.register(args[0])
            elif op == "spawn":
                child, link, monitor, trap = args
                await spawn_worker(child, link=link, monitor=monitor, trap=trap)
            else:
                getattr(process, op)(args[0])  # link/unlink/monitor/unmonitor: a Pid or a name
        except roost.Error as err:
            log.append(("raised", op, err.kind.value))


# -- the harness: a node on a thread, driven one step at a time ---------------------------


def poke_dead(pid: Pid) -> None:
    """A dead PID cannot be sent to, terminated or cancelled (NotFound)."""
    for call in (
        lambda: process.send(pid, "cmd", ("exit_ok",)),
        lambda: process.terminate(pid),
        lambda: process.cancel(pid),
    ):
        with pytest.raises(roost.Error) as info:
            call()
        assert info.value.kind is ErrorKind.NOT_FOUND, info.value


def lookup(name: str) -> Pid | str:
    """The PID holding ``name``, or the kind of error looking it up raised."""
    try:
        return process.registry.lookup(name)
    except roost.Error as err:
        return err.kind.value


@attrs.frozen
class Observed:
    logs: dict[int, list[Any]]  # new entries per worker during the step
    exits: dict[int, tuple[Any, ...]]  # worker -> how it ended, seen by the driver's monitor
    live: int  # process count, the driver included
    names: dict[str, Pid | str]  # name -> holder, or the error kind of looking it up


class NodeThread:
    """``trio.run`` on a thread with an open node; ``step(fn)`` runs ``fn`` as its process."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self._results: queue.Queue[Any] = queue.Queue()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="roost-sm-node", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        try:
            trio.run(self._node_main, clock=trio.testing.MockClock(autojump_threshold=0))
        except BaseException as exc:  # reported by step() / close()
            self.error = exc
        finally:
            self._ready.set()
            self._results.put(None)

    async def _node_main(self) -> None:
        self._send, steps = trio.open_memory_channel[Any](1)
        async with roost.open_node(app) as node:
            WHO[str(node.pid)] = "driver"
            self.node = node
            self.events = process.events()
            self.seen: dict[int, int] = {}
            self.token = trio.lowlevel.current_trio_token()
            self._ready.set()
            async for fn in steps:
                if fn is None:
                    break
                self._results.put(await outcome.acapture(self._run_step, fn))

    async def _run_step(self, fn: Callable[[], Any]) -> Observed:
        await fn()
        await trio.testing.wait_all_tasks_blocked()
        exits: dict[int, tuple[Any, ...]] = {}
        while True:
            got = await channel.select(self.events.case_receive(), default=True)
            if got.default:
                break
            event = describe_event(got.value)
            assert event[0] == "EXIT", f"the driver got {event}"
            assert event[1] not in exits, f"two EXITs for {event[1]}"
            exits[event[1]] = event[2]
            poke_dead(got.value.pid)
        logs = {}
        for idx, log in LOGS.items():
            logs[idx] = log[self.seen.get(idx, 0) :]
            self.seen[idx] = len(log)
        names = {name: lookup(name) for name in NAMES}
        return Observed(logs, exits, self.node.process_count(), names)

    def step(self, fn: Callable[[], Any]) -> Observed:
        """Run ``fn`` in the node, wait until all is quiet, and report what happened."""
        try:
            trio.from_thread.run_sync(self._send.send_nowait, fn, trio_token=self.token)
            result = self._results.get(timeout=60)  # wall clock: only a hang gets here
        except (trio.RunFinishedError, queue.Empty):
            result = None
        if result is None:
            raise AssertionError(f"the node hung or stopped: {self.error!r}") from self.error
        observed: Observed = result.unwrap()
        return observed

    def close(self) -> None:
        """Leave the node block (shutdown: every process gets CANCEL "node shutdown")."""
        if self._thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError, trio.WouldBlock):
                trio.from_thread.run_sync(self._send.send_nowait, None, trio_token=self.token)
            self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the node did not shut down"
        if self.error is not None:
            raise self.error


# -- the model --------------------------------------------------------------------------


@attrs.define
class Proc:
    trap: bool
    links: set[int] = attrs.Factory(set)
    watching: set[int] = attrs.Factory(set)  # whom it monitors
    watchers: set[int] = attrs.Factory(set)  # who monitors it


def noproc() -> tuple[Any, ...]:
    return ("error", "NotFound", "noproc", None)


@attrs.define
class Expected:
    must: dict[int, Counter[Any]] = attrs.Factory(dict)  # exactly these, in any order
    may: dict[int, Counter[Any]] = attrs.Factory(dict)  # any sub-multiset (died mid-step)
    exits: dict[int, tuple[Any, ...]] = attrs.Factory(dict)
    culprits: dict[int, frozenset[Any]] = attrs.Factory(dict)  # for link kills

    def log(self, idx: int, entry: tuple[Any, ...]) -> None:
        self.must.setdefault(idx, Counter())[entry] += 1


class Model:
    def __init__(self) -> None:
        self.alive: dict[int, Proc] = {}
        self.names: dict[str, int] = {}

    def resolve(self, dest: tuple[str, Any]) -> int | str | None:
        """The index (or "ghost") a destination names; None for a name nobody holds."""
        kind, arg = dest
        if kind == "pid":
            return arg
        if kind == "ghost":
            return "ghost"
        return self.names.get(arg)

    def spawn(self, idx: int, trap: bool, parent: int | None, link: bool, monitor: bool) -> None:
        self.alive[idx] = Proc(trap)
        if parent is not None and link:
            self.alive[parent].links.add(idx)
            self.alive[idx].links.add(parent)
        if parent is not None and monitor:
            self.alive[parent].watching.add(idx)
            self.alive[idx].watchers.add(parent)

    def command(self, idx: int, op: str, arg: Any, exp: Expected) -> None:
        """A non-exiting command run by worker ``idx``."""
        me = self.alive[idx]
        if op == "trap":
            me.trap = arg
            return
        if op == "register":
            holder = self.names.get(arg)
            if holder is None or holder == idx:
                self.names[arg] = idx
            else:
                exp.log(idx, ("raised", op, "AlreadyExists"))
            return
        target = self.resolve(arg)
        if target is None:
            exp.log(idx, ("raised", op, "NotFound"))
            return
        if target == idx:
            return  # linking to or monitoring oneself is a no-op
        other = self.alive.get(target)
        if op == "monitor":
            if other is None:
                exp.log(idx, ("EXIT", target, noproc()))
            else:
                me.watching.add(target)
                other.watchers.add(idx)
        elif op == "unmonitor":
            me.watching.discard(target)
            if other is not None:
                other.watchers.discard(idx)
        elif op == "link":
            if other is not None:
                me.links.add(target)
                other.links.add(idx)
            elif me.trap:
                exp.log(idx, ("LINK_DOWN", target, noproc()))
            else:
                self.die(idx, ("error", "NotFound", "link", "*"), exp, culprit=target)
        elif op == "unlink":
            me.links.discard(target)
            if other is not None:
                other.links.discard(idx)
        else:
            raise AssertionError(op)

    def die(self, root: int, result: tuple[Any, ...], exp: Expected, culprit: Any = None) -> None:
        """``root`` ends with ``result``; an error cascades along links to non-trappers."""
        dying = [root]
        if result[0] == "error":
            frontier = [root]
            while frontier:
                for nxt in sorted(self.alive[frontier.pop()].links):
                    if nxt not in dying and not self.alive[nxt].trap:
                        dying.append(nxt)
                        frontier.append(nxt)
        results = {root: result}
        if culprit is not None:
            exp.culprits[root] = frozenset([culprit])
        for idx in dying[1:]:
            results[idx] = ("error", result[1], "link", "*")
            exp.culprits[idx] = frozenset(n for n in self.alive[idx].links if n in dying)
        for idx in dying:
            proc = self.alive[idx]
            exp.exits[idx] = results[idx]
            for watcher in proc.watchers:
                entry = ("EXIT", idx, results[idx])
                if watcher not in dying:
                    exp.log(watcher, entry)
                elif watcher != root:
                    exp.may.setdefault(watcher, Counter())[entry] += 1
            if result[0] == "error":
                for linked in proc.links:
                    if linked not in dying:
                        exp.log(linked, ("LINK_DOWN", idx, results[idx]))
        for idx in dying:
            proc = self.alive.pop(idx)
            for other in proc.links:
                if other in self.alive:
                    self.alive[other].links.discard(idx)
            for other in proc.watchers:
                if other in self.alive:
                    self.alive[other].watching.discard(idx)
            for other in proc.watching:
                if other in self.alive:
                    self.alive[other].watchers.discard(idx)
        self.names = {name: idx for name, idx in self.names.items() if idx in self.alive}


# -- the machine ------------------------------------------------------------------------

MAX_ALIVE = 6
traps = st.sampled_from([False, False, True])  # mostly not trapping, so failures cascade


class LinkMonitorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        LOGS.clear()
        PIDS.clear()
        WHO.clear()
        WHO[str(GHOST)] = "ghost"
        self.model = Model()
        self.count = 0
        self.node = NodeThread()
        self.closed = False
        self.failed = False
        self.culprit: dict[Any, Any] = {}  # per step: who a link-killed process blamed

    def teardown(self) -> None:
        if self.closed:
            return
        self.closed = True
        alive = sorted(self.model.alive)
        seen = {idx: len(LOGS[idx]) for idx in alive}
        self.node.close()
        if self.failed:
            return
        for idx in alive:  # shutdown: a CANCEL, which every worker honours
            assert LOGS[idx][seen[idx] :] == [("CANCEL", "node shutdown")], idx

    # -- helpers -------------------------------------------------------------------------

    def pick_alive(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted(self.model.alive)), label="worker")

    def pick_dest(self, data: st.DataObject) -> tuple[str, Any]:
        """Mostly a live worker (itself included); sometimes any worker, dead ones too."""
        kind = data.draw(st.sampled_from(["live"] * 5 + ["any", "name", "ghost"]))
        if kind == "live":
            return ("pid", self.pick_alive(data))
        if kind == "any":
            return ("pid", data.draw(st.integers(0, self.count - 1), label="any worker"))
        if kind == "name":
            return ("name", data.draw(st.sampled_from(NAMES), label="name"))
        return ("ghost", None)

    def can_spawn(self) -> bool:
        return len(self.model.alive) < MAX_ALIVE

    def run(self, what: str, fn: Callable[[], Any], exp: Expected) -> None:
        try:
            self.compare(what, self.node.step(fn), exp)
        except BaseException as exc:
            self.failed = True  # the model is off from here: skip the shutdown check
            exc.add_note(f"in step: {what}")
            raise

    def blank_culprit(self, exp: Expected, subject: Any, result: tuple[Any, ...]) -> Any:
        """A link kill names one dying neighbour as its cause; check it, then blank it out."""
        if result[0] != "error" or result[2] != "link":
            return result
        candidates = exp.culprits.get(subject, frozenset())
        assert result[3] in candidates, (
            f"{subject} was killed through a link to {result[3]}; expected one of "
            f"{sorted(candidates, key=str)}"
        )
        # The same error reaches the driver, monitors and trapping links: one culprit.
        assert self.culprit.setdefault(subject, result[3]) == result[3], subject
        return (*result[:3], "*")

    def normal(self, exp: Expected, entry: tuple[Any, ...]) -> tuple[Any, ...]:
        if entry[0] in ("EXIT", "LINK_DOWN"):
            return (entry[0], entry[1], self.blank_culprit(exp, entry[1], entry[2]))
        return entry

    def compare(self, what: str, got: Observed, exp: Expected) -> None:
        self.culprit = {}
        exits = {idx: self.blank_culprit(exp, idx, res) for idx, res in got.exits.items()}
        assert exits == exp.exits, f"after {what}: exits {exits} != model {exp.exits}"
        for idx, entries in got.logs.items():
            seen = Counter(self.normal(exp, entry) for entry in entries)
            if idx in exp.may:
                extra = seen - exp.may[idx]
                assert not extra, f"after {what}: {idx} saw {entries}; model allows {exp.may[idx]}"
            else:
                want = exp.must.get(idx, Counter())
                assert seen == want, f"after {what}: {idx} saw {entries}; model says {want}"
        assert got.live == 1 + len(self.model.alive), f"after {what}: live process count"
        names = {
            name: PIDS[self.model.names[name]] if name in self.model.names else "NotFound"
            for name in NAMES
        }
        assert got.names == names, f"after {what}: names {got.names} != model {names}"

    # -- rules ---------------------------------------------------------------------------

    @initialize(traps=st.lists(traps, min_size=2, max_size=4))
    def start(self, traps: list[bool]) -> None:
        for trap in traps:
            self.spawn(trap)

    @precondition(can_spawn)
    @rule(trap=traps)
    def spawn(self, trap: bool) -> None:
        idx = self.count
        self.count += 1
        self.model.spawn(idx, trap, None, link=False, monitor=False)

        async def step() -> None:
            await spawn_worker(idx, link=False, monitor=True, trap=trap)  # driver monitors all

        self.run(f"spawn {idx} (trap={trap})", step, Expected())

    @precondition(lambda self: self.can_spawn() and self.model.alive)
    @rule(data=st.data(), link=st.booleans(), monitor=st.booleans(), trap=traps)
    def spawn_child(self, data: st.DataObject, link: bool, monitor: bool, trap: bool) -> None:
        parent = self.pick_alive(data)
        idx = self.count
        self.count += 1
        self.model.spawn(idx, trap, parent, link=link, monitor=monitor)

        async def step() -> None:
            process.send(PIDS[parent], "cmd", ("spawn", idx, link, monitor, trap))
            await trio.testing.wait_all_tasks_blocked()
            process.monitor(PIDS[idx])  # the driver watches every worker's exit

        what = f"{parent} spawns {idx} (link={link}, monitor={monitor}, trap={trap})"
        self.run(what, step, Expected())

    def command(self, data: st.DataObject, op: str) -> None:
        idx = self.pick_alive(data)
        if op == "trap":
            arg: Any = data.draw(st.booleans(), label="trap")
        elif op == "register":
            arg = data.draw(st.sampled_from(NAMES), label="name")
        else:
            arg = self.pick_dest(data)
        exp = Expected()
        self.model.command(idx, op, arg, exp)
        wire = destination(arg) if isinstance(arg, tuple) else arg

        async def step() -> None:
            process.send(PIDS[idx], "cmd", (op, wire))

        self.run(f"{idx}: {op} {arg}", step, exp)

    @precondition(lambda self: self.model.alive)
    @rule(data=st.data(), op=st.sampled_from(["link", "monitor"]))
    def wire(self, data: st.DataObject, op: str) -> None:
        self.command(data, op)

    @precondition(lambda self: len(self.model.alive) >= 2)
    @rule(data=st.data())
    def mesh(self, data: st.DataObject) -> None:
        """Several links / monitors between live workers at once.

        Nobody dies, so it does not matter in which order the workers run them.
        """
        live = st.sampled_from(sorted(self.model.alive))
        edges = data.draw(
            st.lists(
                st.tuples(st.sampled_from(["link", "monitor"]), live, live),
                min_size=1,
                max_size=6,
            ),
            label="edges",
        )
        exp = Expected()
        for op, idx, other in edges:
            self.model.command(idx, op, ("pid", other), exp)

        async def step() -> None:
            for op, idx, other in edges:
                process.send(PIDS[idx], "cmd", (op, PIDS[other]))

        self.run(f"mesh {edges}", step, exp)

    def edges(self) -> list[tuple[str, int, int]]:
        found = []
        for idx, proc in sorted(self.model.alive.items()):
            found += [("unlink", idx, other) for other in sorted(proc.links)]  # either end
            found += [("unmonitor", idx, other) for other in sorted(proc.watching)]
        return found

    @precondition(lambda self: self.edges())
    @rule(data=st.data())
    def cut(self, data: st.DataObject) -> None:
        """Remove an existing link (from either end) or monitor."""
        op, idx, other = data.draw(st.sampled_from(self.edges()), label="edge")
        exp = Expected()
        self.model.command(idx, op, ("pid", other), exp)

        async def step() -> None:
            process.send(PIDS[idx], "cmd", (op, PIDS[other]))

        self.run(f"{idx}: {op} {other}", step, exp)

    @precondition(lambda self: self.model.alive)
    @rule(data=st.data(), op=st.sampled_from(["link", "monitor", "unlink", "unmonitor"]))
    def rewire(self, data: st.DataObject, op: str) -> None:
        self.command(data, op)

    @precondition(lambda self: self.model.alive)
    @rule(data=st.data(), op=st.sampled_from(["trap", "register"]))
    def flag(self, data: st.DataObject, op: str) -> None:
        self.command(data, op)

    @precondition(lambda self: self.model.alive)
    @rule(data=st.data(), how=st.sampled_from(["ok", "cancel"]))
    def end(self, data: st.DataObject, how: str) -> None:
        """One worker ends normally: it returns, or honours a cancel."""
        self.finish(data, how)

    @precondition(lambda self: self.model.alive)
    @rule(data=st.data(), how=st.sampled_from(["plain", "roost", "terminate"]))
    def fail(self, data: st.DataObject, how: str) -> None:
        """One worker fails: raises an exception, a roost.Error, or is terminated."""
        self.finish(data, how)

    def finish(self, data: st.DataObject, how: str) -> None:
        idx = self.pick_alive(data)
        pid = PIDS[idx]
        exp = Expected()

        async def step() -> None:
            if how == "terminate":
                process.terminate(pid)
            elif how == "cancel":
                process.cancel(pid, "stop")
            elif how == "ok":
                process.send(pid, "cmd", ("exit_ok",))
            else:
                process.send(pid, "cmd", ("exit_error", how))

        if how == "ok":
            self.model.die(idx, ("value", f"ok{idx}"), exp)
        elif how == "cancel":
            exp.log(idx, ("CANCEL", "stop"))
            self.model.die(idx, ("value", "cancelled:stop"), exp)
        elif how == "terminate":
            self.model.die(idx, ("error", "Canceled", "terminated", None), exp)
        elif how == "plain":
            self.model.die(idx, ("error", "Internal", f"RuntimeError: boom{idx}", None), exp)
        else:
            self.model.die(idx, ("error", "Conflict", f"fail{idx}", None), exp)
        self.run(f"{idx} ends: {how}", step, exp)


TestLinkMonitorMachine = LinkMonitorMachine.TestCase
