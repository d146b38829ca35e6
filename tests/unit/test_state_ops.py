"""The state update op engine (roost.queues._state_ops): paths, every op, errors, atomicity."""

import copy
import datetime as dt
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roost
from roost.queues._state_ops import MAX_PATH_DEPTH, apply_ops, parse_ops, parse_path

INVALID = roost.ErrorKind.INVALID


def run(value, *ops):
    """Apply ``ops`` and check the input was not mutated (copy-on-write)."""
    before = copy.deepcopy(value)
    out = apply_ops(value, parse_ops(list(ops)))
    assert value == before
    return out


def invalid(value, *ops, match=None):
    before = copy.deepcopy(value)
    with pytest.raises(roost.Error, match=match) as info:
        apply_ops(value, parse_ops(list(ops)))
    assert info.value.kind is INVALID
    assert value == before
    return info.value


# -- paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "keys"),
    [
        (None, ()),
        ("", ()),
        ([], ()),
        ((), ()),
        ("status", ("status",)),
        ("steps/payment", ("steps", "payment")),
        (["steps", "payment"], ("steps", "payment")),
        (("steps", "payment", "at"), ("steps", "payment", "at")),
        # A dot is not a separator (as in iii): one key with a dot in it.
        ("steps.payment", ("steps.payment",)),
        (["steps.payment"], ("steps.payment",)),
        ("a.b/c", ("a.b", "c")),
        # The list form takes any string key, even one with a slash or an empty one.
        (["a/b", ""], ("a/b", "")),
    ],
)
def test_path_forms(path, keys):
    assert parse_path(path) == keys


@pytest.mark.parametrize(
    ("path", "match"),
    [
        (3, "must be a list of string keys"),
        ({"a": 1}, "must be a list of string keys"),
        (["a", 1], "has a key of type int"),
        ("a//b", "empty segment"),
        ("/a", "empty segment"),
        ("a/", "empty segment"),
        (["k"] * (MAX_PATH_DEPTH + 1), "at most 32"),
    ],
)
def test_bad_paths_are_invalid(path, match):
    with pytest.raises(roost.Error, match=match) as info:
        parse_path(path)
    assert info.value.kind is INVALID


def test_dotted_key_is_one_top_level_key():
    out = run({}, {"type": "set", "path": "attempts.payment", "value": 1})
    assert out == {"attempts.payment": 1}
    out = run({}, {"type": "set", "path": "attempts/payment", "value": 1})
    assert out == {"attempts": {"payment": 1}}


# -- set -------------------------------------------------------------------------------------


def test_set():
    assert run({"a": 1}, {"type": "set", "path": "a", "value": 2}) == {"a": 2}
    assert run({"a": 1}, {"type": "set", "path": "b", "value": None}) == {"a": 1, "b": None}
    assert run({}, {"type": "set", "path": ["x", "y", "z"], "value": [1]}) == {
        "x": {"y": {"z": [1]}}
    }
    # An empty path (or none) replaces the whole value, with anything.
    assert run({"a": 1}, {"type": "set", "value": 5}) == 5
    assert run({"a": 1}, {"type": "set", "path": [], "value": {"b": 2}}) == {"b": 2}
    # Siblings along the path are kept.
    value = {"steps": {"validate": {"status": "done"}}, "n": 1}
    out = run(value, {"type": "set", "path": "steps/payment/status", "value": "running"})
    assert out == {
        "steps": {"validate": {"status": "done"}, "payment": {"status": "running"}},
        "n": 1,
    }


def test_set_through_a_non_dict_is_invalid():
    err = invalid({"a": 5}, {"type": "set", "path": "a/b", "value": 1}, match="not a dict")
    assert "['a']" in err.message and "op 0 (set)" in err.message
    invalid([1, 2], {"type": "set", "path": "a", "value": 1}, match="the root is a list")
    invalid({"a": "text"}, {"type": "set", "path": "a/b/c", "value": 1}, match="is a str")


