"""The pure restart policy against an independent model of OTP's rules."""

import math

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from roost import supervisor
from roost._errors import ErrorKind
from roost.supervisor._policy import (
    Escalate,
    ExitInfo,
    Flags,
    GiveUp,
    RestartChildren,
    Stay,
    backoff_delay,
    decide,
)

IDS = ["a", "b", "c", "d"]
EXITS = {
    "normal": ExitInfo(normal=True),
    "error": ExitInfo(normal=False, error_kind=ErrorKind.INTERNAL),
    "canceled": ExitInfo(normal=False, error_kind=ErrorKind.CANCELED),
}


def model_wants(restart, how):
    """OTP: permanent always; transient only on an abnormal (non-shutdown) exit."""
    return restart == "permanent" or (restart == "transient" and how == "error")


class RestartPolicyMachine(RuleBasedStateMachine):
    """Drives ``decide`` with exits and time, and checks every decision against a model
    that keeps the *full* log of restart times (no pruning) and filters the window anew."""

    @initialize(
        restarts=st.lists(
            st.sampled_from(["permanent", "transient", "temporary"]), min_size=4, max_size=4
        ),
        strategy=st.sampled_from(list(supervisor.Strategy)),
        intensity=st.integers(0, 3),
        period=st.floats(1, 10),
    )
    def setup(self, restarts, strategy, intensity, period):
        self.specs = {
            cid: supervisor.child(cid, "x:w", restart=r)
            for cid, r in zip(IDS, restarts, strict=True)
        }
        self.flags = Flags(strategy=strategy, intensity=intensity, period=period)
        self.order = list(IDS)
        self.running = set(IDS)
        self.history = ()  # what decide() keeps (lazily pruned)
        self.all_restarts = []  # the model's complete log
        self.now = 0.0
        self.dead = False

    @rule(dt=st.floats(0, 12))
    def advance(self, dt):
        self.now += dt

    @precondition(lambda self: not self.dead and self.running)
    @rule(data=st.data(), how=st.sampled_from(list(EXITS)))
    def child_exits(self, data, how):
        cid = data.draw(st.sampled_from(sorted(self.running)))
        decision, self.history, _ = decide(
            flags=self.flags,
            order=list(self.order),
            specs=self.specs,
            child_id=cid,
            exit_info=EXITS[how],
            history=self.history,
            attempts=0,
            now=self.now,
        )
        self.running.discard(cid)
        restart = self.specs[cid].restart.value
        if not model_wants(restart, how):
            assert decision == Stay(child_id=cid, delete=restart == "temporary")
            if restart == "temporary":
                self.order.remove(cid)
            return
        window = [t for t in self.all_restarts if self.now - t <= self.flags.period]
        if len(window) + 1 > self.flags.intensity:
            assert isinstance(decision, Escalate)
            assert decision.restarts == len(window) + 1
            self.dead = True
            return
        self.all_restarts.append(self.now)
        assert isinstance(decision, RestartChildren)
        assert decision.delay == 0
        self.check_plan(cid, decision)

    def check_plan(self, cid, decision):
        pos = self.order.index(cid)
        affected = {
            supervisor.Strategy.ONE_FOR_ONE: [cid],
            supervisor.Strategy.ONE_FOR_ALL: list(self.order),
            supervisor.Strategy.REST_FOR_ONE: self.order[pos:],
        }[self.flags.strategy]
        others = [c for c in affected if c != cid]
        deleted = [c for c in others if self.specs[c].restart.value == "temporary"]
        assert decision.stop == tuple(reversed(others))  # reverse start order
        assert decision.delete == tuple(deleted)
        assert decision.start == tuple(c for c in affected if c not in deleted)
        for c in deleted:
            self.order.remove(c)
            self.running.discard(c)
        self.running.update(decision.start)

    @invariant()
    def history_is_the_pruned_window(self):
        if getattr(self, "dead", True):
            return
        # decide() prunes lazily (only when it decides), so its history may hold stale
        # entries, but never fewer than the true window and never anything in the future.
        window = [t for t in self.all_restarts if self.now - t <= self.flags.period]
        assert set(window) <= set(self.history)
        assert all(t <= self.now for t in self.history)


