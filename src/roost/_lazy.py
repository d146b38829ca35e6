"""Lazy package namespaces (PEP 562): a public name loads its module on first access.

A package ``__init__`` lists where each public name lives and installs the pair this
module builds as its ``__getattr__`` and ``__dir__``. Importing a package then runs no
code of its submodules, so that a pure core (the workflow driver, the planner, the codec)
imported through the normal path does not pull in the runtime, and trio, with it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["attach"]


def attach(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names live where ``table`` says.

    Args:
        package: the package's ``__name__``.
        table: public name -> the module that defines it; a name that is the package's own
            submodule (``"channel"`` -> ``"roost.channel"``) resolves to that module.
    """

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook's name
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(where)
        value = module if where == f"{package}.{name}" else getattr(module, name)
        # Cached in the package, so the hook runs once per name.
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807 - the PEP 562 hook's name
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