def test_set_needs_a_value():
    invalid({}, {"type": "set", "path": "a"}, match="needs a 'value'")


# -- merge -----------------------------------------------------------------------------------


def test_merge():
    # No path: a shallow merge at the root.
    assert run({"a": 1, "b": {"x": 1}}, {"type": "merge", "value": {"b": {"y": 2}, "c": 3}}) == {
        "a": 1,
        "b": {"y": 2},
        "c": 3,
    }
    # A nested path; missing dicts on the way and at the target are created.
    out = run({"s": {"p": {"k": 1}}}, {"type": "merge", "path": "s/p", "value": {"j": 2}})
    assert out == {"s": {"p": {"k": 1, "j": 2}}}
    out = run({}, {"type": "merge", "path": ["s", "p"], "value": {"j": 2}})
    assert out == {"s": {"p": {"j": 2}}}


def test_merge_errors():
    invalid({"a": 1}, {"type": "merge", "path": "a", "value": {"x": 1}}, match="merge into a int")
    invalid({}, {"type": "merge", "value": [1]}, match="must be a dict")
    invalid({}, {"type": "merge", "path": "a"}, match="needs a 'value'")
    invalid(7, {"type": "merge", "value": {"x": 1}}, match="merge into a int")


# -- increment / decrement -------------------------------------------------------------------


def test_increment_and_decrement():
    assert run({}, {"type": "increment", "path": "n"}) == {"n": 1}  # by defaults to 1
    assert run({"n": 4}, {"type": "increment", "path": "n", "by": 3}) == {"n": 7}
    assert run({}, {"type": "decrement", "path": "n"}) == {"n": -1}
    assert run({"n": 4}, {"type": "decrement", "path": ["n"], "by": 10}) == {"n": -6}
    assert run({"n": 1}, {"type": "increment", "path": "n", "by": 0.5}) == {"n": 1.5}
    assert run(
        {},
        {"type": "increment", "path": ["attempts", "payment"]},
        {"type": "increment", "path": ["attempts", "payment"]},
    ) == {"attempts": {"payment": 2}}
    assert run(10, {"type": "increment", "by": 2**70}) == 10 + 2**70  # the root number
    out = run({"n": 1}, {"type": "increment", "path": "n"})
    assert type(out["n"]) is int


@pytest.mark.parametrize("target", ["1", True, None, [1], {"a": 1}])
def test_increment_of_a_non_number_is_invalid(target):
    err = invalid({"n": target}, {"type": "increment", "path": "n"}, match="cannot increment")
    assert "int or a float" in err.message
    invalid({"n": target}, {"type": "decrement", "path": "n"}, match="cannot decrement")


@pytest.mark.parametrize("by", ["1", True, None, math.nan, math.inf, [1]])
def test_bad_by_is_invalid(by):
    invalid({}, {"type": "increment", "path": "n", "by": by}, match="'by' must be")


# -- append ----------------------------------------------------------------------------------


def test_append():
    assert run({}, {"type": "append", "path": "log", "value": "a"}) == {"log": ["a"]}
    assert run({"log": [1]}, {"type": "append", "path": "log", "value": [2]}) == {"log": [1, [2]]}
    assert run({"s": "ab"}, {"type": "append", "path": "s", "value": "cd"}) == {"s": "abcd"}
    assert run({}, {"type": "append", "path": "a/b", "value": 1}) == {"a": {"b": [1]}}
    assert run([1], {"type": "append", "value": 2}) == [1, 2]  # the root list


def test_append_errors():
    invalid({"s": "ab"}, {"type": "append", "path": "s", "value": 1}, match="must be a string")
    invalid({"d": {}}, {"type": "append", "path": "d", "value": 1}, match="append to a dict")
    invalid({"n": 1}, {"type": "append", "path": "n", "value": 1}, match="append to a int")
    invalid({}, {"type": "append", "value": 1}, match="append to a dict")  # the root is a dict


# -- remove ----------------------------------------------------------------------------------


