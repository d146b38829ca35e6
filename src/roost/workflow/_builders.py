"""Generated builders for attrs records made on every workflow step.

A frozen attrs ``__init__`` parses keyword arguments and sets each slot; ``attrs.evolve``
also looks every field up by name. The records a step builds (its activation, its
commands, its tasks, the run's record copy) are built instead by functions compiled once
per class: positional arguments, each slot set directly, as the frozen ``__init__`` does.
Only classes whose ``__init__`` does nothing more qualify (checked when generated).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, cast

import attrs

__all__ = ["maker", "replacer"]


def _plain_fields(cls: type) -> tuple[attrs.Attribute[Any], ...]:
    """``cls``'s fields, if its ``__init__`` only sets them (no validator, converter, hook).

    The generated builders below set each slot directly, as the frozen ``__init__``
    itself does, without its keyword parsing: a class with more to run is refused.
    """
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(cls)
    hooks = ("__attrs_pre_init__", "__attrs_post_init__")
    plain = (
        not any(hasattr(cls, hook) for hook in hooks)
        # attrs' own __init__ (a hand-written one would be bypassed), no cached hash slot
        and _attrs_init(cls)
        and "_attrs_cached_hash" not in getattr(cls, "__slots__", ())
        and all(
            f.validator is None and f.converter is None and f.init and not _takes_self(f)
            for f in fields
        )
    )
    if not plain:
        raise TypeError(f"{cls.__name__} runs code in __init__: build it with its __init__")
    return fields


def _attrs_init(cls: type) -> bool:
    code = getattr(cls.__dict__.get("__init__"), "__code__", None)
    return code is not None and code.co_filename.startswith("<attrs generated")


def _known(cls: type, names: tuple[str, ...], fields: tuple[attrs.Attribute[Any], ...]) -> None:
    """Refuse a name that is no field of ``cls`` (its value would be dropped silently)."""
    unknown = sorted(set(names) - {f.name for f in fields})
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}")


def _takes_self(field: attrs.Attribute[Any]) -> bool:
    default: Any = field.default
    return isinstance(default, attrs.Factory) and bool(default.takes_self)  # type: ignore[arg-type]


def _generated(cls: type, kind: str, head: str, values: dict[str, str]) -> Callable[..., Any]:
    """Compile ``head`` (a ``def`` line) with a body that sets each field to its value.

    A slotted class's fields are set through their slots' own descriptors (what
    ``object.__setattr__`` finds after looking the name up on the class each time).
    """
    lines = [head, "    n = _new(_cls)"]
    namespace: dict[str, Any] = {"_cls": cls, "_new": object.__new__, "_set": object.__setattr__}
    slots = {name: getattr(cls, name, None) for name in values}
    if all(isinstance(slot, types.MemberDescriptorType) for slot in slots.values()):
        for name, value in values.items():
            namespace[f"_s_{name}"] = slots[name].__set__  # type: ignore[union-attr]
            lines.append(f"    _s_{name}(n, {value})")
    else:
        lines.append("    s = _set.__get__(n)")
        lines += [f"    s({name!r}, {value})" for name, value in values.items()]
    lines.append("    return n")
    for f in attrs.fields(cls):
        if isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
            namespace[f"_f_{f.name}"] = f.default.factory
        else:
            namespace[f"_d_{f.name}"] = f.default
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<roost {kind} {cls.__name__}>", "exec"), namespace)  # noqa: S102 - generated from the class's own field names
    return cast("Callable[..., Any]", namespace[kind])


def replacer(cls: type, changed: tuple[str, ...]) -> Callable[..., Any]:
    """A function building a copy of a ``cls`` instance with the ``changed`` fields given.

    Generated: ``attrs.evolve`` looks every field up by name on each call, and the run
    record is copied on every activation (see ``_plain_fields``).
    """
    fields = _plain_fields(cls)
    _known(cls, changed, fields)
    values = {f.name: f.name if f.name in changed else f"o.{f.name}" for f in fields}
    return _generated(cls, "replace", f"def replace(o, *, {', '.join(changed)}):", values)


def maker(cls: type, given: tuple[str, ...]) -> Callable[..., Any]:
    """A function building a ``cls`` from the ``given`` fields (positional), others default.

    For records built on every step: positional arguments and no keyword parsing.
    """
    values: dict[str, str] = {}
    fields = _plain_fields(cls)
    _known(cls, given, fields)
    for f in fields:
        if f.name in given:
            values[f.name] = f.name
        elif isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
            values[f.name] = f"_f_{f.name}()"
        elif f.default is not attrs.NOTHING:
            values[f.name] = f"_d_{f.name}"
        else:
            raise TypeError(f"{cls.__name__}.{f.name} has no default: it must be given")
    return _generated(cls, "make", f"def make({', '.join(given)}):", values)
