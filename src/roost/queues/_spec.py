"""Queue declarations (``app.queue``), their validation, and the retry delay rule."""

from __future__ import annotations

import os
import random
import tomllib
from pathlib import Path
from typing import Any

import attrs

from roost._backoff import capped_backoff
from roost._duration import parse_duration
from roost._errors import Error, invalid, shown
from roost._text import check_text

__all__ = [
    "DEFAULT_QUEUE",
    "QueueSpec",
    "declare_queue",
    "load_config",
    "queue_specs",
    "retry_delay",
]

DEFAULT_QUEUE = "default"
_MAX_NAME = 400  # a message key (name, seq) stays within LMDB's 511-byte key limit
_TYPES = ("standard", "fifo")


@attrs.frozen(kw_only=True)
class QueueSpec:
    """One named queue's behaviour (iii's queue config, with the same meanings)."""

    name: str
    max_retries: int = 3  # retries after the first attempt: max_retries + 1 in all
    backoff: float = 1.0
    max_backoff: float = 300.0
    jitter: float = 0.1
    concurrency: int = 10
    type: str = "standard"
    message_group_field: str | None = None
    timeout: float = 1800.0

    @property
    def fifo(self) -> bool:
        """Whether messages of one group run strictly one after another."""
        return self.type == "fifo"


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise invalid(f"queue setting {name} must be an int >= {low}, got {value!r}")
    return value


def make_spec(name: str, settings: dict[str, Any]) -> QueueSpec:
    """A checked ``QueueSpec`` from ``app.queue`` keywords or a ``roost.toml`` table.

    Raises:
        roost.Error: kind Invalid naming the setting and what it accepts.
    """
    if not isinstance(name, str) or not name or any(c in name for c in "{}|@ "):
        raise invalid(f"a queue name is a non-empty string without '{{}}|@ ', got {shown(name)}")
    check_text(name, "a queue name")
    if len(name.encode()) > _MAX_NAME:
        raise invalid(f"a queue name is at most {_MAX_NAME} bytes, got {len(name.encode())}")
    known = {f.name for f in attrs.fields(QueueSpec)} - {"name"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise invalid(
            f"unknown queue setting(s) {', '.join(unknown)} for queue {name!r}; known: "
            f"{', '.join(sorted(known))}",
            queue=name,
        )
    values = dict(settings)
    for key in ("backoff", "max_backoff", "timeout"):
        if key in values:
            values[key] = parse_duration(values[key], what=f"queue {name!r} {key}")
    if "timeout" in values and values["timeout"] <= 0:
        raise invalid(f"queue {name!r} timeout must be > 0")
    values["max_retries"] = _int("max_retries", values.get("max_retries", 3), 0)
    values["concurrency"] = _int("concurrency", values.get("concurrency", 10), 1)
    jitter = values.get("jitter", 0.1)
    if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
        raise invalid(f"queue {name!r} jitter must be a number in [0, 1], got {jitter!r}")
    kind = values.get("type", "standard")
    if kind not in _TYPES:
        raise invalid(f"queue {name!r} type must be 'standard' or 'fifo', got {kind!r}")
    field = values.get("message_group_field")
    if kind != "fifo" and field is not None:
        raise invalid(f"message_group_field applies to fifo queues; queue {name!r} is {kind}")
    if values.get("max_backoff", 300.0) < values.get("backoff", 1.0):
        raise invalid(f"queue {name!r}: max_backoff must be at least backoff")
    if kind == "fifo" and (not isinstance(field, str) or not field):
        raise invalid(
            f"fifo queue {name!r} needs message_group_field, the payload field whose value "
            "groups messages (e.g. message_group_field='order_id')"
        )
    return QueueSpec(name=name, **values)


def declare_queue(app: Any, name: str, /, **settings: Any) -> QueueSpec:
    """``app.queue``: validate and record a queue declaration on ``app``."""
    spec = make_spec(name, settings)
    app.declared.setdefault("queues", {})[name] = spec
    return spec


def load_config(app: Any, path: str | os.PathLike[str]) -> list[QueueSpec]:
    """``app.load_config("roost.toml")``: declare the queues of its ``[queues.<name>]`` tables.

    All tables are checked before any is declared: a bad file changes nothing.

    Raises:
        roost.Error: Invalid for a missing or malformed file, an unknown section or key,
            or a bad value (the message names the file and the queue).
    """
    if not isinstance(path, str | os.PathLike):
        raise invalid(f"load_config takes the path of a roost.toml file, got {path!r}")
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise invalid(f"config file {str(file)!r} does not exist", path=str(file)) from None
    except IsADirectoryError:
        raise invalid(
            f"config file {str(file)!r} is a directory: pass the path of the roost.toml "
            "file itself",
            path=str(file),
        ) from None
    except OSError as exc:
        raise invalid(
            f"config file {str(file)!r} cannot be read ({exc.strerror or exc})", path=str(file)
        ) from None
    except UnicodeDecodeError as exc:
        raise invalid(f"config file {str(file)!r} is not UTF-8 text ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise invalid(f"config file {str(file)!r} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"queues"})
    if unknown:
        raise invalid(
            f"config file {str(file)!r}: unknown section(s) {', '.join(unknown)}; roost reads "
            "[queues.<name>] tables"
        )
    queues = data.get("queues", {})
    if not isinstance(queues, dict):
        raise invalid(f"config file {str(file)!r}: queues must be tables, [queues.<name>]")
    specs = []
    for name, table in queues.items():
        if not isinstance(table, dict):
            raise invalid(f"config file {str(file)!r}: [queues.{name}] must be a table")
        try:
            specs.append(make_spec(name, dict(table)))
        except Error as exc:
            raise invalid(f"config file {str(file)!r}: {exc.message}") from None
    for spec in specs:
        app.declared.setdefault("queues", {})[spec.name] = spec
    return specs


def queue_specs(app: Any) -> dict[str, QueueSpec]:
    """Every queue of ``app``, the ``default`` one included."""
    specs: dict[str, QueueSpec] = {DEFAULT_QUEUE: QueueSpec(name=DEFAULT_QUEUE)}
    specs.update(app.declared.get("queues", {}))
    return specs


def retry_delay(spec: QueueSpec, attempt: int, rng: random.Random | None = None) -> float:
    """Seconds before the retry after failed attempt ``attempt`` (1-based).

    ``min(backoff * 2^(attempt-1), max_backoff) * (1 ± jitter)``.
    """
    base = capped_backoff(spec.backoff, 2.0, attempt - 1, spec.max_backoff)
    if not spec.jitter:
        return base
    spread = (rng or random).uniform(-spec.jitter, spec.jitter)
    return max(0.0, base * (1.0 + float(spread)))