def test_remove():
    assert run({"a": 1, "b": 2}, {"type": "remove", "path": "a"}) == {"b": 2}
    assert run({"a": {"b": 1, "c": 2}}, {"type": "remove", "path": "a/b"}) == {"a": {"c": 2}}
    # A missing key, or a missing dict on the way, is a no-op.
    assert run({"a": 1}, {"type": "remove", "path": "zz"}) == {"a": 1}
    assert run({"a": 1}, {"type": "remove", "path": ["x", "y", "z"]}) == {"a": 1}
    assert run({"a": {}}, {"type": "remove", "path": ["a", "y"]}) == {"a": {}}


def test_remove_errors():
    invalid({"a": 5}, {"type": "remove", "path": "a/b"}, match="not a dict")
    invalid({"a": 1}, {"type": "remove"}, match="non-empty path")
    invalid({"a": 1}, {"type": "remove", "path": ""}, match=r"roost\.state\.delete")


# -- op lists --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "match"),
    [
        ({"type": "set", "path": "a", "value": 1}, "must be a list of op dicts"),
        ("set", "must be a list of op dicts"),
        ([["set", "a", 1]], "op 0 must be a dict"),
        ([{"path": "a", "value": 1}], "op 0 has type None; the op types are set, merge"),
        ([{"type": "SET", "path": "a", "value": 1}], "op 0 has type 'SET'"),
        ([{"type": ["set"], "value": 1}], "op 0 has type"),
        ([{"type": "increment", "path": "n"}, {"type": "push", "value": 1}], "op 1 has type"),
        ([{"type": "set", "path": "a", "valeu": 1}], r"unknown field\(s\) valeu; a set op"),
        ([{"type": "remove", "path": "a", "value": 1}], "unknown field"),
        ([{"type": "increment", "path": "a", "value": 1}], "takes path, by"),
        ([{"type": "set", "path": 3, "value": 1}], "op 0 .set. path must be"),
    ],
)
def test_malformed_ops_are_invalid(ops, match):
    with pytest.raises(roost.Error, match=match) as info:
        parse_ops(ops)
    assert info.value.kind is INVALID


def test_empty_op_list_changes_nothing():
    assert run({"a": 1}) == {"a": 1}
    assert parse_ops(()) == []


def test_a_failing_op_in_the_middle_changes_nothing():
    value = {"count": 1, "status": "new", "steps": {"validate": {"status": "done"}}}
    ops = [
        {"type": "increment", "path": "count"},
        {"type": "set", "path": "steps/validate/status", "value": "redo"},
        {"type": "remove", "path": "status"},
        {"type": "increment", "path": "steps"},  # a dict: fails
        {"type": "set", "path": "after", "value": 1},
    ]
    err = invalid(value, *ops, match="op 3 .increment.")
    assert err.details["op_index"] == 3
    # The same ops without the bad one apply in order.
    assert run(value, *ops[:3], ops[4]) == {
        "count": 2,
        "steps": {"validate": {"status": "redo"}},
        "after": 1,
    }


def test_values_given_in_ops_are_never_mutated():
    given_value = {"inner": {"k": 1}}
    out = run(
        {},
        {"type": "set", "path": "x", "value": given_value},
        {"type": "set", "path": "x/inner/j", "value": 2},
        {"type": "append", "path": "x/list", "value": 0},
    )
    assert out == {"x": {"inner": {"k": 1, "j": 2}, "list": [0]}}
    assert given_value == {"inner": {"k": 1}}


def test_pipeline_step_tracking():
    """The iii example's trackStep, with real nested paths (iii's dotted ones are flat keys)."""
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    order = {"order_id": "o-1", "status": "created", "current_step": "created", "steps": {}}
    out = run(
        order,
        {"type": "set", "path": "current_step", "value": "payment"},
        {"type": "set", "path": "status", "value": "running"},
        {"type": "set", "path": ["steps", "payment"], "value": {"status": "running", "at": at}},
        {"type": "increment", "path": ["attempts", "payment"]},
    )
    assert out["steps"]["payment"]["at"] == at
    assert out["attempts"] == {"payment": 1}
    assert out["current_step"] == "payment" and out["status"] == "running"


