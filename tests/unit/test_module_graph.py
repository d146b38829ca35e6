"""Modules depend on each other in one direction, and the pure cores reach no trio.

Every module under src/roost is parsed with ``ast``: every import counts, the ones under
``if TYPE_CHECKING:`` and the ones inside functions too (an import moved into a function
to dodge a cycle is still that cycle). A ``from package import name`` of a lazy package
(PEP 562, see roost/_lazy.py) is an edge to the module its ``_NAMES`` table names.
"""

import ast
import itertools
import textwrap
from collections import deque
from pathlib import Path

import pytest

import roost

SRC = Path(roost.__file__).parent.parent


def _name_of(path):
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_name_of(path): path for path in sorted((SRC / "roost").rglob("*.py"))}
PACKAGES = {_name_of(path) for path in (SRC / "roost").rglob("__init__.py")}


def _within(module, package):
    return module == package or module.startswith(f"{package}.")


# The backend-neutral workflow core (DESIGN §4): every module of roost.workflow outside the
# local host, found from the package. It reaches neither trio nor lmdb.
WORKFLOW_CORE = tuple(
    m for m in MODULES if _within(m, "roost.workflow") and not _within(m, "roost.workflow._local")
)
# The other cores that must run without trio (issue 15, item 7).
PURE_CORES = (
    *WORKFLOW_CORE,
    "roost.workflow._local._phases",
    "roost.mailbox._mailbox",
    "roost.mailbox._channel",
    "roost.supervisor._policy",
    "roost.storage._codec",
)


def _lazy_table(package):
    """A lazy package's ``_NAMES`` (public name -> defining module), or {}."""
    for node in ast.parse(MODULES[package].read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_NAMES" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    return {}


LAZY = {package: _lazy_table(package) for package in PACKAGES}


def _is_type_checking(test):
    return "TYPE_CHECKING" in ast.unparse(test)


def _imports(module, source=None):
    """(imported module, how, line): how is "top", "local" (in a function) or "type"."""
    found = []

    def target(base, name):
        sub = f"{base}.{name}"
        if sub in MODULES:
            return sub
        return LAZY.get(base, {}).get(name, base)

    def walk(nodes, how):
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                walk(node.body, "type")
                walk(node.orelse, how)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(node.body, "local" if how == "top" else how)
            elif isinstance(node, ast.Import):
                found.extend((alias.name, how, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = module.split(".") if module in PACKAGES else module.split(".")[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join([*here, *([node.module] if node.module else [])])
                found.extend((target(base, a.name), how, node.lineno) for a in node.names)
            else:
                walk(ast.iter_child_nodes(node), how)

    walk(ast.parse(MODULES[module].read_text() if source is None else source).body, "top")
    return found


IMPORTS = {module: _imports(module) for module in MODULES}


# Imports that would close a cycle and stay, each with the reason; empty, and it only shrinks.
REMAINING: set[tuple[str, str]] = set()


def _graph(kinds, within=""):
    graph = {m: {} for m in MODULES if m.startswith(within)}
    for module, edges in graph.items():
        for imported, how, line in IMPORTS[module]:
            if (module, imported) in REMAINING:
                continue
            if how in kinds and imported in graph and imported != module:
                edges.setdefault(imported, f"{module}:{line} ({how}) -> {imported}")
    return graph


def _cycles(graph):
    """Each strongly connected component of more than one module, as one concrete cycle."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):  # Tarjan; the graph has ~150 nodes, so recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append([f"{len(component)} modules: {sorted(component)}"])
                found[-1].extend(_one_cycle(graph, component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _one_cycle(graph, component):
    """A shortest cycle through the component's first module, with each edge's import line."""
    start = min(component)
    came_from = {start: None}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        for w in sorted(graph[v]):
            if w == start:
                path, at = [], v
                while at is not None:
                    path.append(at)
                    at = came_from[at]
                path.reverse()
                hops = [*path, start]
                return [graph[a][b] for a, b in itertools.pairwise(hops)]
            if w in component and w not in came_from:
                came_from[w] = v
                todo.append(w)
    raise AssertionError(component)


ALL = ("top", "local", "type")


def _show(cycles):
    return "\n".join("cycle:\n  " + "\n  ".join(cycle) for cycle in cycles)


def test_no_cycle_among_the_workflow_modules():
    cycles = _cycles(_graph(ALL, within="roost.workflow."))
    assert cycles == [], _show(cycles)


def test_no_cycle_among_the_actors_modules():
    cycles = _cycles(_graph(ALL, within="roost.actors."))
    assert cycles == [], _show(cycles)


def test_no_cycle_anywhere_in_roost():
    cycles = _cycles(_graph(ALL))
    assert cycles == [], _show(cycles)


def _uses(module, roots):
    """Whether ``module`` imports one of the top-level packages ``roots`` (not for types)."""
    return any(
        imported.split(".")[0] in roots and how != "type" for imported, how, _ in IMPORTS[module]
    )


def _uses_trio(module):
    return _uses(module, {"trio"})


def _runtime_closure(start):
    """What importing ``start`` runs: its runtime imports and every parent package's."""
    graph = _graph(("top", "local"))
    came_from, todo = {start: None}, deque([start])
    while todo:
        module = todo.popleft()
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        for nxt in [*graph[module], *parents]:
            if nxt not in came_from:
                came_from[nxt] = module
                todo.append(nxt)
    return came_from


@pytest.mark.parametrize("core", PURE_CORES)
def test_the_pure_cores_reach_no_trio_using_module(core):
    forbidden = {"trio", "lmdb"} if core in WORKFLOW_CORE else {"trio"}
    reached = _runtime_closure(core)
    assert "roost.workflow._history" in _runtime_closure("roost.workflow._driver")
    for module in reached:
        if _uses(module, forbidden):
            path, at = [], module
            while at is not None:
                path.append(at)
                at = reached[at]
            pytest.fail(f"{core} reaches {' or '.join(sorted(forbidden))}: {' <- '.join(path)}")


def test_the_workflow_core_is_found_from_the_package():
    # The parser's view of the core is the package's: a module added to it is checked.
    assert {"roost.workflow", "roost.workflow._driver", "roost.workflow._replayer"} <= set(
        WORKFLOW_CORE
    )
    assert not any(_within(m, "roost.workflow._local") for m in WORKFLOW_CORE)
    assert _uses("roost.storage._lmdb", {"lmdb"})  # what the lmdb check looks for exists


def test_the_parser_sees_every_kind_of_import():
    # The parser is this file's instrument: a module that hides an import from it would
    # pass every check above.
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        from roost.storage import key
        from roost.workflow import _planner
        from ._local import _records
        if TYPE_CHECKING:
            from roost.workflow._local._manager import WorkflowManager
        def later():
            import trio
            from roost.actors._node import Node
        """
    )
    found = {(imported, how) for imported, how, _ in _imports("roost.workflow._new", source)}
    assert found >= {
        ("roost.storage._keys", "top"),  # through the lazy package's table
        ("roost.workflow._planner", "top"),
        ("roost.workflow._local._records", "top"),
        ("roost.workflow._local._manager", "type"),
        ("trio", "local"),
        ("roost.actors._node", "local"),
    }
    assert _uses_trio("roost.actors._node")
    assert not _uses_trio("roost.workflow._planner")
