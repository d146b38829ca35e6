"""Re-record the golden histories: ``.venv/bin/python tests/replay/record.py [example ...]``.

Runs each example's scenario on a temporary data dir, then saves the history of every
workflow it left behind to ``tests/replay/histories/<example>--<workflow id>.cbor``. Do it
only on purpose (a deliberate, versioned change of an example workflow): the point of the
committed files is to catch changes that would break runs recorded by older code. Name
examples (``record.py saga``) to record only those and leave the others' files alone.
"""

import importlib.util
import sys
import tempfile
from pathlib import Path

import trio

import roost
from roost.testing import save_history

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = Path(__file__).resolve().parent / "histories"
EXAMPLES = ("order_workflow", "signals", "saga", "worker_pool")


def load_example(name):
    spec = importlib.util.spec_from_file_location(
        f"examples_{name}", ROOT / "examples" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def record(name):
    for old in HISTORIES.glob(f"{name}--*.cbor"):  # generated ids change between runs
        old.unlink()
    module = load_example(name)
    with tempfile.TemporaryDirectory() as data_dir:
        await module.main(data_dir)
        async with roost.open_node(module.app, data_dir) as node:
            for row in node.list_workflows():
                path = HISTORIES / f"{name}--{row['workflow_id']}.cbor"
                save_history(node.history(row["workflow_id"]), path)
                print("saved", path.relative_to(ROOT))


if __name__ == "__main__":
    HISTORIES.mkdir(exist_ok=True)
    for example in sys.argv[1:] or EXAMPLES:
        trio.run(record, example)