# -- against a reference model ---------------------------------------------------------------


class ModelError(Exception):
    pass


MISSING = object()


def model_leaf(op, old):
    kind = op["type"]
    if kind == "set":
        return copy.deepcopy(op["value"])
    if kind == "merge":
        if old is MISSING:
            return copy.deepcopy(op["value"])
        if not isinstance(old, dict):
            raise ModelError
        old.update(copy.deepcopy(op["value"]))
        return old
    if kind in ("increment", "decrement"):
        by = op.get("by", 1) * (1 if kind == "increment" else -1)
        if old is MISSING:
            return by
        if isinstance(old, bool) or not isinstance(old, int | float):
            raise ModelError
        return old + by
    assert kind == "append"
    if old is MISSING:
        return [copy.deepcopy(op["value"])]
    if isinstance(old, list):
        old.append(copy.deepcopy(op["value"]))
        return old
    if isinstance(old, str) and isinstance(op["value"], str):
        return old + op["value"]
    raise ModelError


def model_apply(value, ops):
    """A naive, mutating implementation on a deep copy: the engine's spec, written plainly."""
    value = copy.deepcopy(value)
    for op in ops:
        path = op.get("path")
        keys = [] if path in (None, "") else path.split("/") if isinstance(path, str) else path
        if op["type"] == "remove":
            node = value
            for name in keys[:-1]:
                if not isinstance(node, dict):
                    raise ModelError
                if name not in node:
                    break
                node = node[name]
            else:
                if not isinstance(node, dict):
                    raise ModelError
                node.pop(keys[-1], None)
            continue
        if not keys:
            value = model_leaf(op, value)
            continue
        node = value
        for name in keys[:-1]:
            if not isinstance(node, dict):
                raise ModelError
            node = node.setdefault(name, {})
        if not isinstance(node, dict):
            raise ModelError
        node[keys[-1]] = model_leaf(op, node.get(keys[-1], MISSING))
    return value


KEYS = st.sampled_from(["a", "b", "c"])
leaves = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["", "x", "yz"])
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def paths(draw, min_size=0):
    keys = draw(st.lists(KEYS, min_size=min_size, max_size=3))
    form = draw(st.sampled_from(["list", "tuple", "str"]))
    if form == "str":
        return "/".join(keys) if keys else draw(st.sampled_from([None, ""]))
    return keys if form == "list" else tuple(keys)


@st.composite
def ops(draw):
    kind = draw(st.sampled_from(["set", "merge", "increment", "decrement", "append", "remove"]))
    op = {"type": kind}
    path = draw(paths(min_size=1 if kind == "remove" else 0))
    if path is not None or draw(st.booleans()):
        op["path"] = path
    if kind in ("set", "append"):
        op["value"] = draw(values)
    elif kind == "merge":
        op["value"] = draw(st.dictionaries(KEYS, values, max_size=3))
    elif kind != "remove" and draw(st.booleans()):
        op["by"] = draw(st.integers(-3, 3) | st.floats(-4, 4, allow_nan=False).map(float))
    return op


@given(value=values | st.dictionaries(KEYS, values, max_size=3), op_list=st.lists(ops()))
def test_engine_matches_the_reference_model(value, op_list):
    before = copy.deepcopy(value)
    given_ops = copy.deepcopy(op_list)
    try:
        expected = ("ok", model_apply(value, op_list))
    except ModelError:
        expected = ("error", INVALID)
    try:
        got = ("ok", apply_ops(value, parse_ops(op_list)))
    except roost.Error as err:
        got = ("error", err.kind)
    assert got == expected
    # Copy-on-write: neither the stored value nor the ops' values were touched, so a
    # failed update leaves the caller (and the store) with the original.
    assert value == before
    assert op_list == given_ops