TestRestartPolicy = RestartPolicyMachine.TestCase


@given(
    attempt=st.integers(1, 30),
    rand=st.floats(0, 1, exclude_max=True),
    initial=st.floats(0.01, 5),
    factor=st.floats(1, 4),
    jitter=st.floats(0, 0.99),
    cap=st.floats(5, 100),
)
def test_backoff_delay_formula(attempt, rand, initial, factor, jitter, cap):
    backoff = supervisor.Backoff(initial_delay=initial, max_delay=cap, factor=factor, jitter=jitter)
    base = min(initial * factor ** (attempt - 1), cap)
    delay = backoff_delay(backoff, attempt, rand)
    assert base * (1 - jitter) - 1e-9 <= delay <= base * (1 + jitter) + 1e-9
    assert math.isclose(backoff_delay(backoff, attempt, 0.5), base)


@given(ran_for=st.floats(0, 20), attempts=st.integers(0, 5), threshold=st.floats(1, 10))
def test_service_attempts_reset_only_after_stable_threshold(ran_for, attempts, threshold):
    spec = supervisor.child(
        "s",
        "x:w",
        backoff=supervisor.Backoff(jitter=0, max_attempts=0),
        stable_threshold=threshold,
    )
    exit_info = ExitInfo(normal=False, error_kind=ErrorKind.INTERNAL, ran_for=ran_for)
    decision, history, attempt = decide(
        flags=Flags(intensity=0),  # services do not count toward intensity
        order=["s"],
        specs={"s": spec},
        child_id="s",
        exit_info=exit_info,
        history=(),
        attempts=attempts,
        now=100.0,
    )
    assert isinstance(decision, RestartChildren)
    assert history == ()
    assert attempt == (1 if ran_for >= threshold else attempts + 1)
    assert decision.delay == backoff_delay(spec.backoff, attempt, 0.5)


@given(retryable=st.sampled_from([True, False, None]), max_attempts=st.integers(0, 3))
def test_service_terminal_errors_and_max_attempts(retryable, max_attempts):
    spec = supervisor.child(
        "s", "x:w", backoff=supervisor.Backoff(jitter=0, max_attempts=max_attempts)
    )
    exit_info = ExitInfo(normal=False, error_kind=ErrorKind.INVALID, retryable=retryable)
    decision, _, _ = decide(
        flags=Flags(),
        order=["s"],
        specs={"s": spec},
        child_id="s",
        exit_info=exit_info,
        history=(),
        attempts=max_attempts,  # the budget, if any, is already used up
        now=0.0,
    )
    if retryable is False or max_attempts:
        assert isinstance(decision, GiveUp)
    else:
        assert isinstance(decision, RestartChildren)


@given(failed=st.sampled_from(["w#1", "w#2", "w#3"]), service=st.booleans())
def test_decisions_name_children_by_the_id_given_not_by_their_spec_id(failed, service):
    # A dynamic supervisor's children share the template's spec id ("w"); the supervisor
    # names each by its instance, and every decision must name that same instance.
    backoff = supervisor.Backoff(jitter=0) if service else None
    template = supervisor.child("w", "x:w", backoff=backoff)
    keys = ["w#1", "w#2", "w#3"]
    decision, _, _ = decide(
        flags=Flags(intensity=5),
        order=keys,
        specs=dict.fromkeys(keys, template),
        child_id=failed,
        exit_info=EXITS["error"],
        history=(),
        attempts=0,
        now=0.0,
    )
    assert isinstance(decision, RestartChildren)
    assert decision.start == (failed,) and decision.stop == ()
