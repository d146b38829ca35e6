"""Run the benchmark suites: ``python -m benchmarks [--quick] [--json PATH] [--only NAME]``.

``SUITES`` is the registry: a suite name mapped to a module exposing
``run(quick: bool) -> list[benchmarks._harness.Result]``. To add one,
write ``benchmarks/bench_<name>.py`` with such a ``run`` and add a line here.

``--quick`` runs every suite with small sizes and one repetition, in a few seconds, so
``make test`` can keep the suite from rotting: it never checks timings and exits 0 unless
a benchmark itself fails.

In full mode each suite runs in a fresh interpreter (``--in-process`` to run them all in
this one): a suite measured after others pays for the heap and collector state they left
behind, which moved the replay figures by up to 2x. Quick mode measures nothing worth
isolating and stays in one interpreter.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._harness import Result, machine_info, print_table, write_json

SUITES: dict[str, str] = {
    "processes": "benchmarks.bench_processes",
    "storage": "benchmarks.bench_storage",
    "workflows": "benchmarks.bench_workflows",
    "replay": "benchmarks.bench_replay",
    "recovery": "benchmarks.bench_recovery",
    "disk": "benchmarks.bench_disk",
    "queues": "benchmarks.bench_queues",
    "reference": "benchmarks.bench_reference",
    "temporal": "benchmarks.bench_temporal",
    "soak": "benchmarks.bench_soak",
    "stalls": "benchmarks.bench_stalls",
}

DEFAULT_JSON = Path(__file__).resolve().parent / "results.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})"
    )
    parser.add_argument(
        "--only", action="append", choices=sorted(SUITES), help="run only this suite (repeatable)"
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="full mode: run the suites in this interpreter (default: each in a fresh one, so "
        "a suite does not pay for the heap and collector state the suites before it left)",
    )
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    info = machine_info()
    print(
        f"roost benchmarks ({mode}): {info['cpu']}, {info['nproc']} CPUs, "
        f"Python {info['python']}, trio {info['trio']}",
        flush=True,
    )
    started = time.perf_counter()
    results: list[Result] = []
    names = args.only or list(SUITES)
    for name in names:
        t0 = time.perf_counter()
        if args.in_process or args.quick or len(names) == 1:
            module = importlib.import_module(SUITES[name])
            results.extend(module.run(quick=args.quick))
        else:
            results.extend(_run_isolated(name, quick=args.quick))
        print(f"  {name}: {time.perf_counter() - t0:.1f}s", flush=True)
    seconds = time.perf_counter() - started
    print()
    print_table(results)
    write_json(args.json, results, mode=mode, seconds=seconds)
    print(f"\n{len(results)} results in {seconds:.1f}s; JSON written to {args.json}")
    if args.quick:
        print("quick mode: tiny sizes and one try each, so the ratios above are noise")
    return 0


def _run_isolated(name: str, *, quick: bool) -> list[Result]:
    """Run one suite in a child interpreter and read back its results file."""
    with tempfile.TemporaryDirectory(prefix="roost-bench-") as tmp:
        out = Path(tmp) / "results.json"
        cmd = [sys.executable, "-m", "benchmarks", "--only", name, "--json", str(out)]
        if quick:
            cmd.append("--quick")
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit(f"benchmark suite {name!r} failed (exit {done.returncode})")
        data = json.loads(out.read_text(encoding="utf-8"))
    return [Result.from_json(r) for r in data["results"]]


if __name__ == "__main__":
    sys.exit(main())
