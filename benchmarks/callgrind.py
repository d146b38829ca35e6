"""Instructions per workflow, counted by ``valgrind --tool=callgrind``: roost and the reference.

Usage (valgrind must be installed; a few minutes, most of it roost's runs)::

    python -m benchmarks.callgrind                      # roost, ref-a, ref-b at N = 50 and 250
    python -m benchmarks.callgrind --n 100 300 --scenario roost --scenario ref-b

Each scenario of ``benchmarks.bench_reference`` (N workflows of 3 async activities, all
started at once, fsync on) runs under callgrind in a fresh interpreter at two sizes N1 < N2;
the difference of the two runs' total instruction counts (every thread of the process),
divided by N2 - N1, is the count per workflow: start-up, imports, opening and closing the
node or executor, and the first workflow's warm-up cancel out. Instruction counts do not
depend on the neighbours, so on a shared machine they are the steady figure to compare
with; they do not show waiting (fsync, thread hand-offs).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_reference import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent
_TOTAL = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def instructions(scenario: str, n: int) -> int:
    """Total instructions of one ``bench_reference --scenario S --n N`` run under callgrind."""
    with tempfile.TemporaryDirectory(prefix="roost-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        cmd += [sys.executable, "-m", "benchmarks.bench_reference"]
        cmd += ["--scenario", scenario, "--n", str(n)]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        match = _TOTAL.search(out.read_bytes())
        if match is None:
            raise RuntimeError(f"no instruction total in callgrind's output for {scenario}")
        return int(match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs=2, default=[50, 250], metavar=("N1", "N2"))
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = parser.parse_args(argv)
    n1, n2 = sorted(args.n)
    if n1 == n2:
        parser.error("--n needs two different sizes")
    per: dict[str, float] = {}
    for scenario in args.scenario or ["roost", "ref-a", "ref-b"]:
        low, high = instructions(scenario, n1), instructions(scenario, n2)
        per[scenario] = (high - low) / (n2 - n1)
        print(f"{scenario:>10}: {per[scenario] / 1e6:.3f} M instructions/workflow", flush=True)
    for side in ("ref-a", "ref-b", "ref-c"):
        for me in ("roost", "roost-sync"):
            if side in per and me in per:
                print(f"{me} / {side}: {per[me] / per[side]:.1f}x")
    print(json.dumps({"n": [n1, n2], "per_workflow": per}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
