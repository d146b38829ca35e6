"""``app.supervisor(...)`` and ``app.dynamic_supervisor(...)``: validate, then register."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from roost._duration import Duration, parse_duration
from roost._errors import invalid
from roost.actors._app import ENTRY_ATTR, App, EntryKind, register_extension
from roost.supervisor._runtime import resolve_child, run_supervisor
from roost.supervisor._spec import (
    ChildSpec,
    Restart,
    Strategy,
    SupervisorSpec,
    order_by_requires,
)

__all__ = ["declare_dynamic_supervisor", "declare_supervisor"]


def _flags(strategy: Any, intensity: Any, period: Duration) -> tuple[Strategy, int, float]:
    try:
        strat = Strategy(strategy)
    except ValueError:
        allowed = ", ".join(repr(s.value) for s in Strategy)
        raise invalid(f"strategy must be one of {allowed}, got {strategy!r}") from None
    if isinstance(intensity, bool) or not isinstance(intensity, int) or intensity < 0:
        raise invalid(f"intensity must be an int >= 0 (0 = never restart), got {intensity!r}")
    seconds = parse_duration(period, what="period", allow_zero=False)
    return strat, intensity, seconds


def _check_children(children: object) -> tuple[ChildSpec, ...]:
    if isinstance(children, ChildSpec) or not isinstance(children, Sequence | tuple | list):
        raise invalid("children must be a list of supervisor.child(...) specs")
    for spec in children:
        if not isinstance(spec, ChildSpec):
            raise invalid(f"children must be supervisor.child(...) specs, got {spec!r}")
    order_by_requires(list(children))  # duplicate ids, unknown requirements, cycles
    return tuple(children)


def _validate_entries(spec: SupervisorSpec, app: App) -> None:
    children = (*spec.children, spec.template) if spec.template else spec.children
    for child in children:
        resolve_child(app, spec.name, child)


def _register(
    app: App, name: str, spec: SupervisorSpec, fn: Callable[..., Any] | None
) -> Callable[..., Any]:
    runner = functools.partial(run_supervisor, spec, fn)
    options = {
        "spec": spec,
        "validate": functools.partial(_validate_entries, spec),
        "sync_start": True,
    }
    entry = app.register(runner, EntryKind.SUPERVISOR, name=name, options=options)
    if fn is not None:
        setattr(fn, ENTRY_ATTR, entry.id)
    return fn if fn is not None else runner


def declare_supervisor(
    app: App,
    name_or_fn: Any = None,
    /,
    *,
    children: Sequence[ChildSpec] | None = None,
    strategy: str = "one_for_one",
    intensity: int = 1,
    period: Duration = "5s",
) -> Any:
    """Implementation of ``App.supervisor`` (see there)."""
    strat, count, seconds = _flags(strategy, intensity, period)

    def build(name: str, fn: Callable[..., Any] | None) -> Any:
        static = _check_children(children) if fn is None else ()
        spec = SupervisorSpec(
            name=f"{app.name}:{name}",
            children=static,
            strategy=strat,
            intensity=count,
            period=seconds,
        )
        return _register(app, name, spec, fn)

    if isinstance(name_or_fn, str):
        if children is None:
            raise invalid(
                f"supervisor {name_or_fn!r} needs children=[...], or use @app.supervisor on "
                "a function that returns them"
            )
        return build(name_or_fn, None)
    if children is not None:
        raise invalid("pass children=[...] together with a supervisor name")
    if callable(name_or_fn):
        return build(name_or_fn.__name__, name_or_fn)
    if name_or_fn is None:
        return lambda fn: build(fn.__name__, fn)
    raise invalid(f"app.supervisor takes a name or a function, got {name_or_fn!r}")


def declare_dynamic_supervisor(
    app: App,
    name: str,
    /,
    *,
    template: ChildSpec,
    intensity: int = 1,
    period: Duration = "5s",
) -> Any:
    """Implementation of ``App.dynamic_supervisor`` (see there)."""
    _, count, seconds = _flags("one_for_one", intensity, period)
    if not isinstance(template, ChildSpec):
        raise invalid("template must be a supervisor.child(...) spec")
    if template.requires:
        raise invalid("a dynamic supervisor's template cannot require siblings")
    if template.restart is Restart.PERMANENT and count == 0:
        raise invalid("intensity 0 with a permanent template would never restart anything")
    spec = SupervisorSpec(
        name=f"{app.name}:{name}",
        strategy=Strategy.ONE_FOR_ONE,
        intensity=count,
        period=seconds,
        template=template,
    )
    return _register(app, name, spec, None)


register_extension("supervisor", declare_supervisor)
register_extension("dynamic_supervisor", declare_dynamic_supervisor)
