"""``python -m roost``: the ``roost`` command."""

from roost.cli import main

main(prog_name="roost")
