"""``funcs.call``, ``process.exec``, ``workflow.exec`` and ``process.spawn`` are typed.

mypy (``--strict``) checks ``tests/typing/typed_calls.py``: a call whose arguments do not fit
the entry's signature is an error, and a call's result has the entry's return type. The file
marks each line where mypy must reveal a type (``# R: T``) or report an error
(``# E: text``); calls typed ``Any`` would reveal ``Any`` and let the bad calls pass.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "typing" / "typed_calls.py"
_MARK = re.compile(r"#\s*([RE]):\s*(.+?)\s*$")
_OUTPUT = re.compile(r"^.*?:(\d+): (error|note): (.*?)(?:\s+\[[a-z-]+\])?$")


def _marks() -> tuple[dict[int, str], dict[int, str]]:
    reveals: dict[int, str] = {}
    errors: dict[int, str] = {}
    for number, line in enumerate(PROGRAM.read_text().splitlines(), start=1):
        found = _MARK.search(line)
        if found:
            (reveals if found[1] == "R" else errors)[number] = found[2]
    return reveals, errors


def test_calls_check_arguments_and_carry_the_result_type() -> None:
    expected_reveals, expected_errors = _marks()
    assert len(expected_reveals) >= 10 and len(expected_errors) >= 7  # the file is intact
    stdout, stderr, _status = mypy_api.run(
        [
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            "--show-error-codes",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(PROGRAM),
        ]
    )
    assert stderr == ""
    reveals: dict[int, str] = {}
    errors: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        found = _OUTPUT.match(line)
        assert found, line
        number, what, text = int(found[1]), found[2], found[3]
        if what == "note" and text.startswith("Revealed type is "):
            reveals[number] = text.removeprefix("Revealed type is ").strip('"')
        elif what == "error":
            errors.setdefault(number, []).append(text)
    # older mypy versions spell builtins with their module
    reveals = {n: t.replace("builtins.", "") for n, t in reveals.items()}
    assert reveals == expected_reveals, stdout
    assert set(errors) == set(expected_errors), stdout
    for number, text in expected_errors.items():
        assert any(text in e for e in errors[number]), (number, errors[number])
