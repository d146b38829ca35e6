"""The envelope check in the backend-neutral core: the driver and the sealed values.

Any host's driver checks a secured run's envelope before the body runs, at every
activation: a failed check records a ``Fail`` with PermissionDenied and runs none of the
body; replaying, it passes over what the body recorded when the envelope still verified.
"""

import pytest
from workflow_sim import T0, SimPorts

import roost
from roost import Pid
from roost._security import (
    SECURITY_KEY,
    Actor,
    KeyRing,
    Scope,
    claim,
    envelope_payload,
    make_ticket,
    seal,
    ticket_error,
)
from roost.workflow._driver import Driver, Status
from roost.workflow._history import Fail, Started, StartTimer
from roost.workflow._trust import Trust, activity_context, activity_id, check_envelope

RING = KeyRing.build({"k1": b"a" * 32})
POLICIES = frozenset({"orders.write"})
body_ran: list[int] = []


class Checking(SimPorts):
    def __init__(self, trust):
        super().__init__(Pid("local", "t:workflows", "wf-1"))
        self._trust = trust

    def trust(self):
        return self._trust


async def sleeper():
    body_ran.append(1)
    await roost.sleep(10)


def started(context, workflow_id="wf-1"):
    return Started(
        workflow_id=workflow_id, run_id="r1", workflow_type="t:sleeper", args=[], seed=1,
        context=context,
    )  # fmt: skip


def sealed_for(addressee, ring=RING):
    sec = claim(Actor("user:1"), Scope("orders.write"))
    return {SECURITY_KEY: seal(sec, addressee, ring)}


def test_a_verified_envelope_runs_the_body():
    body_ran.clear()
    driver = Driver(sleeper, Checking(Trust(RING, POLICIES)))
    commands = driver.activate(T0, [started(sealed_for("wf-1"))])
    assert [type(c) for c in commands] == [StartTimer]
    assert body_ran == [1]


@pytest.mark.parametrize(
    ("context", "trust", "why"),
    [
        (sealed_for("wf-2"), Trust(RING, POLICIES), "bound to 'wf-2'"),
        (sealed_for("wf-1"), Trust(KeyRing.build({"k2": b"b" * 32}), POLICIES), "'k1'"),
        (sealed_for("wf-1"), Trust(None, POLICIES), "no signing keys"),
        (sealed_for("wf-1"), Trust(RING, frozenset()), "orders.write"),
        ({SECURITY_KEY: {"actor": None, "policies": ["x"]}}, Trust(RING, POLICIES), "malformed"),
    ],
)
def test_a_failed_check_fails_the_run_without_running_the_body(context, trust, why):
    body_ran.clear()
    driver = Driver(sleeper, Checking(trust))
    commands = driver.activate(T0, [started(context)])
    assert [type(c) for c in commands] == [Fail]
    assert commands[0].error.kind == roost.ErrorKind.PERMISSION_DENIED
    assert why in commands[0].error.message
    assert driver.status == Status.FAILED
    assert body_ran == []


def test_replaying_a_refused_run_passes_over_its_recorded_commands():
    body_ran.clear()
    recorded = [StartTimer(seq=1, seconds=10.0)]
    driver = Driver(sleeper, Checking(Trust(RING, frozenset())))
    assert driver.activate(T0, [started(sealed_for("wf-1"))], expected=recorded) == []
    assert body_ran == []
    live = driver.activate(T0, [])
    assert [type(c) for c in live] == [Fail] and live[0].seq == 2


def test_a_tampered_signature_does_not_verify():
    context = sealed_for("wf-1")
    context[SECURITY_KEY]["actor"] = {"id": "user:admin", "meta": {}}
    error = check_envelope(context, "wf-1", RING, POLICIES)
    assert error is not None and "bad signature" in error.message


def test_an_activity_gets_its_own_envelope_bound_to_its_id():
    addressee = activity_id("wf-1", "r1", 3)
    trust = Trust(RING, POLICIES)
    context, refused = activity_context(sealed_for("wf-1"), "wf-1", addressee, trust)
    assert refused is None
    assert context[SECURITY_KEY]["addressee"] == addressee
    _, refused = activity_context(sealed_for("wf-9"), "wf-1", addressee, trust)
    assert refused is not None and refused.kind == roost.ErrorKind.PERMISSION_DENIED


def test_tickets_are_bound_to_workflow_and_topic():
    ticket = make_ticket(RING, "wf-1", "approve", "operator:ann")
    assert ticket_error(ticket, "wf-1", "approve", RING) is None
    assert ticket_error(ticket, "wf-2", "approve", RING) is not None
    assert ticket_error(ticket, "wf-1", "reject", RING) is not None
    assert ticket_error({**ticket, "actor": "operator:eve"}, "wf-1", "approve", RING) is not None
    assert ticket_error(None, "wf-1", "approve", RING).kind == roost.ErrorKind.PERMISSION_DENIED


def test_key_rings_parse_and_refuse_bad_input():
    ring = KeyRing.parse(f"k2:{'bb' * 32}, k1:{'aa' * 32}", source="test")
    assert ring.active == "k2" and set(ring.keys) == {"k1", "k2"}
    for bad in ("k1", "k1:zz", "", "k1:00", f"k1:{'aa' * 32},k1:{'bb' * 32}"):
        with pytest.raises(roost.Error) as err:
            KeyRing.parse(bad, source="test")
        assert err.value.kind == roost.ErrorKind.INVALID
    with pytest.raises(roost.Error):
        KeyRing.build({"k1": b"a" * 32}, "k9")


def test_actors_and_scopes_check_their_input():
    with pytest.raises(roost.Error):
        Actor("")
    with pytest.raises(roost.Error):
        Actor("u", meta={"x": object()})
    for bad in ({1: "x"}, {"x": float("nan")}, {"x": [{2: "y"}]}, {"x": float("inf")}):
        with pytest.raises(roost.Error) as err:
            Actor("u", meta=bad)
        assert err.value.kind == roost.ErrorKind.INVALID
    with pytest.raises(roost.Error):
        Scope("")
    assert list(Scope("a", "b", "a")) == ["a", "b"]


def test_an_actor_without_a_scope_is_refused_when_sealed_and_when_checked():
    actor = Actor("user:1").as_dict()
    with pytest.raises(roost.Error) as err:
        seal({"actor": actor, "policies": []}, "wf-1", RING)
    assert err.value.kind == roost.ErrorKind.INVALID
    assert "an actor needs a scope" in err.value.message
    key_id, sig = RING.sign(envelope_payload(actor, [], "wf-1"))
    signed = {"actor": actor, "policies": [], "addressee": "wf-1", "key_id": key_id, "sig": sig}
    error = check_envelope({SECURITY_KEY: signed}, "wf-1", RING, POLICIES)
    assert error is not None and "inconsistent" in error.message
