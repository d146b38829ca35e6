"""Every ``roost ...`` command line in the docs' shell blocks is one the command line takes.

The shell blocks (```console / sh / bash / shell) of README.md and docs/*.md are read; each
line that runs ``roost`` (after an optional ``$ `` prompt) is parsed by the real click
commands (``make_context``: what click checks before a command runs): the subcommands must
exist, every option must be one the command has, with a value of its type, and the
arguments must fit. Nothing runs, so this takes milliseconds.
"""

import re
import shlex
from pathlib import Path

import click
import pytest

from roost.cli._main import main
from roost.workflow._local._inspect import LISTED_STATUSES

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```(console|sh|bash|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def command_lines():
    found = []
    for path in DOCS:
        for match in _BLOCK.finditer(path.read_text()):
            for line in match.group(2).splitlines():
                text = line.removeprefix("$ ").strip()
                if text.startswith("roost "):
                    found.append(pytest.param(text, id=f"{path.name}: {text[:60]}"))
    return found


def check(line):
    """Parse ``line`` as the ``roost`` command would; raise click's error if it would fail."""
    words = shlex.split(line, comments=True)
    assert words[0] == "roost"
    command, rest, names = main, words[1:], ["roost"]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        if sub is None:
            raise click.UsageError(f"no command {' '.join([*names, rest[0]])!r}")
        command, rest, names = sub, rest[1:], [*names, rest[0]]
    try:
        command.make_context(" ".join(names), list(rest))
    except click.exceptions.Exit as exc:  # --help, --version: printed, then a clean exit
        if exc.exit_code != 0:
            raise
    except click.BadParameter as exc:
        # A file the docs name as an example need not exist here; all else must parse.
        if not (isinstance(exc.param.type, click.Path) and "does not exist" in exc.message):
            raise


LINES = command_lines()


def test_the_docs_show_the_operating_commands():
    shown = {line.split()[1] for line in (p.values[0] for p in LINES)}
    assert {"run", "workflow", "queue", "dlq", "cron", "history", "replay"} <= shown
    assert len(LINES) >= 25


def test_the_docs_list_the_statuses_workflow_list_takes():
    text = " ".join((ROOT / "docs" / "operating.md").read_text().split())
    listed = ", ".join(f"`{status}`" for status in LISTED_STATUSES)
    assert f"(one of {listed}; any other is a usage error, exit 2)" in text


@pytest.mark.parametrize("line", LINES)
def test_a_documented_command_line_parses(line):
    check(line)


@pytest.mark.parametrize(
    "line",
    [
        "roost workflow lst",
        "roost workflow list --stat running",
        "roost workflow describe",
        "roost workflow describe a b",
        "roost dlq redrive emails r1 --everything",
        "roost run",
        "roost workflow list --status",
    ],
)
def test_a_wrong_command_line_is_caught(line):
    with pytest.raises(click.UsageError):
        check(line)
