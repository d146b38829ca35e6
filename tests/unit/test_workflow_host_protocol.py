"""The workflow host protocol is public, in ``roost.workflow``, and needs no trio."""

import subprocess
import sys
import textwrap

import pytest

import roost.workflow
from roost.workflow import _host_protocol

MEMBERS = {
    "host",
    "pid_hosts",
    "spawn",
    "signal",
    "cancel",
    "terminate",
    "running",
    "monitor",
    "link",
    "unwatch",
    "process_exited",
    "wait_exit",
    "describe",
    "list_workflows",
    "history",
}


def _members(protocol):
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_the_protocols_are_the_public_names_of_their_module():
    for name in ("WorkflowHost", "NodeServices", "Durable", "WorkflowHostFactory"):
        assert getattr(roost.workflow, name) is getattr(_host_protocol, name)


def test_a_host_implements_exactly_what_the_node_asks():
    # Widening the seam is a decision (docs/design-notes.md, "The workflow host protocol").
    assert _members(_host_protocol.WorkflowHost) == MEMBERS
    assert _members(_host_protocol.NodeServices) == {
        "name",
        "app",
        "now",
        "lookup",
        "send",
        "post_exit",
        "link_down",
        "spawn",
        "stop",
        "bind_activity",
        "keyring",
    }
    assert _members(_host_protocol.Durable) == {"is_set", "wait"}


@pytest.mark.slow
def test_the_protocols_load_with_trio_blocked():
    script = textwrap.dedent(
        """
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "trio" or name.startswith("trio."):
                    raise ImportError("trio is blocked")
                return None

        sys.meta_path.insert(0, Block())
        from roost.workflow import Durable, NodeServices, WorkflowHost, WorkflowHostFactory

        class Stored:
            def is_set(self):
                return True

            async def wait(self):
                return None

        receipt: Durable = Stored()
        coroutine = receipt.wait()
        try:
            coroutine.send(None)
        except StopIteration:
            pass
        assert "trio" not in sys.modules, sorted(m for m in sys.modules if "trio" in m)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
