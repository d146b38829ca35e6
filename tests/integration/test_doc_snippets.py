"""Every Python code block of README.md and docs/*.md runs (or, marked a fragment, compiles).

A block is a whole program unless the line before its fence is ``<!-- fragment -->``: then it
is a piece of a larger program (it awaits at the top level, uses names defined elsewhere) and
is compiled, as the body of an ``async def``, and every ``process.x`` / ``roost.x`` / ...
name it uses must exist. A program block runs as a script would:
in a fresh namespace, from a temporary working directory, with its output captured. A block
followed by an ``<!-- output -->`` marked ``text`` block must print exactly that text.
Programs wait on ``roost.testing.open_test_node``'s clock, so long sleeps cost no real time.
The ``test_*`` functions a program defines are then called as pytest would call them (an
async one under trio, with pytest-trio's ``autojump_clock`` when it asks for it; a
hypothesis one with few examples). Links between the docs must resolve, and the docs name
no markdown file the repository does not have.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import pytest
import trio
import trio.testing

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = "<!-- fragment -->"
OUTPUT = "<!-- output -->"
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")


@attrs.frozen
class Block:
    """One fenced code block of a markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # the HTML comment on the line before the fence, if any

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> Iterator[Block]:
    """The fenced blocks of ``path``, in order (fences may be indented, as in lists)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent = match["indent"]
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].rstrip() != f"{indent}```":
            body.append(lines[i])
            i += 1
        previous = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        marker = previous if previous.startswith("<!--") else None
        yield Block(path, start + 1, match["lang"], textwrap.dedent("\n".join(body)), marker)
        i += 1


ALL = [block for path in DOCS for block in blocks(path)]
PYTHON = [block for block in ALL if block.lang == "python"]
PROGRAMS = [block for block in PYTHON if block.marker != FRAGMENT]
FRAGMENTS = [block for block in PYTHON if block.marker == FRAGMENT]


def expected_output(block: Block) -> str | None:
    """The text of the ``<!-- output -->`` block right after ``block``, if there is one."""
    later = [b for b in ALL if b.path == block.path and b.line > block.line]
    if later and later[0].marker == OUTPUT:
        return later[0].code.strip("\n")
    return None


def test_the_docs_have_programs_and_fragments() -> None:
    # The extraction itself works: the guides do hold blocks of both kinds.
    assert len(PROGRAMS) >= 10
    assert len(FRAGMENTS) >= 10
    assert {b.path.name for b in PROGRAMS} >= {"README.md", "workflows.md", "orchestration.md"}


def test_markers_sit_on_blocks_they_apply_to() -> None:
    for block in ALL:
        if block.marker == FRAGMENT:
            assert block.lang == "python", f"{block.name}: a fragment marker on a {block.lang}"
        if block.marker == OUTPUT:
            assert block.lang == "text", f"{block.name}: an output marker on a {block.lang}"
        if block.marker is not None:
            assert block.marker in (FRAGMENT, OUTPUT), f"{block.name}: {block.marker}"


# Names the guides use for roost's modules; in fragments, ``process.spawn_linked`` and the
# like must name something that exists.
MODULES = {
    "roost": "roost",
    "process": "roost.process",
    "funcs": "roost.funcs",
    "channel": "roost.channel",
    "coroutine": "roost.coroutine",
    "ctx": "roost.ctx",
    "supervisor": "roost.supervisor",
    "workflow": "roost.workflow",
    "state": "roost.state",
    "http": "roost.http",
}


def roost_references(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """Every ``module.a.b`` chain in ``tree`` that starts at one of roost's module names."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue  # inner chains (process.registry of process.registry.lookup) count too
        chain: list[str] = []
        value: ast.expr = node
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in MODULES:
            yield value.id, chain


@pytest.mark.parametrize("block", FRAGMENTS, ids=lambda b: b.name)
def test_fragment_compiles(block: Block) -> None:
    wrapped = "async def __fragment__():\n" + textwrap.indent(block.code or "pass", "    ")
    tree = ast.parse(wrapped, block.name)
    compile(tree, block.name, "exec")
    for name, chain in roost_references(tree):
        obj: Any = importlib.import_module(MODULES[name])
        for depth, attr in enumerate(chain):
            if inspect.ismodule(obj) or isinstance(obj, type) or depth == 0:
                assert hasattr(obj, attr), f"{block.name}: {name}.{'.'.join(chain)} does not exist"
                obj = getattr(obj, attr)
            else:
                break  # an instance's attribute (a Channel's .send): not checked here


@pytest.mark.parametrize("block", PROGRAMS, ids=lambda b: b.name)
def test_program_runs(
    block: Block,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    keep_global_tracing(monkeypatch)
    code = compile(block.code, block.name, "exec")
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": str(tmp_path / "s.py")}
    exec(code, namespace)  # running the doc's own code is the point
    tests = [fn for name, fn in namespace.items() if name.startswith("test_") and callable(fn)]
    for fn in tests:
        call_like_pytest(fn)
    printed = capsys.readouterr().out.strip("\n")
    want = expected_output(block)
    if want is not None:
        assert printed == want


def keep_global_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undo a program's ``trace.set_tracer_provider`` once it ends.

    OpenTelemetry sets its global provider once per process, and roost decides at each
    ``open_node`` whether to trace from it: a doc that installs the SDK would otherwise
    turn tracing on for every later test. These are the globals OpenTelemetry's own test
    utilities reset.
    """
    from opentelemetry import trace  # noqa: PLC0415 - only the runner needs it

    # monkeypatch puts both back at teardown; the fresh latch lets the program set its own.
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", trace._TRACER_PROVIDER)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", trace.Once())


def call_like_pytest(fn: Callable[..., Any]) -> None:
    """Call a test function the doc defines, as pytest (with pytest-trio) would."""
    if hasattr(fn, "hypothesis"):
        fn = hypothesis.settings(max_examples=3, database=None)(fn)
    if not inspect.iscoroutinefunction(fn):
        fn()
        return
    params = inspect.signature(fn).parameters
    if "autojump_clock" in params:
        clock = trio.testing.MockClock(autojump_threshold=0)
        trio.run(lambda: fn(autojump_clock=clock), clock=clock)
    else:
        trio.run(fn)


_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(?P<title>.+?) *$")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    found: set[str] = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        match = None if in_code else _HEADING.match(line)
        if match is not None:
            title = match["title"].lower().replace("`", "")
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def prose(path: Path) -> str:
    """The text of a markdown file without its code blocks and inline code."""
    kept: list[str] = []
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        elif not in_code:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def test_links_between_the_docs_resolve() -> None:
    broken = []
    for path in [*DOCS, ROOT / "examples" / "README.md"]:
        for match in _LINK.finditer(prose(path)):
            target = match["target"]
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_docs_name_only_files_the_repository_has() -> None:
    # A guide that points at a design document or an API file the repository does not ship
    # sends a new user looking for nothing.
    names = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
    missing = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in [*DOCS, ROOT / "examples" / "README.md"]
        for name in re.findall(r"[\w.-]+\.md\b", path.read_text(encoding="utf-8"))
        if Path(name).name not in names
    ]
    assert missing == []
