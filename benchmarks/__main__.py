"""Run the benchmark suites: ``python -m benchmarks [--quick] [--json PATH] [--only NAME]``.

``SUITES`` is the registry: a suite name mapped to a module exposing
``run(quick: bool) -> list[benchmarks._harness.Result]``. To add one,
write ``benchmarks/bench_<name>.py`` with such a ``run`` and add a line here.

``--quick`` runs every suite with small sizes and one repetition, in a few seconds, so
``make test`` can keep the suite from rotting: it never checks timings and exits 0 unless
a benchmark itself fails.
"""

from __future__ import annotations

import argparse
import importlib
import sys
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
    for name in args.only or SUITES:
        t0 = time.perf_counter()
        module = importlib.import_module(SUITES[name])
        results.extend(module.run(quick=args.quick))
        print(f"  {name}: {time.perf_counter() - t0:.1f}s", flush=True)
    seconds = time.perf_counter() - started
    print()
    print_table(results)
    write_json(args.json, results, mode=mode, seconds=seconds)
    print(f"\n{len(results)} results in {seconds:.1f}s; JSON written to {args.json}")
    if args.quick:
        print("quick mode: tiny sizes and one try each, so the ratios above are noise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
