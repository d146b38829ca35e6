"""A run's fields change only through ``Run``'s own methods (``workflow/_local/_run.py``).

The hot fields are plain slots read directly (see ``_run``'s docstring), so Python does not
stop an assignment to them: this test does. It parses ``workflow/_local`` and the tests with
``ast`` and fails on code outside ``_run.py`` that

- assigns, augments or deletes a field of a run (``run.record = ...``, ``run.seq += 1``,
  ``run.pending[0] = ...``, ``setattr(run, ...)``),
- changes a field in place (``run.pending.append(...)``, ``run.watchers.add(...)``), or
- touches a private field (``run._inbox_seq``).

What counts as a run: a name in ``RUN_NAMES``; a name annotated ``Run`` (a parameter or an
annotated assignment) anywhere in the same module; an attribute named ``run``
(``step.run``); an item of something named ``runs`` (``manager.runs["w"]``). Its limits: it
does not follow aliases (``r = run``), runs reached through a call or a container
(``table.get(i).record = ...``), or unrelated names; a run under one of those names is not
checked, and an unrelated object under one of them with a field's name is flagged (rename
it).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

from roost.workflow._local._run import Run

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "src" / "roost" / "workflow" / "_local"
TESTS = ROOT / "tests"

# Names that hold a run wherever the host's code uses them.
RUN_NAMES = frozenset(
    {"run", "old", "new", "child", "target", "current", "existing", "first", "oldest", "busy"}
)
PRIVATE = frozenset(f.name for f in attrs.fields(Run) if f.name.startswith("_"))
FIELDS = frozenset(f.name.lstrip("_") for f in attrs.fields(Run)) | PRIVATE
# Methods of lists, sets and dicts that change them in place.
MUTATORS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "pop",
        "remove",
        "clear",
        "sort",
        "reverse",
        "add",
        "discard",
        "update",
        "setdefault",
        "popitem",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
    }
)
_RUN_TYPE = re.compile(r"\bRun\b")


def _annotated_runs(tree: ast.AST) -> set[str]:
    """Names annotated ``Run`` (``Run | None``, ``"Run"``) anywhere in the module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if _RUN_TYPE.search(ast.unparse(node.annotation)):
                names.add(node.arg)
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and _RUN_TYPE.search(ast.unparse(node.annotation))
        ):
            names.add(node.target.id)
    return names


def _is_run(node: ast.expr, runs: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in runs
    if isinstance(node, ast.Attribute):
        return node.attr == "run"
    if isinstance(node, ast.Subscript):
        holder = node.value
        return (isinstance(holder, ast.Name) and holder.id == "runs") or (
            isinstance(holder, ast.Attribute) and holder.attr == "runs"
        )
    return False


def _run_field(node: ast.expr, runs: set[str]) -> str | None:
    """The field ``node`` names, if it is ``<run>.<field>``."""
    if isinstance(node, ast.Attribute) and node.attr in FIELDS and _is_run(node.value, runs):
        return node.attr
    return None


def _targets(node: ast.expr) -> Iterator[ast.expr]:
    """Each assigned expression in a target (tuples unpacked, items and slices too)."""
    if isinstance(node, ast.Tuple | ast.List):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    elif isinstance(node, ast.Subscript):  # run.pending[0] = ...: the field changes
        yield node.value
    else:
        yield node


def violations(source: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` changes a run's field, or reads a private one, outside ``Run``."""
    tree = ast.parse(source, filename)
    runs = set(RUN_NAMES) | _annotated_runs(tree)
    found: list[tuple[int, str]] = []

    def flag(node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        found.append((line, f"{filename}:{line}: {what}"))

    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for expr in _targets(target):
                field = _run_field(expr, runs)
                if field is not None:
                    flag(node, f"assigns the run field {field!r}")
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in MUTATORS
                and (field := _run_field(func.value, runs)) is not None
            ):
                flag(node, f"changes the run field {field!r} in place ({func.attr})")
            name = ast.unparse(func)
            if (
                name in {"setattr", "object.__setattr__"}
                and node.args
                and _is_run(node.args[0], runs)
            ):
                flag(node, f"sets a run's attribute with {name}")
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE and _is_run(node.value, runs):
            flag(node, f"touches the private run field {node.attr!r}")
    return [what for _, what in sorted(found, key=lambda f: f[0])]


def _checked_files() -> list[Path]:
    own = LOCAL / "_run.py"
    files = [p for p in sorted(LOCAL.rglob("*.py")) if p != own]
    return files + sorted(TESTS.rglob("*.py"))


def test_nothing_outside_run_changes_a_runs_fields():
    found: list[str] = []
    for path in _checked_files():
        found += violations(path.read_text(), str(path.relative_to(ROOT)))
    assert found == [], "change a run only through Run's methods (_run.py):\n" + "\n".join(found)


def test_the_check_sees_every_kind_of_change():
    source = """
def f(run, step, manager, r: Run | None, other):
    run.record = 1
    run.next_index += 1
    step.run.pending = []
    manager.runs["w"].phase = None
    r.driver = None
    new.watchers, new.links = (), ()
    del child.pending[0]
    target.pending[0] = None
    run.pending.append(1)
    current.watchers.add(1)
    setattr(existing, "record", 1)
    x = run._inbox_seq
    other.record = 1  # not a run's name: not checked
    self.record = 1  # an object's own field
    run.unknown = 1  # not a field of Run
"""
    assert [line.split(": ", 1)[1] for line in violations(source)] == [
        "assigns the run field 'record'",
        "assigns the run field 'next_index'",
        "assigns the run field 'pending'",
        "assigns the run field 'phase'",
        "assigns the run field 'driver'",
        "assigns the run field 'watchers'",
        "assigns the run field 'links'",
        "assigns the run field 'pending'",
        "assigns the run field 'pending'",
        "changes the run field 'pending' in place (append)",
        "changes the run field 'watchers' in place (add)",
        "sets a run's attribute with setattr",
        "touches the private run field '_inbox_seq'",
    ]


def test_the_fields_checked_are_runs_own():
    assert {"record", "pending", "phase", "driver", "_inbox_seq", "inbox_seq"} <= FIELDS
    assert "record" not in PRIVATE and "_inbox_seq" in PRIVATE
