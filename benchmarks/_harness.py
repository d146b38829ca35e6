"""Shared benchmark plumbing: timing, results, the plain-text table and the JSON file.

Every measurement is a ``Result``: one figure for roost and the same figure for the
reference (raw trio, raw LMDB, ...) taken in the same run, so the ratio ``roost / raw``
is what to read; absolute numbers are only indicative on a shared machine.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Children",
    "Result",
    "Target",
    "compare",
    "machine_info",
    "now",
    "print_table",
    "rss_bytes",
    "source_digest",
    "write_json",
]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Target:
    """A goal to report against (never asserted).

    ``kind`` is ``"ratio>="`` (roost/raw at least ``value``), ``"ratio<="`` (at most),
    ``"max"`` (the roost figure at most ``value``) or ``"min"`` (the roost figure at least
    ``value``).
    """

    kind: str
    value: float
    label: str

    def check(self, roost: float, ratio: float | None) -> bool | None:
        if self.kind == "ratio>=":
            return None if ratio is None else ratio >= self.value
        if self.kind == "ratio<=":
            return None if ratio is None else ratio <= self.value
        if self.kind == "max":
            return roost <= self.value
        if self.kind == "min":
            return roost >= self.value
        raise ValueError(f"unknown target kind {self.kind!r}")


@dataclass
class Result:
    """One line of the table: a figure for roost next to the raw reference."""

    suite: str
    name: str
    unit: str
    roost: float
    raw: float | None = None
    raw_label: str = "raw trio"
    higher_is_better: bool = True
    target: Target | None = None
    note: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.raw is None or self.raw == 0:
            return None
        return self.roost / self.raw

    @property
    def status(self) -> str:
        if self.target is None:
            return ""
        ok = self.target.check(self.roost, self.ratio)
        if ok is None:
            return "n/a"
        return "PASS" if ok else "MISS"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        data["status"] = self.status or None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        """Rebuild a result written by ``to_json`` (a suite run in a child interpreter)."""
        fields = {k: v for k, v in data.items() if k not in ("ratio", "status")}
        if fields.get("target") is not None:
            fields["target"] = Target(**fields["target"])
        return cls(**fields)


# -- timing ----------------------------------------------------------------------------------


def compare(repeat: int, fns: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Best seconds of each function, taking turns (roost, raw, roost, raw, ...).

    Interleaving spreads a noisy neighbour's load over both sides of a ratio instead of
    letting it land on whichever ran during the spike.
    """
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(max(1, repeat)):
        for key, fn in fns.items():
            gc.collect()
            best[key] = min(best[key], fn())
    return best


def now() -> float:
    return time.perf_counter()


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm (0 where there is none)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:
        return 0


class Children:
    """Benchmark children: ``python -m module *args`` per arg list, in fresh interpreters.

    Each child prints one JSON object as its last stdout line. Used where a measurement
    needs a clean heap (RSS deltas) or GC state. With ``background=True`` all start at
    once and run while the caller does other work (smoke runs, where timings do not
    matter); otherwise each runs alone when ``results()`` is called.
    """

    def __init__(
        self, module: str, arg_lists: list[list[str]], *, background: bool = False
    ) -> None:
        self.module = module
        self.arg_lists = arg_lists
        self.timeout = 300.0
        self._procs = [self._start(args) for args in arg_lists] if background else None

    def _start(self, args: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", self.module, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )

    def _finish(self, proc: subprocess.Popen[str], args: list[str]) -> dict[str, Any]:
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        what = f"benchmark child {self.module} {' '.join(args)}"
        if proc.returncode != 0:
            raise RuntimeError(f"{what} failed ({proc.returncode}):\n{err.strip()}")
        lines = out.strip().splitlines()
        if not lines:
            raise RuntimeError(f"{what} printed nothing")
        return json.loads(lines[-1])  # type: ignore[no-any-return]

    def results(self) -> list[dict[str, Any]]:
        """Each child's JSON object, in the order of ``arg_lists``."""
        procs = self._procs
        if procs is None:
            return [self._finish(self._start(args), args) for args in self.arg_lists]
        return [self._finish(proc, args) for proc, args in zip(procs, self.arg_lists, strict=True)]


# -- output ----------------------------------------------------------------------------------


def fmt(value: float | None, unit: str = "") -> str:
    """A compact human figure: 12.3k, 1.05M, 0.012, 3.4 KB."""
    if value is None:
        return "-"
    if unit.startswith("B/"):
        return f"{value / 1024:.2f} KB" if abs(value) >= 1024 else f"{value:.0f} B"
    if unit == "s":
        if value < 0.1:
            return f"{value:.2g}"  # 0.0042, 0.00017: keep two digits of small times
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    for limit, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def _fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def table_lines(results: list[Result]) -> list[str]:
    """The results as aligned plain-text rows (no colours, no extra dependency)."""
    header = ("benchmark", "unit", "roost", "reference", "roost/ref", "target", "status")
    rows: list[tuple[str, ...]] = []
    for r in results:
        ratio = r.ratio
        better = "higher" if r.higher_is_better else "lower"
        rows.append(
            (
                r.name,
                f"{r.unit} ({better} better)",
                fmt(r.roost, r.unit),
                f"{fmt(r.raw, r.unit)} {r.raw_label}" if r.raw is not None else "-",
                _fmt_ratio(ratio),
                r.target.label if r.target else "",
                r.status,
            )
        )
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(header), line(tuple("-" * w for w in widths))]
    suite = None
    for r, row in zip(results, rows, strict=True):
        if r.suite != suite:
            suite = r.suite
            out.append(f"[{suite}]")
        out.append(line(row))
        if r.note:
            out.append(" " * 4 + f"note: {r.note}")
    return out


def print_table(results: list[Result], file: Any = None) -> None:
    print("\n".join(table_lines(results)), file=file or sys.stdout, flush=True)


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    import trio  # noqa: PLC0415 - only needed here

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for raw_line in fh:
                if raw_line.startswith("model name"):
                    cpu = raw_line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "trio": trio.__version__,
        "platform": platform.platform(),
        "loadavg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def source_digest() -> str:
    """A short digest of src/roost/**/*.py, to tell which code a results file measured."""
    src = Path(__file__).resolve().parent.parent / "src" / "roost"
    digest = hashlib.sha256()
    for path in sorted(src.rglob("*.py")):
        digest.update(path.relative_to(src).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def write_json(path: Path, results: list[Result], *, mode: str, seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "mode": mode,
        "seconds": round(seconds, 3),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds)),
        "src_digest": source_digest(),
        "machine": machine_info(),
        "results": [r.to_json() for r in results],
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
