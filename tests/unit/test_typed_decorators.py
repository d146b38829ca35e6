"""``@app.workflow`` / ``@app.activity`` / ``@app.process`` keep the signature for mypy.

A small program is type-checked with mypy (``--strict``) in the test: the decorated
functions must reveal their own signature, a call with a wrong argument must be an error,
and so must a sync function decorated as a workflow. A decorator typed to return ``Any``
would reveal ``Any`` and let the wrong calls pass.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

PROGRAM = textwrap.dedent(
    """
    from typing import reveal_type

    import roost

    app = roost.App("typed")


    @app.workflow
    async def order(order_id: str, total: int) -> dict[str, int]:
        return {order_id: total}


    @app.workflow(name="other_order")
    async def named_order(order_id: str) -> str:
        return order_id


    @app.activity
    def charge(order_id: str, amount: int) -> str:
        return f"pay-{order_id}-{amount}"


    @app.activity(start_to_close_timeout="30s", name="ship_it")
    async def ship(order_id: str) -> bool:
        return bool(order_id)


    @app.process
    async def worker(n: int) -> int:
        return n * 2


    @app.workflow  # a sync function is refused at run time, and by the type checker
    def sync_workflow(n: int) -> int:
        return n


    @app.process(name="other_worker")
    async def named_worker(n: int, *, label: str = "") -> list[str]:
        return [label] * n


    reveal_type(order)
    reveal_type(named_order)
    reveal_type(charge)
    reveal_type(ship)
    reveal_type(worker)
    reveal_type(named_worker)

    r0 = order(1, 2)
    r1 = charge("o-1", "lots")
    r2 = ship(order_id=3)
    r3 = worker("x")
    r4 = named_worker(2, label=5)
    r5 = named_order()
    """
)

EXPECTED_REVEALS = [
    "def (order_id: str, total: int) -> typing.Coroutine[Any, Any, dict[str, int]]",
    "def (order_id: str) -> typing.Coroutine[Any, Any, str]",
    "def (order_id: str, amount: int) -> str",
    "def (order_id: str) -> typing.Coroutine[Any, Any, bool]",
    "def (n: int) -> typing.Coroutine[Any, Any, int]",
    "def (n: int, *, label: str =) -> typing.Coroutine[Any, Any, list[str]]",
]

EXPECTED_ERRORS = [
    'Value of type variable "_AsyncFn" of "workflow" of "App" cannot be "Callable[[int], int]"',
    'Argument 1 to "order" has incompatible type "int"; expected "str"',
    'Argument 2 to "charge" has incompatible type "str"; expected "int"',
    'Argument "order_id" to "ship" has incompatible type "int"; expected "str"',
    'Argument 1 to "worker" has incompatible type "str"; expected "int"',
    'Argument "label" to "named_worker" has incompatible type "int"; expected "str"',
    'Missing positional argument "order_id" in call to "named_order"',
]


def test_decorators_keep_the_signature_for_mypy(tmp_path: Path) -> None:
    program = tmp_path / "typed_program.py"
    program.write_text(PROGRAM)
    cache = Path(__file__).resolve().parents[2] / ".mypy_cache"
    stdout, stderr, status = mypy_api.run(
        [
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            "--show-error-codes",
            "--cache-dir",
            str(cache),
            str(program),
        ]
    )
    assert stderr == ""
    lines = [line.split(": ", 2)[2] for line in stdout.splitlines() if line.count(": ") >= 2]
    reveals = [
        # older mypy versions spell builtins with their module
        re.sub(r'^Revealed type is "(.*)"$', r"\1", line).replace("builtins.", "")
        for line in lines
        if line.startswith("Revealed type")
    ]
    assert reveals == EXPECTED_REVEALS, stdout
    errors = [re.sub(r"\s+\[[a-z-]+\]$", "", line) for line in lines if "Revealed" not in line]
    assert errors == EXPECTED_ERRORS, stdout
    assert status == 1  # the wrong calls above are errors, and nothing else is
